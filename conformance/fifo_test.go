package conformance_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/ratesem/ratesem/internal/sched"
	"github.com/ratesem/ratesem/window"
)

// waiterSpec is one waiter of a FIFO scenario: its name and whether it is
// of low priority (else normal).
type waiterSpec struct {
	id  string
	low bool
}

// queueScenario holds one unit of a limit of 1, queues the waiters in
// order (each queued before the next is made), then ends the held call and
// returns the order in which the waiters were admitted. acquire admits one
// unit; queued says how many callers wait (nil: wait with m.settle).
func queueScenario(t *testing.T, m mode, waiters []waiterSpec, acquire func(ctx context.Context) (func(), error), queued func() int) []string {
	t.Helper()
	held, err := acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var (
		o  order
		wg sync.WaitGroup
	)
	for i, w := range waiters {
		ctx := context.Background()
		if w.low {
			ctx = lowPriority(ctx)
		}
		wg.Go(func() {
			release, err := acquire(ctx)
			if err != nil {
				t.Errorf("waiter %s: %v", w.id, err)
				return
			}
			o.add(w.id)
			release()
		})
		if queued != nil {
			waitFor(t, m, fmt.Sprintf("waiter %s queued", w.id), func() bool { return queued() == i+1 })
		} else {
			m.settle()
		}
	}
	held()
	wg.Wait()
	return o.get()
}

// fifoCases are the FIFO and priority scenarios, with the admission order
// each must give.
var fifoCases = []struct {
	name    string
	waiters []waiterSpec
	check   func(got []string) error
}{
	{
		// Waiters of one class are served in their order of arrival.
		name:    "fifo",
		waiters: []waiterSpec{{id: "a"}, {id: "b"}, {id: "c"}, {id: "d"}},
		check:   wantOrder("a", "b", "c", "d"),
	},
	{
		// A later low-priority waiter does not start before an earlier
		// normal one; later normal ones pass an earlier low one.
		name:    "priority",
		waiters: []waiterSpec{{id: "a"}, {id: "low", low: true}, {id: "b"}, {id: "c"}},
		check:   wantOrder("a", "b", "c", "low"),
	},
	{
		// A low waiter is passed by at most MaxOvertakes later normal
		// ones.
		name:    "overtake-bound",
		waiters: append([]waiterSpec{{id: "low", low: true}}, normals(sched.MaxOvertakes+3)...),
		check: func(got []string) error {
			if i := slices.Index(got, "low"); i < 0 || i > sched.MaxOvertakes {
				return fmt.Errorf("the low waiter was admitted %dth, after more than MaxOvertakes = %d later normal waiters", i+1, sched.MaxOvertakes)
			}
			if !slices.IsSorted(slices.DeleteFunc(slices.Clone(got), func(id string) bool { return id == "low" })) {
				return fmt.Errorf("the normal waiters were not served in order: %v", got)
			}
			return nil
		},
	},
}

func normals(k int) []waiterSpec {
	ws := make([]waiterSpec, k)
	for i := range ws {
		ws[i] = waiterSpec{id: fmt.Sprintf("n%02d", i)}
	}
	return ws
}

func wantOrder(want ...string) func([]string) error {
	return func(got []string) error {
		if !slices.Equal(got, want) {
			return fmt.Errorf("admitted in the order %v, want %v", got, want)
		}
		return nil
	}
}

// TestFIFOSemaphore: a RateSemaphore serves its waiters FIFO within a
// class, a higher class first, within MaxOvertakes.
func TestFIFOSemaphore(t *testing.T) {
	forModes(t, false, func(t *testing.T, m mode) {
		for _, c := range fifoCases {
			t.Run(c.name, func(t *testing.T) {
				m.run(t, func(t *testing.T) {
					s := m.mustSem(t, 1, m.per/2, semCfg{})
					got := queueScenario(t, m, c.waiters, func(ctx context.Context) (func(), error) {
						if err := s.Acquire(ctx, 1); err != nil {
							return nil, err
						}
						return func() { s.Release(1) }, nil
					}, func() int { return s.Stats().Waiting })
					if err := c.check(got); err != nil {
						t.Error(err)
					}
				})
			})
		}
	})
}

// TestFIFOPool: the same order per limiter of a Pool.
func TestFIFOPool(t *testing.T) {
	forModes(t, true, func(t *testing.T, m mode) {
		for _, c := range fifoCases {
			t.Run(c.name, func(t *testing.T) {
				m.run(t, func(t *testing.T) {
					p := m.mustPool(t, poolCfg{}, ruleSpec{name: "r", limit: window.Limit{N: 1, Per: m.per / 2}})
					got := queueScenario(t, m, c.waiters, func(ctx context.Context) (func(), error) {
						tk, err := p.Acquire(ctx, charge("r", "k", 1))
						if err != nil {
							return nil, err
						}
						return tk.Release, nil
					}, nil)
					if err := c.check(got); err != nil {
						t.Error(err)
					}
				})
			})
		}
	})
}
