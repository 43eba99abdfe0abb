package conformance_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/window"
)

// The non-blocking decision that returns the wait (redis_rate's
// RetryAfter, x/time/rate's Reservation.Delay), with the convention of
// window.Limiter.TryN: admitted at once (0, nil); or, changing nothing, how
// long until the call could be admitted (a wait > 0, nil error); or, when
// only calls in flight ending can make room, ratesem.ErrInFlight.

// TestTryAcquireWaitSemaphore checks RateSemaphore.TryAcquireWait.
func TestTryAcquireWaitSemaphore(t *testing.T) {
	forModesRun(t, false, func(t *testing.T, m mode) {
		per := m.per
		s := m.mustSem(t, 2, per, semCfg{})
		for i := range 2 {
			if w, err := s.TryAcquireWait(1); w != 0 || err != nil {
				t.Fatalf("TryAcquireWait(1) #%d on a free limit = %v, %v; want 0, nil", i+1, w, err)
			}
		}
		if _, err := s.TryAcquireWait(1); !errors.Is(err, ratesem.ErrInFlight) {
			t.Errorf("TryAcquireWait(1) with the limit in flight: %v, want ratesem.ErrInFlight", err)
		}
		ended := time.Now()
		s.Release(2)
		w, err := s.TryAcquireWait(1)
		if w <= 0 || err != nil {
			t.Fatalf("TryAcquireWait(1) within Per of 2 units that ended (limit 2) = %v, %v; want a wait > 0, nil", w, err)
		}
		// The wait is until ended + per, as read after the call.
		if lo, hi := ended.Add(per).Sub(time.Now())-m.lateness(), per; w < lo || w > hi {
			t.Errorf("TryAcquireWait(1) wait = %v, want in [%v, %v]", w, lo, hi)
		}
		sleepUntil(time.Now().Add(w))
		waitFor(t, m, "a unit admitted after the wait returned", func() bool {
			w, err := s.TryAcquireWait(1)
			return w == 0 && err == nil
		})
		s.Release(1)
		if st := s.Stats(); st.InFlight != 0 {
			t.Errorf("Stats.InFlight = %d, want 0", st.InFlight)
		}
	})
}

// TestTryAcquirePool checks Pool.TryAcquire.
func TestTryAcquirePool(t *testing.T) {
	forModesRun(t, true, func(t *testing.T, m mode) {
		per := m.per
		p := m.mustPool(t, poolCfg{}, ruleSpec{name: "r", limit: window.Limit{N: 2, Per: per}})
		c := charge("r", "k", 1)
		var held []*ticket
		for i := range 2 {
			tk, w, err := p.TryAcquire(c)
			if tk == nil || w != 0 || err != nil {
				t.Fatalf("TryAcquire #%d on a free limit = %v, %v, %v; want a ticket, 0, nil", i+1, tk, w, err)
			}
			held = append(held, tk)
		}
		if tk, _, err := p.TryAcquire(c); tk != nil || !errors.Is(err, ratesem.ErrInFlight) {
			t.Errorf("TryAcquire with the limit in flight = %v, %v; want nil, ratesem.ErrInFlight", tk, err)
		}
		ended := time.Now()
		for _, tk := range held {
			tk.Release()
		}
		tk, w, err := p.TryAcquire(c)
		if tk != nil || w <= 0 || err != nil {
			t.Fatalf("TryAcquire within Per of 2 units that ended = %v, %v, %v; want nil, a wait > 0, nil", tk, w, err)
		}
		if lo, hi := ended.Add(per).Sub(time.Now())-m.lateness(), per; w < lo || w > hi {
			t.Errorf("TryAcquire wait = %v, want in [%v, %v]", w, lo, hi)
		}
		sleepUntil(time.Now().Add(w))
		waitFor(t, m, "a call admitted after the wait returned", func() bool {
			tk, _, _ := p.TryAcquire(c)
			if tk != nil {
				tk.Release()
			}
			return tk != nil
		})
	})
}
