package semaphore

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/redistest"
)

// TestRedisFallbackRestartBackWithinAPer: 3 processes × 4 goroutines share
// 10 units per 2 s (WithFallback(1/3)); redis-server is stopped for 1.5 s,
// while the processes wait for the window, and started again empty, well
// within the time the processes know the scope's epoch key must exist. The
// waiters fall back (3 calls each), and the first round trip after the
// restart, the carry of the fallback's calls, finds the whole loss and
// holds the limit from then. From a Per after the stop on, every start sees
// at most 10 units in flight or ended within 2 s (fallback and Redis
// together); the first call Redis admits after the restart comes within
// about a Per of the restart (the hold overlaps the fallback's window
// draining), and the fleet then runs at full rate (20 calls within a Per
// and 300 ms). Before: the carry did not look at the epoch key; the loss
// was found only by the first admission, after the fallback's window had
// drained (a Per after the fallback's calls), and held a Per more: the
// first call came 3.6 s after the restart.
func TestRedisFallbackRestartBackWithinAPer(t *testing.T) {
	noLeaks(t)
	srv := redistest.Start(t)
	name := uniqueName(t)
	const (
		N, P, G = 10, 3, 4
		per     = 2 * time.Second
	)
	sems := make([]*RateSemaphore, P)
	for i := range sems {
		sems[i] = newRedisSem(t, newClient(t, srv.Addr()), name, N, per, WithFallback(1.0/3), WithLease(10*time.Second), WithRedisTimeout(250*time.Millisecond))
	}
	r := handoverRun(t, srv, sems, G, time.Second, 1500*time.Millisecond, 5500*time.Millisecond)
	from := r.stopAt.Add(per + 100*time.Millisecond)
	var local int
	var first time.Time // the first call of Redis after the restart
	for _, c := range sortByStart(r.calls) {
		if c.local {
			local++
		} else if c.start.After(r.started) && first.IsZero() {
			first = c.start
		}
	}
	peak, err := checkCompletionFrom(r.calls, N, per, from)
	if err != nil {
		t.Fatalf("fallback and Redis together, from %v after the restart on: %v", from.Sub(r.started).Round(time.Millisecond), err)
	}
	if local == 0 || first.IsZero() {
		t.Fatalf("%d calls of the fallback, first of Redis after the restart %v: the run did not cover the hand-over", local, first)
	}
	// Full rate: 2N calls of Redis start within a Per and 300 ms, counted
	// from the first call of Redis after the restart or from one of those
	// that follow it within 500 ms (a lone call admitted as the hold ends,
	// a few hundred ms before the fleet's waiters re-ask, must not move
	// the count's window off the fleet's).
	var full int
	for _, a := range r.calls {
		if a.local || a.start.Before(first) || a.start.After(first.Add(500*time.Millisecond)) {
			continue
		}
		full = max(full, len(filter(r.calls, func(c call) bool {
			return !c.local && !c.start.Before(a.start) && c.start.Before(a.start.Add(per+300*time.Millisecond))
		})))
	}
	var lost uint64
	for _, s := range sems {
		lost += s.Stats().StateLost
	}
	t.Logf("%d calls, %d of the fallback; the first of Redis %v after the restart, %d within a Per and 300 ms of it (or of a call 500 ms after it); peak %d of %d; %d admissions found the state lost",
		len(r.calls), local, first.Sub(r.started).Round(time.Millisecond), full, peak, N, lost)
	if lost == 0 {
		t.Error("no admission found the state lost")
	}
	if d := first.Sub(r.started); d > per+500*time.Millisecond {
		t.Errorf("the first call of Redis %v after the restart; want at most a Per and 500 ms", d.Round(time.Millisecond))
	}
	if full < 2*N {
		t.Errorf("%d calls within a Per and 300 ms of the first (or of a call up to 500 ms after it); want %d (full rate)", full, 2*N)
	}
	for p, s := range sems {
		if st := s.Stats(); st.Unavailable || st.InFlight != 0 || st.FallbackCarried == 0 {
			t.Errorf("process %d: %+v; want the fallback's calls carried, Redis answering, nothing in flight", p, st)
		}
	}
}

