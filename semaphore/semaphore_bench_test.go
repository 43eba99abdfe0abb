package semaphore_test

import (
	"context"
	"testing"
	"time"

	xsem "golang.org/x/sync/semaphore"

	"github.com/ratesem/ratesem/semaphore"
)

// chanSem is the channel semaphore people write by hand, as a baseline.
type chanSem chan struct{}

func (c chanSem) Acquire(ctx context.Context, n int64) error {
	select {
	case c <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (c chanSem) TryAcquire(int64) bool { panic("unused") }
func (c chanSem) Release(int64)         { <-c }

// benchSems are the peers measured side by side. The rate-limited ones get a
// limit they never reach (2^40 per ms), so every Acquire is admitted at once:
// what is measured is the cost of the bookkeeping, not of waiting.
func benchSems() []struct {
	name string
	mk   func() weighted
} {
	const huge = 1 << 40
	return []struct {
		name string
		mk   func() weighted
	}{
		{"x-sync-Weighted", func() weighted { return xsem.NewWeighted(huge) }},
		{"chan", func() weighted { return make(chanSem, 1<<16) }},
		{"RateSemaphore-norate", func() weighted { return semaphore.New(huge, 0) }},
		{"RateSemaphore-completion", func() weighted { return semaphore.New(huge, time.Millisecond) }},
		{"RateSemaphore-start", func() weighted {
			return semaphore.New(huge, time.Millisecond, semaphore.WithStartWindow(time.Millisecond))
		}},
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	for _, bs := range benchSems() {
		b.Run(bs.name+"/serial", func(b *testing.B) {
			s := bs.mk()
			b.ReportAllocs()
			for b.Loop() {
				if err := s.Acquire(ctx, 1); err != nil {
					b.Fatal(err)
				}
				s.Release(1)
			}
		})
		b.Run(bs.name+"/parallel", func(b *testing.B) {
			s := bs.mk()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := s.Acquire(ctx, 1); err != nil {
						b.Error(err)
						return
					}
					s.Release(1)
				}
			})
		})
	}
}

// BenchmarkClock measures the two ways of reading the clock, for reference.
func BenchmarkClock(b *testing.B) {
	b.Run("time.Now", func(b *testing.B) {
		for b.Loop() {
			_ = time.Now()
		}
	})
	epoch := time.Now()
	b.Run("time.Since", func(b *testing.B) {
		for b.Loop() {
			_ = time.Since(epoch)
		}
	})
}
