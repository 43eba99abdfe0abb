// Package schedtest holds the property tests of the scheduling controls
// (priority classes, a queue cap, a queue-wait budget) that every limiter
// that queues must pass: a package's test builds its limiter and a RunFunc
// over Run, and calls PriorityOrder, MaxQueue and QueueWait. Tests only.
package schedtest

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
	"github.com/ratesem/ratesem/internal/sched"
	"github.com/ratesem/ratesem/window"
)

// Call is one call of a scheduling run.
type Call struct {
	Prio       ratesem.Priority
	Weight     int64
	Budget     time.Duration // queue-wait budget; 0: none
	Timeout    time.Duration // ctx timeout; 0: none
	Hold       time.Duration // how long the call runs once admitted
	Waited     bool          // it made a waiter (had to wait)
	Grant      int           // 1 + its place among the grants of waiters; 0: none
	QueuedAt   time.Time
	FailedAt   time.Time
	Start, End time.Time
	Err        error
}

// RunFunc runs the calls of one seed on a fresh limiter with WithMaxQueue
// (maxQueue; 0: none), drawing priorities from classes and, with budgets,
// queue-wait budgets and deadlines; it returns the calls and the limit.
type RunFunc func(t *testing.T, seed uint64, classes []ratesem.Priority, maxQueue int, budgets bool) ([]*Call, window.Limit)

// Waiters maps a limiter's waiters to the calls that made them. A limiter's
// test hook calls Joined when a waiter joins the queue and Left when it
// leaves it (granted or not), under the limiter's lock.
type Waiters struct {
	mu     sync.Mutex
	cur    *Call
	byW    map[any]*Call
	grants int
}

// Joined notes that w, the waiter of the call being started, joined.
func (ws *Waiters) Joined(w any) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.byW == nil {
		ws.byW = map[any]*Call{}
	}
	ws.byW[w] = ws.cur
	ws.cur.Waited = true
}

// Left notes that w left the queue, granted when it was admitted.
func (ws *Waiters) Left(w any, granted bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if granted {
		ws.grants++
		ws.byW[w].Grant = ws.grants
	}
}

// Run starts 200 calls at random instants (one at a time, in launch order,
// so that arrival order is known) through acquire, which blocks until the
// call of weight units is admitted or fails and returns its release, and
// returns them when all have ended. It must run in a synctest bubble.
func Run(t *testing.T, seed uint64, classes []ratesem.Priority, maxQueue int, budgets bool, ws *Waiters,
	acquire func(ctx context.Context, weight int64) (release func(), err error)) []*Call {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 11))
	calls := make([]*Call, 200)
	var mu sync.Mutex
	var wg sync.WaitGroup
	blocked := 0
	for i := range calls {
		c := &Call{
			Prio:   classes[rng.IntN(len(classes))],
			Weight: 1 + rng.Int64N(4),
			Hold:   time.Duration(rng.Int64N(int64(300 * time.Millisecond))),
		}
		if budgets && rng.IntN(3) == 0 {
			c.Budget = time.Duration(rng.Int64N(int64(3 * time.Second)))
			if rng.IntN(2) == 0 {
				c.Timeout = c.Budget + time.Duration(rng.Int64N(int64(time.Second)))
			}
		}
		calls[i] = c
		time.Sleep(time.Duration(rng.Int64N(int64(60 * time.Millisecond))))
		synctest.Wait()
		ws.mu.Lock()
		ws.cur = c
		ws.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := ratesem.WithPriority(context.Background(), c.Prio)
			if c.Budget > 0 {
				ctx = ratesem.WithQueueWait(ctx, c.Budget)
			}
			if c.Timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.Timeout)
				defer cancel()
			}
			c.QueuedAt = time.Now()
			release, err := acquire(ctx, c.Weight)
			mu.Lock()
			blocked--
			mu.Unlock()
			if err != nil {
				c.Err, c.FailedAt = err, time.Now()
				return
			}
			c.Start = time.Now()
			time.Sleep(c.Hold)
			c.End = time.Now()
			release()
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
	return calls
}

// CheckOrder checks the priority order and the starvation bound over the
// calls that waited: a call is never granted after a later call of its
// class or a lower one, and at most MaxOvertakes later calls of each
// higher class are granted before it.
func CheckOrder(t *testing.T, seed uint64, calls []*Call) (overtakes int) {
	t.Helper()
	for i, a := range calls {
		if !a.Waited || a.Grant == 0 {
			continue
		}
		perClass := map[ratesem.Priority]int{}
		for _, b := range calls[i+1:] {
			if !b.Waited || b.Grant == 0 || b.Grant > a.Grant {
				continue
			}
			if b.Prio <= a.Prio {
				t.Errorf("seed %d: a %v call granted %d after a later %v call granted %d", seed, a.Prio, a.Grant, b.Prio, b.Grant)
				continue
			}
			perClass[b.Prio]++
			overtakes++
		}
		for cl, n := range perClass {
			if n > sched.MaxOvertakes {
				t.Errorf("seed %d: a %v call overtaken by %d later %v calls, bound %d", seed, a.Prio, n, cl, sched.MaxOvertakes)
			}
		}
	}
	return overtakes
}

