package conformance_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratesem/ratesem/window"
)

// TestPauseSemaphore: after Pause(until) and PauseFor(d) no call starts
// before the instant, TryAcquire fails meanwhile, and callers go on after.
func TestPauseSemaphore(t *testing.T) {
	forModesRun(t, false, func(t *testing.T, m mode) {
		per := m.per
		s := m.mustSem(t, 5, per, semCfg{})
		until := time.Now().Add(per)
		s.Pause(until)
		if s.TryAcquire(1) {
			t.Error("TryAcquire admitted a call during a pause")
		}
		if err := s.Acquire(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		if start := time.Now(); start.Before(until) {
			t.Errorf("a call started %v before the end of Pause", until.Sub(start))
		}
		s.Release(1)

		before := time.Now()
		s.PauseFor(per)
		if err := s.Acquire(context.Background(), 2); err != nil {
			t.Fatal(err)
		}
		if start := time.Now(); start.Before(before.Add(per)) {
			t.Errorf("a call started %v before the end of PauseFor", before.Add(per).Sub(start))
		}
		s.Release(2)
	})
}

// TestPausePool: Pool.Pause holds one key until the instant and leaves
// the other keys alone.
func TestPausePool(t *testing.T) {
	forModesRun(t, true, func(t *testing.T, m mode) {
		per := m.per
		p := m.mustPool(t, poolCfg{}, ruleSpec{name: "r", limit: window.Limit{N: 5, Per: per}})
		until := time.Now().Add(per)
		if err := p.Pause("r", "paused", until); err != nil {
			t.Fatal(err)
		}
		other, err := p.Acquire(context.Background(), charge("r", "other", 1))
		if err != nil {
			t.Fatal(err)
		}
		if at := time.Now(); !at.Before(until) {
			t.Errorf("a call on another key waited for the pause")
		}
		other.Release()
		tk, err := p.Acquire(context.Background(), charge("r", "paused", 1))
		if err != nil {
			t.Fatal(err)
		}
		if start := time.Now(); start.Before(until) {
			t.Errorf("a call on the paused key started %v before the end of the pause", until.Sub(start))
		}
		tk.Release()
	})
}

// TestSetLimitSemaphore: SetLimit applies the new limit at once and keeps
// the accounting: units that ended within the window count against a
// lowered limit, a raised one admits at once what fits.
func TestSetLimitSemaphore(t *testing.T) {
	forModesRun(t, false, func(t *testing.T, m mode) {
		per := m.per
		s := m.mustSem(t, 4, per, semCfg{})
		if err := s.Acquire(context.Background(), 4); err != nil {
			t.Fatal(err)
		}
		ended := time.Now()
		s.Release(4)
		if err := s.SetLimit(2, per); err != nil {
			t.Fatal(err)
		}
		if got := s.Limit(); got != (window.Limit{N: 2, Per: per}) {
			t.Errorf("Limit() = %v after SetLimit(2, %v)", got, per)
		}
		if s.TryAcquire(1) {
			t.Error("a unit admitted within Per of 4 units that ended, under a limit lowered to 2")
		}
		// Once they left the window, the new limit of 2 applies.
		sleepUntil(ended.Add(per + m.lateness()))
		waitFor(t, m, "2 units admitted once the window moved", func() bool { return s.TryAcquire(2) })
		if s.TryAcquire(1) {
			t.Error("a third unit admitted under a limit of 2")
		}
		s.Release(2)
		// Raised to 6 with the 2 units that just ended in the window: 4 fit.
		if err := s.SetLimit(6, per); err != nil {
			t.Fatal(err)
		}
		if !s.TryAcquire(4) {
			t.Error("4 units refused after the limit was raised to 6 with 2 counted")
		}
		if s.TryAcquire(1) {
			t.Error("a seventh unit admitted under a limit of 6")
		}
		s.Release(4)
	})
}

// TestSetLimitPool: the same for Pool.SetLimit.
func TestSetLimitPool(t *testing.T) {
	forModesRun(t, true, func(t *testing.T, m mode) {
		per := m.per
		p := m.mustPool(t, poolCfg{}, ruleSpec{name: "r", limit: window.Limit{N: 4, Per: per}})
		k := charge("r", "k", 4)
		tk, err := p.Acquire(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		ended := time.Now()
		tk.Release()
		if err := p.SetLimit("r", window.Limit{N: 2, Per: per}); err != nil {
			t.Fatal(err)
		}
		if tk := tryPool(t, p, m.quick(), charge("r", "k", 1)); tk != nil {
			t.Error("a unit admitted within Per of 4 units that ended, under a limit lowered to 2")
		}
		sleepUntil(ended.Add(per + m.lateness()))
		var two *ticket
		waitFor(t, m, "2 units admitted once the window moved", func() bool {
			two = tryPool(t, p, m.quick(), charge("r", "k", 2))
			return two != nil
		})
		if tk := tryPool(t, p, m.quick(), charge("r", "k", 1)); tk != nil {
			t.Error("a third unit admitted under a limit of 2")
		}
		two.Release()
		if err := p.SetLimit("r", window.Limit{N: 6, Per: per}); err != nil {
			t.Fatal(err)
		}
		four := tryPool(t, p, m.quick(), charge("r", "k", 4))
		if four == nil {
			t.Fatal("4 units refused after the limit was raised to 6 with 2 counted")
		}
		if tk := tryPool(t, p, m.quick(), charge("r", "k", 1)); tk != nil {
			t.Error("a seventh unit admitted under a limit of 6")
		}
		four.Release()
	})
}
