package redisrate_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/redisrate"
	"github.com/ratesem/ratesem/semaphore"
	"github.com/ratesem/ratesem/window"
)

// WithBlocks refuses a block of fewer than 2 calls, a hold that is not
// positive or exceeds the lease, and is refused in process.
func TestWithBlocksRefused(t *testing.T) {
	c := client(t)
	for _, tc := range []struct {
		opts []semaphore.Option
		want string
	}{
		{[]semaphore.Option{redisrate.WithBlocks(1, 50*time.Millisecond)}, "at least 2"},
		{[]semaphore.Option{redisrate.WithBlocks(0, 50*time.Millisecond)}, "at least 2"},
		{[]semaphore.Option{redisrate.WithBlocks(64, 0)}, "positive hold"},
		{[]semaphore.Option{redisrate.WithBlocks(64, -time.Second)}, "positive hold"},
		{[]semaphore.Option{redisrate.WithLease(time.Second), redisrate.WithBlocks(64, 2*time.Second)}, "exceeds the lease"},
		{[]semaphore.Option{redisrate.WithBlocks(64, 2*time.Minute)}, "exceeds the lease"},
	} {
		s, err := redisrate.NewSemaphore(c, "blocks", 10, time.Second, tc.opts...)
		if err == nil {
			s.Close()
			t.Errorf("%s: accepted", tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "WithBlocks") {
			t.Errorf("error %q: want it to name WithBlocks and %q", err, tc.want)
		}
	}
	s, err := redisrate.NewSemaphore(c, "blocks", 10, time.Second, redisrate.WithLease(time.Second), redisrate.WithBlocks(2, time.Second))
	if err != nil {
		t.Fatalf("a hold equal to the lease: %v", err)
	}
	s.Close()

	o := redisrate.WithBlocks(64, 50*time.Millisecond)
	table := clientpool.Table{Rules: []clientpool.Rule{{Name: "r", Limit: window.Limit{N: 5, Per: time.Minute}}}}
	if _, err := clientpool.New(table, o); err == nil {
		t.Error("clientpool.New in process with WithBlocks: no error")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("semaphore.New with WithBlocks: no panic")
			}
		}()
		semaphore.New(1, time.Second, o)
	}()
}

// With blocks of 64, 32 goroutines of one process on a hot limit cost
// at most 0.1 round trips per Acquire+Release (a block's admission and its
// return per 64 calls), for the semaphore and for a Pool (two rules).
func TestBlocksRoundTrips(t *testing.T) {
	c := client(t)
	h := &trips{}
	c.AddHook(h)
	s, err := redisrate.NewSemaphore(c, "blocks-trips", 1<<40, time.Second, redisrate.WithBlocks(64, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	per := fanOut(t, h, 32, 200, func(ctx context.Context) error {
		if err := s.Acquire(ctx, 1); err != nil {
			return err
		}
		s.Release(1)
		return nil
	})
	t.Logf("semaphore: %.3f round trips per Acquire+Release at 32 goroutines", per)
	if per > 0.1 {
		t.Errorf("semaphore: %.3f round trips per Acquire+Release at 32 goroutines with blocks of 64, want <= 0.1", per)
	}

	fixed := func(l window.Limit) window.Policy { return window.NewFixedCompletion(l) }
	p, err := clientpool.New(clientpool.Table{Scope: "blocks-pool", Rules: []clientpool.Rule{
		{Name: "ip", Limit: window.Limit{N: 1 << 40, Per: time.Minute}, Window: fixed},
		{Name: "account", Limit: window.Limit{N: 1 << 40, Per: 10 * time.Second}, Window: fixed},
	}}, redisrate.Shared(c, redisrate.DefaultPrefix), redisrate.WithBlocks(64, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	per = fanOut(t, h, 32, 200, func(ctx context.Context) error {
		tk, err := p.Acquire(ctx, clientpool.Charge{Rule: "ip", Key: "203.0.113.7", Weight: 1}, clientpool.Charge{Rule: "account", Key: "a", Weight: 1})
		if err != nil {
			return err
		}
		tk.Release()
		return nil
	})
	t.Logf("pool: %.3f round trips per Acquire+Release at 32 goroutines", per)
	if per > 0.1 {
		t.Errorf("pool: %.3f round trips per Acquire+Release at 32 goroutines with blocks of 64, want <= 0.1", per)
	}
}
