package clientpool_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/window"
)

// fixedUsageRule is a fixed completion rule of n per minute that reads the
// server's count from X-MBX-USED-WEIGHT-1M, as the Binance preset's
// REQUEST_WEIGHT does.
func fixedUsageRule(n int64) clientpool.Rule {
	return clientpool.Rule{
		Name: "ip", Limit: window.Limit{N: n, Per: time.Minute},
		Window: func(l window.Limit) window.Policy { return window.NewFixedCompletion(l) },
		Usage:  clientpool.BinanceUsage("X-MBX-USED-WEIGHT-1M"),
	}
}

func used(n int64) http.Header {
	return hdr("X-MBX-USED-WEIGHT-1M", strconv.FormatInt(n, 10))
}

// Heavy calls in flight together: the server counts A (30) then B (30)
// after 20 units from elsewhere, and B's answer (80) comes back first. B's
// report alone bounds the units from elsewhere by 80 − 30 = 50, counting A
// (which reached the server before B) as foreign; A's report (50) shows A
// was counted before the count of 80, so the bound at 80 is 80 − 60 = 20.
// The window must come back to 20 from elsewhere: a waiter that the looser
// bound kept out is admitted in the same window, at once. Keeping the
// highest bound of all reports (50) held it to the next window: the
// fleet's own calls counted as foreign for the rest of the window.
func TestObserveHeadersLatestBoundGivesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The bubble's clock starts at 2000-01-01T00:00:00Z: a window's start.
		p := newPool(t, []clientpool.Rule{fixedUsageRule(100)})
		a := acquire(t, p, clientpool.Charge{Rule: "ip", Weight: 30})
		b := acquire(t, p, clientpool.Charge{Rule: "ip", Weight: 30})
		b.ObserveHeaders(used(80))
		if got := p.Snapshot()[0].Used; got != 100 {
			t.Fatalf("Used = %d after B's report of 80, want 100 (60 own + at most 50 from elsewhere, capped at N)", got)
		}
		// C waits: the window is full as far as the pool knows.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		got := make(chan error, 1)
		go func() {
			c, err := p.Acquire(ctx, clientpool.Charge{Rule: "ip", Weight: 20})
			if err == nil {
				c.Release()
			}
			got <- err
		}()
		synctest.Wait()
		a.ObserveHeaders(used(50))
		synctest.Wait()
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("C (20 units) failed after A's report: %v", err)
			}
		default:
			t.Fatal("C still waits after A's report showed 20 from elsewhere: 60 own + 20 leaves 20")
		}
		if now := time.Now(); now.Second() != 0 || now.Nanosecond() != 0 {
			t.Fatalf("C admitted at %v, want at once", now)
		}
		// The window counts 60 (A, B) + 20 (C) + 20 from elsewhere: full.
		if got := p.Snapshot()[0].Used; got != 100 {
			t.Fatalf("Used = %d, want 100", got)
		}
		a.Release()
		b.Release()
	})
}

