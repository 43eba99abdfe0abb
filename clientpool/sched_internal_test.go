package clientpool

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/window"
)

// schedCall is one call of a scheduling run.
type schedCall struct {
	prio       ratesem.Priority
	weight     int64
	budget     time.Duration // queue-wait budget; 0: none
	timeout    time.Duration // ctx timeout; 0: none
	hold       time.Duration // how long the call runs once admitted
	waited     bool          // it made a waiter (had to wait)
	grant      int           // 1 + its place among the grants of waiters; 0: none
	queuedAt   time.Time
	failedAt   time.Time
	start, end time.Time
	err        error
}

// schedRun starts calls at random instants (one at a time, in launch
// order, so that arrival order is known) on one shared rule of limit, and
// returns them when all have ended.
func schedRun(t *testing.T, seed uint64, classes []ratesem.Priority, maxQueue int, budgets bool) ([]*schedCall, window.Limit) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 11))
	limit := window.Limit{N: 10, Per: time.Second}
	p, err := New(Table{Rules: []Rule{{Name: "ip", Limit: limit}}}, WithMaxQueue(maxQueue))
	if err != nil {
		t.Fatal(err)
	}
	calls := make([]*schedCall, 200)
	var (
		mu     sync.Mutex
		cur    *schedCall
		byW    = map[*waiter]*schedCall{}
		grants int
	)
	p.hook = func(w *waiter, done bool) { // under p.mu
		mu.Lock()
		defer mu.Unlock()
		if !done {
			byW[w] = cur
			cur.waited = true
			for _, h := range w.held {
				if maxQueue > 0 && int(h.lim.waiting) > maxQueue {
					t.Errorf("seed %d: %d calls wait on %s, WithMaxQueue(%d)", seed, h.lim.waiting, h.lim.key, maxQueue)
				}
			}
			return
		}
		if w.err == nil {
			grants++
			byW[w].grant = grants
		}
	}
	var wg sync.WaitGroup
	blocked := 0
	for i := range calls {
		c := &schedCall{
			prio:   classes[rng.IntN(len(classes))],
			weight: 1 + rng.Int64N(4),
			hold:   time.Duration(rng.Int64N(int64(300 * time.Millisecond))),
		}
		if budgets && rng.IntN(3) == 0 {
			c.budget = time.Duration(rng.Int64N(int64(3 * time.Second)))
			if rng.IntN(2) == 0 {
				c.timeout = c.budget + time.Duration(rng.Int64N(int64(time.Second)))
			}
		}
		calls[i] = c
		time.Sleep(time.Duration(rng.Int64N(int64(60 * time.Millisecond))))
		synctest.Wait()
		mu.Lock()
		cur = c
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := ratesem.WithPriority(context.Background(), c.prio)
			if c.budget > 0 {
				ctx = ratesem.WithQueueWait(ctx, c.budget)
			}
			if c.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.timeout)
				defer cancel()
			}
			c.queuedAt = time.Now()
			tk, err := p.Acquire(ctx, Charge{Rule: "ip", Weight: c.weight})
			mu.Lock()
			blocked--
			mu.Unlock()
			if err != nil {
				c.err, c.failedAt = err, time.Now()
				return
			}
			c.start = time.Now()
			time.Sleep(c.hold)
			c.end = time.Now()
			tk.Release()
		}()
		mu.Lock()
		blocked++
		mu.Unlock()
		synctest.Wait() // the call is admitted, failed or waiting
		mu.Lock()
		if maxQueue > 0 && blocked > maxQueue {
			t.Errorf("seed %d: %d calls blocked in Acquire, WithMaxQueue(%d)", seed, blocked, maxQueue)
		}
		mu.Unlock()
	}
	wg.Wait()
	return calls, limit
}

// checkOrder checks the priority order and the starvation bound over the
// calls that waited: a call is never granted after a later call of its
// class or a lower one, and at most MaxOvertakes later calls of each
// higher class are granted before it.
func checkOrder(t *testing.T, seed uint64, calls []*schedCall) (overtakes int) {
	t.Helper()
	for i, a := range calls {
		if !a.waited || a.grant == 0 {
			continue
		}
		perClass := map[ratesem.Priority]int{}
		for _, b := range calls[i+1:] {
			if !b.waited || b.grant == 0 || b.grant > a.grant {
				continue
			}
			if b.prio <= a.prio {
				t.Errorf("seed %d: a %v call granted %d after a later %v call granted %d", seed, a.prio, a.grant, b.prio, b.grant)
				continue
			}
			perClass[b.prio]++
			overtakes++
		}
		for cl, n := range perClass {
			if n > ratesem.MaxOvertakes {
				t.Errorf("seed %d: a %v call overtaken by %d later %v calls, bound %d", seed, a.prio, n, cl, ratesem.MaxOvertakes)
			}
		}
	}
	return overtakes
}

