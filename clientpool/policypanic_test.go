package clientpool_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/internal/win"
	"github.com/ratesem/ratesem/window"
)

// admitBomb is a Rule.Window of the caller's (a completion window under it)
// whose Admit panics while armed.
type admitBomb struct {
	*win.Completion
	armed *atomic.Bool
}

func (p admitBomb) Admit(now time.Time, n int64) (time.Time, bool) {
	if p.armed.Load() {
		panic("admitBomb: Admit")
	}
	return p.Completion.Admit(now, n)
}

// A Rule.Window that panics while a call's charges are admitted (after
// another rule's window admitted its charge) leaves no trace: the panic
// reaches the caller of Acquire, and the other rule's window does not
// count a call nobody holds. On the base commit the first rule's window
// kept the unit in flight for good: a rule of 2 never admitted 2 again.
func TestRuleWindowPanicLeavesNoCharge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var armed atomic.Bool
		p := newPool(t, []clientpool.Rule{
			ruleN("a", 2, time.Second),
			{Name: "b", Limit: window.Limit{N: 5, Per: time.Second}, Window: func(l window.Limit) window.Policy {
				return admitBomb{win.NewCompletion(l), &armed}
			}},
		})
		used := func() int64 {
			for _, ks := range p.Snapshot() {
				if ks.Rule == "a" {
					if ks.InFlight != 0 {
						t.Fatalf("rule a: %+v, want nothing in flight", ks)
					}
					return ks.Used
				}
			}
			return 0
		}
		both := []clientpool.Charge{{Rule: "a", Weight: 1}, {Rule: "b", Weight: 1}}
		armed.Store(true)

		// Admitted at once: the panic reaches the caller of Acquire.
		r := func() (r any) {
			defer func() { r = recover() }()
			_, _ = p.Acquire(context.Background(), both...)
			return nil
		}()
		if r == nil {
			t.Fatal("the window's panic did not reach the caller")
		}
		if u := used(); u != 0 {
			t.Fatalf("rule a counts %d units after the panic, want 0", u)
		}

		// Decided for a waiter by a Release: the panic reaches the
		// Release, the waiter stays queued until its context ends.
		armed.Store(false)
		hold := acquire(t, p, clientpool.Charge{Rule: "a", Weight: 2})
		ctx, cancel := context.WithCancel(context.Background())
		got := make(chan error, 1)
		go func() {
			_, err := p.Acquire(ctx, both...)
			got <- err
		}()
		synctest.Wait()
		armed.Store(true)
		if r := func() (r any) { defer func() { r = recover() }(); hold.Release(); return nil }(); r == nil {
			t.Fatal("the window's panic did not reach the Release that decided the waiter")
		}
		if u := used(); u != 2 {
			t.Fatalf("rule a counts %d units after the panic, want the 2 that ended", u)
		}
		cancel()
		if err := <-got; err == nil {
			t.Fatal("the waiter was admitted")
		}

		armed.Store(false)
		time.Sleep(2 * time.Second)
		c := acquire(t, p, clientpool.Charge{Rule: "a", Weight: 2})
		c.Release()
	})
}

// doneBomb is a Rule.Window of the caller's (a completion window under it)
// whose Done panics while armed.
type doneBomb struct {
	*win.Completion
	armed *atomic.Bool
}

func (d doneBomb) Done(now time.Time, n int64) {
	if d.armed.Load() {
		panic("doneBomb: Done")
	}
	d.Completion.Done(now, n)
}

// A Rule.Window whose Done panics as a ticket is released leaves the
// ticket's other charges released all the same: the panic reaches the
// caller of Release, and no other rule keeps units in flight for it. On
// the base commit the charges after the panicking one stayed in flight for
// good.
func TestRuleWindowDonePanicReleasesTheOthers(t *testing.T) {
	for _, order := range [][]string{{"a", "b", "c"}, {"b", "a", "c"}, {"c", "b", "a"}} {
		t.Run(order[0]+order[1]+order[2], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var armed atomic.Bool
				p := newPool(t, []clientpool.Rule{
					ruleN("a", 2, time.Second),
					{Name: "b", Limit: window.Limit{N: 5, Per: time.Second}, Window: func(l window.Limit) window.Policy {
						return doneBomb{win.NewCompletion(l), &armed}
					}},
					ruleN("c", 2, time.Second),
				})
				var cs []clientpool.Charge
				for _, r := range order {
					cs = append(cs, clientpool.Charge{Rule: r, Weight: 1})
				}
				tk := acquire(t, p, cs...)
				armed.Store(true)
				if r := func() (r any) { defer func() { r = recover() }(); tk.Release(); return nil }(); r == nil {
					t.Fatal("the window's panic did not reach the caller of Release")
				}
				for _, ks := range p.Snapshot() {
					if ks.InFlight != 0 {
						t.Fatalf("after the panic: %+v, want nothing in flight", ks)
					}
				}
				armed.Store(false)
				time.Sleep(2 * time.Second)
				for _, r := range []string{"a", "c"} {
					tk := acquire(t, p, clientpool.Charge{Rule: r, Weight: 2})
					tk.Release()
				}
			})
		})
	}
}
