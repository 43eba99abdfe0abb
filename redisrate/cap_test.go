package redisrate_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratesem/ratesem/redisrate"
	"github.com/ratesem/ratesem/semaphore"
	"github.com/ratesem/ratesem/window"
)

// A window that does not cap calls in flight (GCRA, a bucket, the sliding
// log) caps them at N over Redis as it does in process: GCRA of N 2 and
// burst 5 admits 2 TryAcquire(1) with none released, not 5; a release
// makes room again. WithMaxUnitsInFlight below N caps them at that.
func TestRedisCapsInFlightAsInProcess(t *testing.T) {
	c := client(t)
	mk := []struct {
		name string
		p    func() window.Policy
		opts []semaphore.Option
		want int
	}{
		{"gcra", func() window.Policy { return window.NewGCRA(window.Limit{N: 2, Per: time.Second}, 5) }, nil, 2},
		{"bucket", func() window.Policy { return window.NewTokenBucket(window.Limit{N: 3, Per: time.Second}, 6) }, nil, 3},
		{"gcra-cap1", func() window.Policy { return window.NewGCRA(window.Limit{N: 2, Per: time.Second}, 5) },
			[]semaphore.Option{semaphore.WithMaxUnitsInFlight(1)}, 1},
	}
	for _, tc := range mk {
		t.Run(tc.name, func(t *testing.T) {
			local := semaphore.NewWithPolicy(tc.p(), tc.opts...)
			shared, err := redisrate.NewSemaphoreWithPolicy(c, "cap-"+tc.name, tc.p(), tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer shared.Close()
			for _, s := range []*semaphore.RateSemaphore{local, shared} {
				got := 0
				for range 6 {
					if s.TryAcquire(1) {
						got++
					}
				}
				if got != tc.want {
					t.Errorf("%d of 6 TryAcquire(1) admitted with none released, want %d", got, tc.want)
				}
			}
			shared.Release(1)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := shared.Acquire(ctx, 1); err != nil { // a release makes room (the window has room)
				t.Fatalf("after a release: %v", err)
			}
		})
	}
	// The sliding log of NewSemaphore (WithStartWindow) too.
	s, err := redisrate.NewSemaphore(c, "cap-log", 2, time.Millisecond, semaphore.WithStartWindow(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := 0
	for range 4 {
		if s.TryAcquire(1) {
			got++
		}
		time.Sleep(2 * time.Millisecond) // the log forgets each start: only the cap holds
	}
	if got != 2 {
		t.Errorf("sliding log: %d of 4 admitted with none released, want 2", got)
	}
}
