package semaphore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/window"
)

// TestOneTimerNoPolling counts timer wake-ups: each waiter that must wait for
// time is woken once, at the instant it can be admitted.
func TestOneTimerNoPolling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(2, time.Second)
		var wakeups int
		s.o.SetTestHooks(func() { wakeups++ }, nil)
		var wg sync.WaitGroup
		for range 6 {
			wg.Go(func() {
				if err := s.Acquire(t.Context(), 1); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(10 * time.Millisecond)
				s.Release(1)
			})
		}
		wg.Wait()
		// Calls 3-4 wait for the first pair's ends + 1s, calls 5-6 for the
		// second pair's: the first pair's release happens at one instant, so
		// one wake-up admits both; likewise for the second.
		if wakeups != 2 {
			t.Fatalf("timer fired %d times for 2 admission instants; want 2", wakeups)
		}
	})
}

// NewWithPolicy's doc said a call heavier than the window's capacity fails
// with ErrWeightTooLarge; with Per 0 it waited for its context. The
// behaviour is the one x/sync's Weighted has for a weight above its size
// (and New(n, 0) promises x/sync's behaviour), so the doc now says it: with
// Per 0 such a call waits for its context without holding up other callers,
// or until a SetLimit makes it fit; under a rate it fails at once.
func TestNewWithPolicyHeavierThanCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Per 0, burst 3 of 10: a call of 5 can never start.
		s := NewWithPolicy(window.NewTokenBucket(window.Limit{N: 10, Per: 0}, 3))
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		errc := make(chan error, 1)
		go func() { errc <- s.Acquire(ctx, 5) }()
		synctest.Wait()
		select {
		case err := <-errc:
			t.Fatalf("Per 0: Acquire(5) with burst 3 returned %v at once; want it to wait for its context", err)
		default:
		}
		// It does not hold up the others.
		if !s.TryAcquire(3) {
			t.Fatal("Per 0: TryAcquire(3) refused behind a call that can never start")
		}
		s.Release(3)
		if err := s.Acquire(t.Context(), 1); err != nil {
			t.Fatalf("Per 0: Acquire(1) behind a call that can never start: %v", err)
		}
		s.Release(1)
		if err := <-errc; !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ratesem.ErrWeightTooLarge) {
			t.Fatalf("Per 0: Acquire(5) with burst 3 = %v, want its context's error", err)
		}

		// Per 0, the burst following N: a SetLimit that makes it fit admits it.
		g := NewWithPolicy(window.NewGCRA(window.Limit{N: 2, Per: 0}, 0))
		go func() { errc <- g.Acquire(t.Context(), 5) }()
		synctest.Wait()
		if err := g.SetLimit(5, 0); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatalf("Per 0: Acquire(5) after SetLimit(5, 0) = %v, want admitted", err)
		}
		g.Release(5)

		// Under a rate it fails at once.
		r := NewWithPolicy(window.NewTokenBucket(window.Limit{N: 10, Per: time.Second}, 3))
		if err := r.Acquire(t.Context(), 5); !errors.Is(err, ratesem.ErrWeightTooLarge) {
			t.Fatalf("Per 1s: Acquire(5) with burst 3 = %v, want ratesem.ErrWeightTooLarge", err)
		}
	})
}