// checkCompletionWindow checks DESIGN.md's completion-window invariant at
// every start: units in flight + units ended in (t−Per, t] ≤ N.
func checkCompletionWindow(t *testing.T, seed uint64, calls []*schedCall, l window.Limit) {
	t.Helper()
	for _, a := range calls {
		if a.start.IsZero() {
			continue
		}
		at := a.start
		var used int64
		for _, b := range calls {
			if b.start.IsZero() || b.start.After(at) {
				continue
			}
			if b.end.After(at) || (b.end.After(at.Add(-l.Per)) && !b.end.After(at)) {
				used += b.weight
			}
		}
		if used > l.N {
			t.Errorf("seed %d: %d units in the window at %v, limit %v", seed, used, at, l)
		}
	}
}

func TestPriorityOrderProperty(t *testing.T) {
	for _, classes := range [][]ratesem.Priority{
		{ratesem.PriorityLow, ratesem.PriorityHigh},
		{ratesem.PriorityNormal, ratesem.PriorityHigh},
		{ratesem.PriorityLow, ratesem.PriorityNormal, ratesem.PriorityHigh},
	} {
		t.Run(fmt.Sprint(classes), func(t *testing.T) {
			total := 0
			for seed := range uint64(20) {
				synctest.Test(t, func(t *testing.T) {
					calls, l := schedRun(t, seed, classes, 0, false)
					total += checkOrder(t, seed, calls)
					checkCompletionWindow(t, seed, calls, l)
					for _, c := range calls {
						if c.err != nil {
							t.Errorf("seed %d: %v", seed, c.err)
						}
					}
				})
			}
			t.Logf("%d overtakes in 20 runs", total)
			if total == 0 {
				t.Error("no call was ever overtaken: the runs do not exercise priorities")
			}
		})
	}
}

func TestMaxQueueProperty(t *testing.T) {
	for seed := range uint64(20) {
		synctest.Test(t, func(t *testing.T) {
			const max = 5
			calls, l := schedRun(t, seed, []ratesem.Priority{ratesem.PriorityLow, ratesem.PriorityHigh}, max, false)
			full := 0
			for _, c := range calls {
				switch {
				case c.err == nil:
				case errors.Is(c.err, ratesem.ErrQueueFull):
					full++
					if c.waited {
						t.Errorf("seed %d: a call refused for a full queue had queued", seed)
					}
				default:
					t.Errorf("seed %d: %v", seed, c.err)
				}
			}
			if full == 0 {
				t.Errorf("seed %d: the queue was never full", seed)
			}
			checkOrder(t, seed, calls)
			checkCompletionWindow(t, seed, calls, l)
		})
	}
}

func TestQueueWaitProperty(t *testing.T) {
	for seed := range uint64(20) {
		synctest.Test(t, func(t *testing.T) {
			calls, l := schedRun(t, seed, []ratesem.Priority{ratesem.PriorityLow, ratesem.PriorityNormal, ratesem.PriorityHigh}, 0, true)
			timedOut := 0
			for _, c := range calls {
				if c.err == nil {
					if c.budget > 0 && c.start.Sub(c.queuedAt) > c.budget {
						t.Errorf("seed %d: admitted after %v in the queue, budget %v", seed, c.start.Sub(c.queuedAt), c.budget)
					}
					continue
				}
				if !errors.Is(c.err, ratesem.ErrQueueTimeout) || errors.Is(c.err, context.DeadlineExceeded) {
					t.Errorf("seed %d: budget %v timeout %v: error %v, want ErrQueueTimeout only", seed, c.budget, c.timeout, c.err)
					continue
				}
				timedOut++
				if c.budget == 0 {
					t.Errorf("seed %d: ErrQueueTimeout without a budget", seed)
				}
				if c.failedAt.Sub(c.queuedAt) > c.budget {
					t.Errorf("seed %d: failed after %v in the queue, budget %v", seed, c.failedAt.Sub(c.queuedAt), c.budget)
				}
				if c.timeout != 0 && c.timeout < c.budget {
					t.Errorf("seed %d: ErrQueueTimeout with a shorter deadline", seed)
				}
			}
			if timedOut == 0 {
				t.Errorf("seed %d: no budget ever ran out", seed)
			}
			checkCompletionWindow(t, seed, calls, l)
		})
	}
}
