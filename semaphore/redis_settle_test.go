package semaphore

import (
	"strconv"
	"testing"
	"time"

	"github.com/ratesem/ratesem/internal/rstore"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// logged returns the units the completion log of the semaphore name keeps
// in Redis (field z of its hash).
func logged(t *testing.T, s *RateSemaphore, addr, name string) func() int64 {
	c := newClient(t, addr)
	st, err := rstore.New(c, DefaultRedisPrefix, rstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := st.Keys(name, rstore.Charge{Rule: redisRule})[0]
	return func() int64 {
		v, _ := c.HGet(ctxT(t, time.Second), h, "z").Result()
		z, _ := strconv.ParseInt(v, 10, 64)
		return z
	}
}

// TestRedisReleaseSettled: releaseSettled ends the oldest call of exactly
// n units and Redis logs its settled weight instead of n: a refund (4
// admitted, 1 settled: 4 more fit at once in 5), a debit (1 admitted, 3
// settled: 3 logged), a negative actual as 0; without a held call of
// exactly n units it is release(n) (the estimate counts).
func TestRedisReleaseSettled(t *testing.T) {
	addr := redistest.Start(t).Addr()
	name := uniqueName(t)
	s := newRedisSem(t, newClient(t, addr), name, 5, time.Hour)
	z := logged(t, s, addr, name)
	ctx := ctxT(t, 10*time.Second)
	if err := s.Acquire(ctx, 4); err != nil {
		t.Fatal(err)
	}
	s.o.ReleaseSettled(4, 1)
	waitUntil(t, 5*time.Second, "the settlement of 4 as 1 in Redis", func() bool { return z() == 1 })
	if st := s.Stats(); st.InFlight != 0 {
		t.Fatalf("%+v", st)
	}
	if !s.TryAcquire(4) {
		t.Fatal("the refund of 3 not seen: 4 more refused")
	}
	s.o.ReleaseSettled(4, 4) // plain
	waitUntil(t, 5*time.Second, "a plain settlement", func() bool { return z() == 5 })

	s2 := newRedisSem(t, newClient(t, addr), name+"b", 5, time.Hour)
	z2 := logged(t, s2, addr, name+"b")
	if err := s2.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	s2.o.ReleaseSettled(1, 3)
	waitUntil(t, 5*time.Second, "the debit", func() bool { return z2() == 3 })
	if err := s2.Acquire(ctx, 2); err != nil {
		t.Fatal(err)
	}
	s2.o.ReleaseSettled(2, -7) // counts as 0
	waitUntil(t, 5*time.Second, "a settlement of 0", func() bool {
		st := s2.Stats()
		return st.InFlight == 0 && z2() == 3 && s2.o.RemoteStats().InFlight == 0
	})
	// The engine counts the call out when it queues the release; Redis
	// may still hold its lease for a moment: retry without waiting.
	waitUntil(t, 5*time.Second, "2 units free again", func() bool { return s2.TryAcquire(2) })
	s2.o.ReleaseSettled(1, 0) // no call of 1 unit: release(1), the rest stays in flight
	if st := s2.Stats(); st.InFlight != 1 {
		t.Fatalf("after releasing 1 of 2: %+v", st)
	}
	s2.Release(1)
	waitUntil(t, 5*time.Second, "the estimate of 2", func() bool { return z2() == 5 })
}

// TestRedisReleaseSettledGCRA: over a policy of package window, Redis's
// GCRA moves its TAT exactly as win.GCRA.Settle would: back by the
// refund's emission intervals, on by the debit's.
func TestRedisReleaseSettledGCRA(t *testing.T) {
	addr := redistest.Start(t).Addr()
	name := uniqueName(t)
	lim := window.Limit{N: 4, Per: 40 * time.Second} // emission 10 s: the TAT stays ahead in the test
	s, err := redisNewPolicy(newClient(t, addr), name, window.NewGCRA(lim, 4))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	c := newClient(t, addr)
	st, _ := rstore.New(c, DefaultRedisPrefix, rstore.Options{})
	h := st.Keys(name, rstore.Charge{Rule: redisRule})[0]
	tat := func() int64 {
		v, _ := c.HGet(ctxT(t, time.Second), h, "t").Result()
		x, _ := strconv.ParseInt(v, 10, 64)
		return x
	}
	ctx := ctxT(t, 10*time.Second)
	settle := func(n, actual int64, move time.Duration) {
		t.Helper()
		before := tat()
		s.o.ReleaseSettled(n, actual)
		waitUntil(t, 5*time.Second, "the settlement in Redis", func() bool { return tat() != before })
		if got := time.Duration(tat()-before) * time.Microsecond; got != move {
			t.Fatalf("settling %d as %d moved the TAT by %v; want %v", n, actual, got, move)
		}
	}
	if err := s.Acquire(ctx, 2); err != nil { // TAT now+20 s
		t.Fatal(err)
	}
	settle(2, 1, -10*time.Second) // refund 1
	if !s.TryAcquire(3) {         // tolerance 10 s for 3 units: TAT now+40 s
		t.Fatal("the refund not seen: 3 refused")
	}
	settle(3, 0, -30*time.Second) // refund 3: TAT now+10 s
	if !s.TryAcquire(2) {         // tolerance 20 s: TAT now+30 s
		t.Fatal("the refund of 3 not seen")
	}
	settle(2, 5, 30*time.Second) // debit 3: TAT now+60 s
	if s.TryAcquire(1) {         // tolerance 30 s
		t.Fatal("the debit not counted")
	}
}
