package semaphore_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/semaphore"
	"github.com/ratesem/ratesem/window"
)

// TryAcquireWait has window.Limiter.TryN's contract: admitted (0, nil);
// refused by time, the wait and nothing changed; only releases can help,
// ratesem.ErrInFlight; and the weight errors.
func TestTryAcquireWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := semaphore.NewWithPolicy(window.NewFixedWindow(window.Limit{N: 2, Per: time.Second}))
		start := time.Now()
		for range 2 {
			if d, err := s.TryAcquireWait(1); d != 0 || err != nil {
				t.Fatalf("TryAcquireWait(1) = %v, %v; want admitted", d, err)
			}
			s.Release(1)
		}
		d, err := s.TryAcquireWait(1)
		// the fixed window aligned to the clock ends at the next whole second
		want := start.Truncate(time.Second).Add(time.Second).Sub(start)
		if err != nil || d != want {
			t.Fatalf("full window: TryAcquireWait(1) = %v, %v; want %v, nil", d, err, want)
		}
		if st := s.Stats(); st.InFlight != 0 || st.Admitted != 2 {
			t.Fatalf("a refusal changed the semaphore: %+v", st)
		}
		time.Sleep(d)
		if d, err := s.TryAcquireWait(2); d != 0 || err != nil {
			t.Fatalf("after the wait it named: %v, %v", d, err)
		}
		s.Release(2)
		if _, err := s.TryAcquireWait(3); !errors.Is(err, ratesem.ErrWeightTooLarge) {
			t.Fatalf("weight 3 of 2: %v", err)
		}
		if _, err := s.TryAcquireWait(-1); !errors.Is(err, ratesem.ErrNegativeWeight) {
			t.Fatalf("weight -1: %v", err)
		}

		// Only a release can help: the completion window full of calls in flight.
		c := semaphore.New(2, time.Second)
		if err := c.Acquire(t.Context(), 2); err != nil {
			t.Fatal(err)
		}
		if d, err := c.TryAcquireWait(1); d != 0 || !errors.Is(err, ratesem.ErrInFlight) {
			t.Fatalf("all in flight: %v, %v; want ratesem.ErrInFlight", d, err)
		}
		c.Release(2)
		if d, err := c.TryAcquireWait(1); err != nil || d != time.Second {
			t.Fatalf("after the release: %v, %v; want 1s (the completion window)", d, err)
		}
	})
}

// The GCRA of N 2 and burst 5 caps units in flight at N = 2 in process.
func TestGCRAConcurrencyCap(t *testing.T) {
	s := semaphore.NewWithPolicy(window.NewGCRA(window.Limit{N: 2, Per: time.Second}, 5))
	got := 0
	for range 5 {
		if s.TryAcquire(1) {
			got++
		}
	}
	if got != 2 {
		t.Fatalf("%d of 5 TryAcquire(1) admitted with none released; want 2 (N)", got)
	}
	if _, err := s.TryAcquireWait(1); !errors.Is(err, ratesem.ErrInFlight) {
		t.Fatalf("cap reached: %v; want ratesem.ErrInFlight", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := s.Acquire(ctx, 1); err == nil {
		t.Fatal("Acquire past the cap admitted")
	}
}