// TestRedisFrozenCarriesLeaveNoLease: a call the fallback admitted while
// Redis was frozen (SIGSTOP) for 7 s stays in flight while the prober
// tries to carry it into the frozen Redis; the first try's round trip
// gives up after 250 ms and 5 s of grace, and the next one is sent. When
// Redis wakes it runs both: the first is late, and leaves no lease; the
// call is carried once, and once it is released no lease is left. Before:
// the carry Redis ran after the prober gave up on it left a lease of a
// minute nobody released, holding a unit of the limit that long (2 leases
// while the call was in flight, 1 after its release).
func TestRedisFrozenCarriesLeaveNoLease(t *testing.T) {
	srv := redistest.Start(t)
	admin := newClient(t, srv.Addr())
	name := uniqueName(t)
	// Idle connections ready: a round trip during the freeze needs no
	// handshake (which the frozen Redis would not answer) to send its
	// script; round trips end with their contexts (go-redis otherwise
	// waits on a frozen Redis until it answers).
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MinIdleConns: 8, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	s := newRedisSem(t, c, name, 20, 500*time.Millisecond, WithFallback(1), WithLease(time.Minute), WithRedisTimeout(250*time.Millisecond))
	ctx := ctxT(t, 30*time.Second)
	if err := s.Acquire(ctx, 1); err != nil { // the scope's state exists
		t.Fatal(err)
	}
	s.Release(1)
	leases := func() int64 {
		keys, _ := admin.Keys(context.Background(), "*"+name+"*:f").Result()
		var n int64
		for _, k := range keys {
			n += admin.ZCard(context.Background(), k).Val()
		}
		return n
	}
	waitUntil(t, 5*time.Second, "the release reaches Redis", func() bool { return leases() == 0 })
	pid := serverPID(t, admin)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	// Redis frozen for freeze while a call of the fallback is in flight,
	// woken, the call carried: the leases while it is in flight, and
	// after its release.
	cycle := func(freeze time.Duration, carried uint64) (held, left int64) {
		waitUntil(t, 5*time.Second, "idle connections", func() bool { return c.PoolStats().IdleConns >= 4 })
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		if err := s.Acquire(ctx, 1); err != nil { // the fallback admits it
			t.Fatal(err)
		}
		time.Sleep(freeze)
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 5*time.Second, "the call carried", func() bool { return s.Stats().FallbackCarried == carried })
		time.Sleep(200 * time.Millisecond) // every carry queued in the frozen Redis has run
		held = leases()
		s.Release(1)
		waitUntil(t, 5*time.Second, "Redis answers", func() bool { return !s.Stats().Unavailable })
		time.Sleep(500 * time.Millisecond)
		return held, leases()
	}
	// A short freeze first: the carry's script is then cached in Redis, as
	// it is once any process carried a call.
	if held, left := cycle(500*time.Millisecond, 1); held != 1 || left != 0 {
		t.Fatalf("a short freeze: %d leases while the carried call is in flight, %d after its release; want 1 and 0", held, left)
	}
	held, left := cycle(7*time.Second, 2) // longer than a carry's round trip may last (250 ms and 5 s of grace)
	t.Logf("%d leases while the carried call is in flight, %d after its release", held, left)
	if held != 1 || left != 0 {
		t.Fatalf("%d leases while the carried call is in flight, %d after its release; want 1 and 0", held, left)
	}
}

// serverPID returns redis-server's process id (INFO server).
func serverPID(t *testing.T, admin *goredis.Client) int {
	t.Helper()
	info, err := admin.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			if pid, _ := strconv.Atoi(v); pid > 0 {
				return pid
			}
		}
	}
	t.Fatalf("no process_id in INFO server: %q", info)
	return 0
}
