package conformance_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratesem/ratesem/window"
)

// TestCancelSemaphore: a waiter whose context is cancelled returns
// ctx.Err(), holds nothing and does not delay the caller behind it, which
// is admitted when it would have been without it; afterwards the whole
// limit is free again and Stats is back to zero.
func TestCancelSemaphore(t *testing.T) {
	forModesRun(t, false, func(t *testing.T, m mode) {
		per := m.per
		s := m.mustSem(t, 2, per, semCfg{})
		if err := s.Acquire(context.Background(), 2); err != nil {
			t.Fatal(err)
		}
		// x (2 units) queues first, y (1 unit) behind it.
		ctx, cancel := context.WithCancel(context.Background())
		xErr := make(chan error, 1)
		go func() {
			err := s.Acquire(ctx, 2)
			if err == nil {
				s.Release(2)
			}
			xErr <- err
		}()
		waitFor(t, m, "x queued", func() bool { return s.Stats().Waiting == 1 })
		yStart := make(chan time.Time, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*per)
			defer cancel()
			if err := s.Acquire(ctx, 1); err != nil {
				t.Errorf("y: %v", err)
				yStart <- time.Time{}
				return
			}
			yStart <- time.Now()
		}()
		waitFor(t, m, "y queued", func() bool { return s.Stats().Waiting == 2 })
		cancel()
		if err := <-xErr; !errors.Is(err, context.Canceled) {
			t.Fatalf("the cancelled waiter got %v, want context.Canceled", err)
		}
		waitFor(t, m, "x gone from the queue", func() bool { return s.Stats().Waiting == 1 })
		if st := s.Stats(); st.InFlight != 2 {
			t.Errorf("InFlight = %d after the cancel, want the 2 units held", st.InFlight)
		}
		end := time.Now()
		s.Release(2)
		// y needs one of the 2 units that ended at end: it is admitted at
		// end + per, as if x had never queued.
		start := <-yStart
		if start.IsZero() {
			return
		}
		if late := start.Sub(end.Add(per)); late > m.lateness() {
			t.Errorf("y was admitted %v after end + per: the cancelled waiter delayed it", late)
		}
		yEnd := time.Now()
		s.Release(1)
		// The whole limit is free once the last call left the window.
		sleepUntil(yEnd.Add(per + m.lateness()))
		waitFor(t, m, "the whole limit free", func() bool {
			if !s.TryAcquire(2) {
				return false
			}
			s.Release(2)
			return true
		})
		if st := s.Stats(); st.InFlight != 0 || st.Waiting != 0 || st.Admitted != 3 {
			t.Errorf("Stats = %+v, want nothing in flight or waiting, 3 admitted", st)
		}
	})
}

// TestCancelPool: the same for a Pool, whose Snapshot returns to zero.
func TestCancelPool(t *testing.T) {
	forModesRun(t, true, func(t *testing.T, m mode) {
		per := m.per
		p := m.mustPool(t, poolCfg{}, ruleSpec{name: "r", limit: window.Limit{N: 2, Per: per}})
		held, err := p.Acquire(context.Background(), charge("r", "k", 2))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		xErr := make(chan error, 1)
		go func() {
			tk, err := p.Acquire(ctx, charge("r", "k", 2))
			if err == nil {
				tk.Release()
			}
			xErr <- err
		}()
		m.settle()
		yStart := make(chan time.Time, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*per)
			defer cancel()
			tk, err := p.Acquire(ctx, charge("r", "k", 1))
			if err != nil {
				t.Errorf("y: %v", err)
				yStart <- time.Time{}
				return
			}
			yStart <- time.Now()
			tk.Release()
		}()
		m.settle()
		cancel()
		if err := <-xErr; !errors.Is(err, context.Canceled) {
			t.Fatalf("the cancelled waiter got %v, want context.Canceled", err)
		}
		end := time.Now()
		held.Release()
		start := <-yStart
		if start.IsZero() {
			return
		}
		if late := start.Sub(end.Add(per)); late > m.lateness() {
			t.Errorf("y was admitted %v after end + per: the cancelled waiter delayed it", late)
		}
		sleepUntil(time.Now().Add(per + m.lateness()))
		waitFor(t, m, "the whole limit free", func() bool {
			tk := tryPool(t, p, m.quick(), charge("r", "k", 2))
			if tk == nil {
				return false
			}
			tk.Release()
			return true
		})
		for _, ks := range p.Snapshot() {
			if ks.InFlight != 0 {
				t.Errorf("Snapshot: %+v, want nothing in flight", ks)
			}
		}
	})
}

// lateness is how late after the instant its bookkeeping allows it a
// waiter may be admitted: 0 in process (virtual time); over Redis the
// round trips, the jitter the fronts add to a wait (at most a tenth of it)
// and the scheduling of a loaded machine.
func (m mode) lateness() time.Duration {
	if !m.redis {
		return 0
	}
	return m.per / 2
}
