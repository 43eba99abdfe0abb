package remote

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/internal/rstore"
)

// TestReviewLateCancelsWhenSaturated: round trips left behind by callers
// that gave up fill maxPending (a Redis that stalls); when their answers
// come, each admission granted meanwhile must still be cancelled in Redis,
// not left holding units until its lease ends, and an answer from Redis
// must not mark it unreachable.
func TestReviewLateCancelsWhenSaturated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		gate := make(chan struct{})
		f.admitHook = func(context.Context) error { <-gate; return nil }
		e := newEngine(t, f, Config{})
		s := spec(1<<20, time.Second)
		const k = maxPending - releaseWorkers
		var wg sync.WaitGroup
		for range k {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				defer cancel()
				if _, err := e.Decide(ctx, "s", []rstore.Charge{charge("a", s, 1)}); !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("Decide: %v", err)
				}
			})
		}
		wg.Wait()
		close(gate)
		synctest.Wait()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		st := e.Stats()
		if n := f.inFlight(); n != 0 || st.CancelsFailed != 0 || st.Unavailable {
			t.Fatalf("left in flight in Redis: %d units; CancelsFailed %d, Cancelled %d, Unavailable %v", n, st.CancelsFailed, st.Cancelled, st.Unavailable)
		}
	})
}
