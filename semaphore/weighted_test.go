package semaphore_test

// Tests that with interval 0 a RateSemaphore behaves exactly like
// golang.org/x/sync/semaphore.Weighted, run side by side against it.

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	xsem "golang.org/x/sync/semaphore"

	"github.com/ratesem/ratesem/semaphore"
)

// weighted is the method set the two share.
type weighted interface {
	Acquire(ctx context.Context, n int64) error
	TryAcquire(n int64) bool
	Release(n int64)
}

var (
	_ weighted = (*semaphore.RateSemaphore)(nil)
	_ weighted = (*xsem.Weighted)(nil)
)

func bothWeighted(n int64) map[string]func() weighted {
	return map[string]func() weighted{
		"x/sync":        func() weighted { return xsem.NewWeighted(n) },
		"RateSemaphore": func() weighted { return semaphore.New(n, 0) },
	}
}

func TestNoRateTryAcquireRefusesWhileOthersWait(t *testing.T) {
	for name, mk := range bothWeighted(2) {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := mk()
				require.True(t, s.TryAcquire(1))
				go func() { _ = s.Acquire(t.Context(), 2); s.Release(2) }()
				synctest.Wait()
				assert.False(t, s.TryAcquire(1), "1 unit is free but a waiter is queued")
				s.Release(1)
				synctest.Wait()
				assert.True(t, s.TryAcquire(2))
				s.Release(2)
			})
		})
	}
}

func TestNoRateOrdering(t *testing.T) {
	for name, mk := range bothWeighted(3) {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := mk()
				require.NoError(t, s.Acquire(t.Context(), 3))
				begin := time.Now()
				starts := make([]time.Duration, 4)
				var wg sync.WaitGroup
				for i, w := range []int64{2, 1, 3, 1} {
					wg.Go(func() {
						require.NoError(t, s.Acquire(t.Context(), w))
						starts[i] = time.Since(begin)
						time.Sleep(time.Millisecond)
						s.Release(w)
					})
					synctest.Wait() // fix the queue order
				}
				s.Release(3)
				wg.Wait()
				// 2 and 1 together, then 3 alone (the last 1 must not pass it), then 1.
				assert.Equal(t, []time.Duration{0, 0, time.Millisecond, 2 * time.Millisecond}, starts)
			})
		})
	}
}

func TestNoRateOversizedWaitsForContextWithoutBlocking(t *testing.T) {
	for name, mk := range bothWeighted(2) {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := mk()
				ctx, cancel := context.WithCancel(t.Context())
				errc := make(chan error)
				go func() { errc <- s.Acquire(ctx, 3) }()
				synctest.Wait()
				assert.True(t, s.TryAcquire(2), "an oversized waiter must not block others")
				s.Release(2)
				select {
				case err := <-errc:
					t.Fatalf("oversized Acquire returned %v before its context ended", err)
				default:
				}
				cancel()
				assert.Same(t, context.Canceled, <-errc)
			})
		})
	}
}

func TestNoRateZeroSize(t *testing.T) {
	for name, mk := range bothWeighted(0) {
		t.Run(name, func(t *testing.T) {
			s := mk()
			assert.True(t, s.TryAcquire(0))
			require.NoError(t, s.Acquire(context.Background(), 0))
			assert.False(t, s.TryAcquire(1))
			s.Release(0)
		})
	}
}

func TestNoRateOverReleasePanics(t *testing.T) {
	for name, mk := range bothWeighted(2) {
		t.Run(name, func(t *testing.T) {
			s := mk()
			require.True(t, s.TryAcquire(1))
			assert.PanicsWithValue(t, "semaphore: released more than held", func() { s.Release(2) })
		})
	}
}

// TestNoRateAcquireCanceledRace hammers the race between a grant and a
// cancellation (x/sync's TestWeightedAcquireCanceled, golang/go#31990 era):
// run with -race; afterwards the whole semaphore must be free.
func TestNoRateAcquireCanceledRace(t *testing.T) {
	for name, mk := range map[string]func() weighted{
		"no rate":    func() weighted { return semaphore.New(4, 0) },
		"completion": func() weighted { return semaphore.New(4, time.Microsecond) },
	} {
		t.Run(name, func(t *testing.T) {
			s := mk()
			var wg sync.WaitGroup
			for g := range 4 * runtime.GOMAXPROCS(0) {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(g), 1))
					for range 300 {
						ctx, cancel := context.WithCancel(context.Background())
						n := 1 + rng.Int64N(4)
						go cancel()
						if s.Acquire(ctx, n) == nil {
							s.Release(n)
						}
						cancel()
					}
				})
			}
			wg.Wait()
			require.NoError(t, s.Acquire(context.Background(), 4), "all units must be back")
			s.Release(4)
		})
	}
}

// TestHammer is x/sync's HammerWeighted against RateSemaphore: many
// goroutines, random weights, both with and without a rate.
func TestHammer(t *testing.T) {
	for _, interval := range []time.Duration{0, time.Microsecond} {
		s := semaphore.New(16, interval)
		var wg sync.WaitGroup
		for g := range 4 * runtime.GOMAXPROCS(0) {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), 2))
				for range 500 {
					n := 1 + rng.Int64N(16)
					require.NoError(t, s.Acquire(context.Background(), n))
					s.Release(n)
				}
			})
		}
		wg.Wait()
		assert.Equal(t, int64(0), s.Stats().InFlight)
	}
}
