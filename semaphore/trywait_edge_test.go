package semaphore

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/redistest"
)

// TryAcquireWait's edge weights give the same answer in process and over
// Redis: 0 is admitted and holds nothing; a negative weight is
// ErrNegativeWeight; a weight above the limit, up to math.MaxInt64, is
// ErrWeightTooLarge; none of the refusals changes the semaphore.
func TestTryAcquireWaitEdgeWeights(t *testing.T) {
	modes := map[string]func(t *testing.T) *RateSemaphore{
		"inproc": func(t *testing.T) *RateSemaphore { return New(3, time.Second) },
		"redis": func(t *testing.T) *RateSemaphore {
			if testing.Short() {
				t.Skip("needs redis-server")
			}
			return newRedisSem(t, newClient(t, redistest.Start(t).Addr()), uniqueName(t), 3, time.Second)
		},
	}
	for name, mk := range modes {
		t.Run(name, func(t *testing.T) {
			s := mk(t)
			if d, err := s.TryAcquireWait(0); d != 0 || err != nil {
				t.Fatalf("TryAcquireWait(0) = %v, %v; want 0, nil", d, err)
			}
			for _, n := range []int64{-1, math.MinInt64} {
				if d, err := s.TryAcquireWait(n); d != 0 || !errors.Is(err, ratesem.ErrNegativeWeight) {
					t.Fatalf("TryAcquireWait(%d) = %v, %v; want ErrNegativeWeight", n, d, err)
				}
			}
			for _, n := range []int64{4, math.MaxInt64} {
				if d, err := s.TryAcquireWait(n); d != 0 || !errors.Is(err, ratesem.ErrWeightTooLarge) {
					t.Fatalf("TryAcquireWait(%d) = %v, %v; want ErrWeightTooLarge", n, d, err)
				}
			}
			// nothing was taken: the whole limit is still there
			if d, err := s.TryAcquireWait(3); d != 0 || err != nil {
				t.Fatalf("TryAcquireWait(3) after the refusals = %v, %v; want admitted", d, err)
			}
			s.Release(3)
		})
	}
}
