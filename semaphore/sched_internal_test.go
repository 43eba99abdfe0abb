package semaphore

import (
	"context"
	"testing"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/schedtest"
	"github.com/ratesem/ratesem/window"
)

// schedRun is schedtest's run on one RateSemaphore of 10 per second.
func schedRun(t *testing.T, seed uint64, classes []ratesem.Priority, maxQueue int, budgets bool) ([]*schedtest.Call, window.Limit) {
	t.Helper()
	limit := window.Limit{N: 10, Per: time.Second}
	s := New(limit.N, limit.Per, WithMaxQueue(maxQueue))
	var ws schedtest.Waiters
	s.o.SetTestHooks(nil, func(w any, done bool, err error, waiting int) { // under the lock
		if done {
			ws.Left(w, err == nil)
			return
		}
		ws.Joined(w)
		if maxQueue > 0 && waiting > maxQueue {
			t.Errorf("seed %d: %d waiters, WithMaxQueue(%d)", seed, waiting, maxQueue)
		}
	})
	calls := schedtest.Run(t, seed, classes, maxQueue, budgets, &ws, func(ctx context.Context, weight int64) (func(), error) {
		if err := s.Acquire(ctx, weight); err != nil {
			return nil, err
		}
		return func() { s.Release(weight) }, nil
	})
	return calls, limit
}

func TestPriorityOrderProperty(t *testing.T) { schedtest.PriorityOrder(t, schedRun) }
func TestMaxQueueProperty(t *testing.T)      { schedtest.MaxQueue(t, schedRun) }
func TestQueueWaitProperty(t *testing.T)     { schedtest.QueueWait(t, schedRun) }
