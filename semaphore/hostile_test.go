package semaphore_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/semaphore"
	"github.com/ratesem/ratesem/window"
)

// Issue 9: a negative weight is an error on every entry point and changes
// nothing (it used to panic in Acquire and TryAcquire).
func TestNegativeWeightRefusedEverywhere(t *testing.T) {
	for _, pc := range policyCases {
		t.Run(pc.name, func(t *testing.T) {
			l := window.Limit{N: 10, Per: time.Hour}
			s := semaphore.NewWithPolicy(pc.make(l))
			ctx := context.Background()
			for _, n := range []int64{-1, -1000, math.MinInt64} {
				if err := s.Acquire(ctx, n); !errors.Is(err, ratesem.ErrNegativeWeight) || !errors.Is(err, ratesem.ErrNegativeWeight) {
					t.Fatalf("Acquire(%d) = %v, want ratesem.ErrNegativeWeight", n, err)
				}
				if s.TryAcquire(n) {
					t.Fatalf("TryAcquire(%d) admitted", n)
				}
				mustPanic(t, func() { s.Release(n) })
			}
			if st := s.Stats(); st.InFlight != 0 || st.Admitted != 0 {
				t.Fatalf("stats after refused negative weights: %+v", st)
			}
			// Still exactly N per hour: nothing was credited.
			got := 0
			for s.TryAcquire(1) {
				got++
				s.Release(1)
				if got > 100 {
					break
				}
			}
			if cap := pc.make(l).Capacity(); int64(got) > l.N || int64(got) > cap && got != 0 && int64(got) != min(l.N, cap) {
				t.Fatalf("%d admissions under %v after negative weights", got, l)
			}
		})
	}
}

// Huge weights never wrap the in-flight count: TryAcquire(MaxInt64) with a
// unit held must be refused (cur + n wrapped negative on the old code's
// concurrency check).
func TestHugeWeightNeverWraps(t *testing.T) {
	for _, pc := range policyCases {
		t.Run(pc.name, func(t *testing.T) {
			l := window.Limit{N: math.MaxInt64, Per: time.Hour}
			s := semaphore.NewWithPolicy(pc.make(l))
			if !s.TryAcquire(1) {
				t.Skip("policy refuses a unit at once")
			}
			for _, n := range []int64{math.MaxInt64} {
				if s.TryAcquire(n) {
					t.Fatalf("TryAcquire(%d) admitted with 1 of MaxInt64 held", n)
				}
			}
			s.Release(1)
			if st := s.Stats(); st.InFlight != 0 {
				t.Fatalf("InFlight = %d", st.InFlight)
			}
		})
	}
}

// PauseFor with a huge delay saturates into the far future instead of
// wrapping into the past; Pause with the zero time or a past time changes
// nothing; a far-future Pause holds starts (a ctx deadline fails fast).
func TestPauseExtremes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := semaphore.New(10, time.Second)
		s.Pause(time.Time{})
		s.Pause(time.Now().Add(-time.Hour))
		if !s.TryAcquire(1) {
			t.Fatal("refused after Pause(zero) and Pause(past)")
		}
		s.Release(1)
		for _, d := range []time.Duration{math.MaxInt64, math.MaxInt64 - 1, 1 << 62} {
			s.PauseFor(d)
			if until := s.Stats().PausedUntil; !until.After(time.Now()) {
				t.Fatalf("PauseFor(%v): paused until %v, not in the future", d, until)
			}
			if s.TryAcquire(1) {
				t.Fatalf("TryAcquire admitted during PauseFor(%v)", d)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.Acquire(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire during a far pause = %v", err)
		}
		s.Pause(time.Unix(1<<62, 0)) // beyond any Duration from now
		if s.TryAcquire(1) {
			t.Fatal("admitted during a far-future Pause")
		}
	})
}

// SetLimit with absurd limits keeps the accounting and never wraps.
func TestSetLimitExtremes(t *testing.T) {
	for _, pc := range policyCases {
		t.Run(pc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := semaphore.NewWithPolicy(pc.make(window.Limit{N: 10, Per: time.Second}))
				if !s.TryAcquire(1) {
					t.Fatal("first unit refused")
				}
				for _, l := range []window.Limit{
					{N: math.MaxInt64, Per: math.MaxInt64},
					{N: 1, Per: math.MaxInt64},
					{N: math.MaxInt64, Per: 1},
					{N: 0, Per: time.Second},
				} {
					if err := s.SetLimit(l.N, l.Per); err != nil {
						t.Fatalf("SetLimit(%v) = %v", l, err)
					}
					s.TryAcquire(math.MaxInt64)
					s.TryAcquire(1)
					if st := s.Stats(); st.InFlight < 1 {
						t.Fatalf("InFlight = %d after SetLimit(%v): accounting lost or wrapped", st.InFlight, l)
					}
				}
				if err := s.SetLimit(-1, time.Second); err == nil {
					t.Fatal("SetLimit(-1) accepted")
				}
				if err := s.SetLimit(1, -1); err == nil {
					t.Fatal("SetLimit(per -1) accepted")
				}
				s.Release(s.Stats().InFlight)
			})
		})
	}
}
