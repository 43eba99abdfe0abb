package clientpool_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// testPoolWholeLoss: three Pools (replicas, clients of their own) share
// rules a and b, 20 per 2 s each (completion windows); they make 20 calls
// under both, which end; Redis then loses everything (lose); 20 more calls
// follow at once. Both rules' completion guarantee must hold over all 40:
// the replicas remember the scope, find its state gone and hold every
// limiter of it full for a Per. Before: the 40 calls took a few hundred
// ms.
func testPoolWholeLoss(t *testing.T, lose func(srv *redistest.Server, admin *goredis.Client)) {
	srv := redistest.Start(t)
	admin := newClient(t, srv.Addr())
	const N, per = 20, 2 * time.Second
	table := twoRules(N, N, per)
	var pools []*clientpool.Pool
	for range 3 {
		pools = append(pools, newRedisPool(t, table, newClient(t, srv.Addr()), "loss"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var mu sync.Mutex
	var calls []fleetCall
	burst := func() {
		var wg sync.WaitGroup
		for i := range N {
			p := pools[i%len(pools)]
			wg.Go(func() {
				chs := []clientpool.Charge{{Rule: "a", Key: "k", Weight: 1}, {Rule: "b", Key: "k", Weight: 1}}
				var tk *clientpool.Ticket
				for {
					var err error
					if tk, err = p.Acquire(ctx, chs...); err == nil {
						break
					}
					if ctx.Err() != nil || !errors.Is(err, ratesem.ErrUnavailable) {
						t.Errorf("Acquire: %v", err)
						return
					}
					time.Sleep(20 * ms) // Redis restarting
				}
				c := fleetCall{charges: chs, ok: true, start: time.Now()}
				time.Sleep(5 * ms)
				c.end = time.Now()
				tk.Release()
				mu.Lock()
				calls = append(calls, c)
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	burst()
	waitUntil(t, 5*time.Second, "the releases reach Redis", func() bool {
		keys, err := admin.Keys(context.Background(), "loss*:f").Result()
		if err != nil {
			return false
		}
		for _, k := range keys {
			if admin.ZCard(context.Background(), k).Val() != 0 {
				return false
			}
		}
		return true
	})
	lostAt := time.Now()
	lose(srv, admin)
	burst()
	var last time.Time
	for _, c := range calls {
		if c.start.After(last) {
			last = c.start
		}
	}
	t.Logf("%d calls; the last started %v after the loss", len(calls), last.Sub(lostAt).Round(time.Millisecond))
	for _, r := range []string{"a", "b"} {
		checkCompletion(t, r, window.Limit{N: N, Per: per}, calls)
	}
}

// waitUntil polls cond every millisecond for up to d (a test's wait for
// another goroutine or process to reach a state, not a timing claim).
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRedisPoolFlushAllHoldsTheWindow: FLUSHALL while the rules' windows
// hold calls that have ended.
func TestRedisPoolFlushAllHoldsTheWindow(t *testing.T) {
	t.Parallel()
	testPoolWholeLoss(t, func(_ *redistest.Server, admin *goredis.Client) {
		if err := admin.FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRedisPoolRestartHoldsTheWindow: a restart without persistence while
// the rules' windows hold calls that have ended.
func TestRedisPoolRestartHoldsTheWindow(t *testing.T) {
	t.Parallel()
	testPoolWholeLoss(t, func(srv *redistest.Server, _ *goredis.Client) { srv.Restart() })
}
