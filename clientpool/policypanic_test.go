package clientpool_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/window"
)

// admitBomb is a Rule.Window of the caller's (a completion window under it)
// whose Admit panics while armed.
type admitBomb struct {
	*window.Completion
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
				return admitBomb{window.NewCompletion(l), &armed}
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
