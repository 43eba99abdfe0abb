package engine

import (
	"context"
	"testing"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/schedtest"
	"github.com/ratesem/ratesem/window"
)

// schedRun is schedtest's run on one shared rule of 10 per second.
func schedRun(t *testing.T, seed uint64, classes []ratesem.Priority, maxQueue int, budgets bool) ([]*schedtest.Call, window.Limit) {
	t.Helper()
	limit := window.Limit{N: 10, Per: time.Second}
	p, err := New([]Rule{{Name: "ip", Limit: limit}}, "", func(c *Config) { c.MaxQueue = maxQueue })
	if err != nil {
		t.Fatal(err)
	}
	var ws schedtest.Waiters
	p.hook = func(w *waiter, done bool) { // under p.mu
		if done {
			ws.Left(w, w.err == nil)
			return
		}
		ws.Joined(w)
		for _, h := range w.held {
			if maxQueue > 0 && int(h.lim.waiting) > maxQueue {
				t.Errorf("seed %d: %d calls wait on %s, WithMaxQueue(%d)", seed, h.lim.waiting, h.lim.key, maxQueue)
			}
		}
	}
	calls := schedtest.Run(t, seed, classes, maxQueue, budgets, &ws, func(ctx context.Context, weight int64) (func(), error) {
		tk := new(Ticket)
		if err := p.Acquire(ctx, tk, []Charge{{Rule: "ip", Weight: weight}}); err != nil {
			return nil, err
		}
		return tk.Release, nil
	})
	return calls, limit
}

func TestPriorityOrderProperty(t *testing.T) { schedtest.PriorityOrder(t, schedRun) }
func TestMaxQueueProperty(t *testing.T)      { schedtest.MaxQueue(t, schedRun) }
func TestQueueWaitProperty(t *testing.T)     { schedtest.QueueWait(t, schedRun) }