// CheckCompletionWindow checks DESIGN.md's completion-window invariant at
// every start: units in flight + units ended in (t−Per, t] ≤ N.
func CheckCompletionWindow(t *testing.T, seed uint64, calls []*Call, l window.Limit) {
	t.Helper()
	for _, a := range calls {
		if a.Start.IsZero() {
			continue
		}
		at := a.Start
		var used int64
		for _, b := range calls {
			if b.Start.IsZero() || b.Start.After(at) {
				continue
			}
			if b.End.After(at) || (b.End.After(at.Add(-l.Per)) && !b.End.After(at)) {
				used += b.Weight
			}
		}
		if used > l.N {
			t.Errorf("seed %d: %d units in the window at %v, limit %v", seed, used, at, l)
		}
	}
}

// PriorityOrder runs calls of two or three classes with no queue cap and
// checks the order, the starvation bound and the completion window, and
// that some call was overtaken (else the runs prove nothing).
func PriorityOrder(t *testing.T, run RunFunc) {
	for _, classes := range [][]ratesem.Priority{
		{ratesem.PriorityLow, ratesem.PriorityHigh},
		{ratesem.PriorityNormal, ratesem.PriorityHigh},
		{ratesem.PriorityLow, ratesem.PriorityNormal, ratesem.PriorityHigh},
	} {
		t.Run(fmt.Sprint(classes), func(t *testing.T) {
			total := 0
			for seed := range uint64(20) {
				synctest.Test(t, func(t *testing.T) {
					calls, l := run(t, seed, classes, 0, false)
					total += CheckOrder(t, seed, calls)
					CheckCompletionWindow(t, seed, calls, l)
					for _, c := range calls {
						if c.Err != nil {
							t.Errorf("seed %d: %v", seed, c.Err)
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

// MaxQueue runs calls with a queue cap of 5 and checks that the queue
// filled, that a call refused for it never queued, and the order and the
// window.
func MaxQueue(t *testing.T, run RunFunc) {
	for seed := range uint64(20) {
		synctest.Test(t, func(t *testing.T) {
			const max = 5
			calls, l := run(t, seed, []ratesem.Priority{ratesem.PriorityLow, ratesem.PriorityHigh}, max, false)
			full := 0
			for _, c := range calls {
				switch {
				case c.Err == nil:
				case errors.Is(c.Err, ratesem.ErrQueueFull):
					full++
					if c.Waited {
						t.Errorf("seed %d: a call refused for a full queue had queued", seed)
					}
				default:
					t.Errorf("seed %d: %v", seed, c.Err)
				}
			}
			if full == 0 {
				t.Errorf("seed %d: the queue was never full", seed)
			}
			CheckOrder(t, seed, calls)
			CheckCompletionWindow(t, seed, calls, l)
		})
	}
}

// QueueWait runs calls with random queue-wait budgets and deadlines and
// checks that a budget is never overrun, that ErrQueueTimeout comes only
// from a budget (never as a deadline), and the window.
func QueueWait(t *testing.T, run RunFunc) {
	for seed := range uint64(20) {
		synctest.Test(t, func(t *testing.T) {
			calls, l := run(t, seed, []ratesem.Priority{ratesem.PriorityLow, ratesem.PriorityNormal, ratesem.PriorityHigh}, 0, true)
			timedOut := 0
			for _, c := range calls {
				if c.Err == nil {
					if c.Budget > 0 && c.Start.Sub(c.QueuedAt) > c.Budget {
						t.Errorf("seed %d: admitted after %v in the queue, budget %v", seed, c.Start.Sub(c.QueuedAt), c.Budget)
					}
					continue
				}
				if !errors.Is(c.Err, ratesem.ErrQueueTimeout) || errors.Is(c.Err, context.DeadlineExceeded) {
					t.Errorf("seed %d: budget %v timeout %v: error %v, want ErrQueueTimeout only", seed, c.Budget, c.Timeout, c.Err)
					continue
				}
				timedOut++
				if c.Budget == 0 {
					t.Errorf("seed %d: ErrQueueTimeout without a budget", seed)
				}
				if c.FailedAt.Sub(c.QueuedAt) > c.Budget {
					t.Errorf("seed %d: failed after %v in the queue, budget %v", seed, c.FailedAt.Sub(c.QueuedAt), c.Budget)
				}
				if c.Timeout != 0 && c.Timeout < c.Budget {
					t.Errorf("seed %d: ErrQueueTimeout with a shorter deadline", seed)
				}
			}
			if timedOut == 0 {
				t.Errorf("seed %d: no budget ever ran out", seed)
			}
			CheckCompletionWindow(t, seed, calls, l)
		})
	}
}
