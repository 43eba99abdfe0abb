package redisrate_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/redisrate"
	"github.com/ratesem/ratesem/window"
)

// trips is a go-redis hook that counts round trips: a command sent alone
// or a pipeline, one each.
type trips struct{ n atomic.Int64 }

func (h *trips) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *trips) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h *trips) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error { h.n.Add(1); return next(ctx, cmds) }
}

// fanOut runs g goroutines of k calls each of call and returns the round
// trips the client made per call.
func fanOut(t *testing.T, h *trips, g, k int, call func(context.Context) error) float64 {
	t.Helper()
	ctx := context.Background()
	for range 4 { // warm up: the scripts loaded, the connections open
		if err := call(ctx); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond) // the warm-up's releases reach Redis
	before := h.n.Load()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range g {
		wg.Go(func() {
			for range k {
				if err := call(ctx); err != nil {
					failed.Add(1)
					return
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d goroutines failed", failed.Load())
	}
	time.Sleep(50 * time.Millisecond) // the last releases reach Redis
	return float64(h.n.Load()-before) / float64(g*k)
}

// Many goroutines of one process on a limit Redis never refuses share
// round trips (issue 20): their decisions go to Redis together and the
// releases ride along, where one call at a time costs two round trips
// (its admission, its release). The bound is loose: what is checked is
// that calls are batched at all, not how well on a loaded machine.
func TestConcurrentCallsShareRoundTrips(t *testing.T) {
	c := client(t)
	h := &trips{}
	c.AddHook(h)
	s, err := redisrate.NewSemaphore(c, "batch", 1<<40, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	per := fanOut(t, h, 32, 30, func(ctx context.Context) error {
		if err := s.Acquire(ctx, 1); err != nil {
			return err
		}
		s.Release(1)
		return nil
	})
	t.Logf("semaphore: %.2f round trips per Acquire+Release at 32 goroutines", per)
	if per > 1.5 {
		t.Errorf("semaphore: %.2f round trips per Acquire+Release at 32 goroutines, want <= 1.5 (2 is one call at a time)", per)
	}

	fixed := func(l window.Limit) window.Policy { return window.NewFixedCompletion(l) }
	p, err := clientpool.New(clientpool.Table{Scope: "batch-pool", Rules: []clientpool.Rule{
		{Name: "ip", Limit: window.Limit{N: 1 << 40, Per: time.Minute}, Window: fixed},
		{Name: "account", Limit: window.Limit{N: 1 << 40, Per: 10 * time.Second}, Window: fixed},
	}}, redisrate.Shared(c, redisrate.DefaultPrefix))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	per = fanOut(t, h, 32, 30, func(ctx context.Context) error {
		tk, err := p.Acquire(ctx, clientpool.Charge{Rule: "ip", Key: "203.0.113.7", Weight: 1}, clientpool.Charge{Rule: "account", Key: "a", Weight: 1})
		if err != nil {
			return err
		}
		tk.Release()
		return nil
	})
	t.Logf("pool: %.2f round trips per Acquire+Release at 32 goroutines", per)
	if per > 1.5 {
		t.Errorf("pool: %.2f round trips per Acquire+Release at 32 goroutines, want <= 1.5 (2 is one call at a time)", per)
	}
}