// The bound never drops below what the server showed: reports that come
// in any order, repeated, stale or hostile never let the window count less
// than the server's count less the pool's own calls the server surely
// counted.
func TestObserveHeadersBoundSafe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{fixedUsageRule(100)})
		a := acquire(t, p, clientpool.Charge{Rule: "ip", Weight: 30})
		b := acquire(t, p, clientpool.Charge{Rule: "ip", Weight: 30})
		// A's report first (50: 20 from elsewhere), then B's (80).
		a.ObserveHeaders(used(50))
		if got := p.Snapshot()[0].Used; got != 80 {
			t.Fatalf("Used = %d after A's 50, want 80 (60 own + 20)", got)
		}
		b.ObserveHeaders(used(80))
		if got := p.Snapshot()[0].Used; got != 80 {
			t.Fatalf("Used = %d after B's 80, want 80 (60 own + 20)", got)
		}
		// A's report again, or a lower count: the call is not subtracted twice.
		a.ObserveHeaders(used(80))
		a.ObserveHeaders(used(10))
		if got := p.Snapshot()[0].Used; got != 80 {
			t.Fatalf("Used = %d after repeated reports, want 80", got)
		}
		// Elsewhere spends 15 more: B's count repeated at 95 (a second
		// report of B is a count with no call at hand) makes the bound
		// 95 − 60 = 35.
		b.ObserveHeaders(used(95))
		if got := p.Snapshot()[0].Used; got != 95 {
			t.Fatalf("Used = %d after a count of 95, want 95", got)
		}
		// A hostile count: full until the window moves, never a wrap.
		b.ObserveHeaders(used(1 << 62))
		if got := p.Snapshot()[0].Used; got != 100 {
			t.Fatalf("Used = %d after a count of 2^62, want 100", got)
		}
		if err := p.Reconcile("ip", "", 1<<62); err != nil {
			t.Fatal(err)
		}
		if got := p.Snapshot()[0].Used; got != 100 {
			t.Fatalf("Used = %d after Reconcile(2^62), want 100", got)
		}
		a.Release()
		b.Release()
		// The next window starts with nothing from elsewhere.
		time.Sleep(time.Minute)
		if got := p.Snapshot()[0].Used; got != 0 {
			t.Fatalf("Used = %d in the next window, want 0", got)
		}
		// A report of the earlier window's call is dropped.
		a.ObserveHeaders(used(90))
		if got := p.Snapshot()[0].Used; got != 0 {
			t.Fatalf("Used = %d after a report of the earlier window, want 0", got)
		}
		// Reconcile, with no call at hand, takes the calls in flight as
		// counted (its documented meaning); a later report of a call is
		// read against the same count.
		c := acquire(t, p, clientpool.Charge{Rule: "ip", Weight: 10})
		if err := p.Reconcile("ip", "", 40); err != nil {
			t.Fatal(err)
		}
		if got := p.Snapshot()[0].Used; got != 40 {
			t.Fatalf("Used = %d after Reconcile(40) with 10 own in flight, want 40", got)
		}
		c.ObserveHeaders(used(40))
		if got := p.Snapshot()[0].Used; got != 40 {
			t.Fatalf("Used = %d after C's report of 40, want 40 (10 own + 30)", got)
		}
		c.ObserveHeaders(used(45)) // again, 5 more from elsewhere
		if got := p.Snapshot()[0].Used; got != 45 {
			t.Fatalf("Used = %d after a count of 45, want 45", got)
		}
		c.Release()
		// A call the server has not seen yet is never taken for room.
		d := acquire(t, p, clientpool.Charge{Rule: "ip", Weight: 55})
		if tk, err := p.Acquire(expiredSoon(t), clientpool.Charge{Rule: "ip", Weight: 1}); err == nil {
			tk.Release()
			t.Fatal("admitted 1 with 10 own + 35 foreign + 55 in flight of 100")
		} else if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ratesem.ErrDeadline) {
			t.Fatal(err)
		}
		d.Release()
	})
}

// expiredSoon returns a context whose deadline is a second away.
func expiredSoon(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Units a window took in from a count with no call at hand (Reconcile)
// are never given back by a report of a lower count, which the server made
// earlier.
func TestObserveHeadersNeverGivesBackReconciled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{fixedUsageRule(100)})
		a := acquire(t, p, clientpool.Charge{Rule: "ip", Weight: 10})
		b := acquire(t, p, clientpool.Charge{Rule: "ip", Weight: 10})
		if err := p.Reconcile("ip", "", 90); err != nil { // 70 from elsewhere, or more
			t.Fatal(err)
		}
		if got := p.Snapshot()[0].Used; got != 90 {
			t.Fatalf("Used = %d after Reconcile(90), want 90", got)
		}
		a.ObserveHeaders(used(30)) // A reached the server before: 20 from elsewhere then
		if got := p.Snapshot()[0].Used; got != 90 {
			t.Fatalf("Used = %d after an earlier, lower count, want 90", got)
		}
		a.Release()
		b.Release()
	})
}
