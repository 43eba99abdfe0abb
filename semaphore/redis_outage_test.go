package semaphore

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/redistest"
)

// Probe timings of internal/remote, for the bounds below.
const (
	probeMax     = time.Second
	probeTimeout = 250 * time.Millisecond
)

// failure is an Acquire that failed: when it was called, when it returned.
type failure struct {
	called, returned time.Time
	proc             int
	err              error
}

// outageRun is a run of P processes (semaphores on clients of their own,
// go-redis's default options) × G goroutines calling Acquire in a loop,
// with calls of 5 to 15 ms, during which redis-server is stopped for a
// while and started again (empty).
type outageRun struct {
	calls                     []call
	failures                  []failure
	stopAt, stopped           time.Time // around Server.Stop
	startAt, started, endedAt time.Time // around Server.Start; the run's end
}

func runOutage(t *testing.T, srv *redistest.Server, sems []*RateSemaphore, g int, before, outage, after time.Duration) outageRun {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var rec recorder
	var fmu sync.Mutex
	var r outageRun
	var wg sync.WaitGroup
	for p, s := range sems {
		for range g {
			wg.Go(func() {
				for ctx.Err() == nil {
					called := time.Now()
					local, err := s.acquireLocal(ctx, 1)
					if err != nil {
						if ctx.Err() != nil {
							return
						}
						fmu.Lock()
						r.failures = append(r.failures, failure{called, time.Now(), p, err})
						fmu.Unlock()
						time.Sleep(20 * time.Millisecond)
						continue
					}
					start := time.Now()
					time.Sleep(5*time.Millisecond + rand.N(10*time.Millisecond))
					end := time.Now()
					s.Release(1)
					rec.add(call{start: start, end: end, n: 1, proc: p, local: local})
				}
			})
		}
	}
	time.Sleep(before)
	r.stopAt = time.Now()
	srv.Stop()
	r.stopped = time.Now()
	time.Sleep(outage)
	r.startAt = time.Now()
	srv.Start()
	r.started = time.Now()
	time.Sleep(after)
	r.endedAt = time.Now()
	cancel()
	wg.Wait()
	r.calls = rec.all()
	return r
}

// TestRedisDownWithoutFallback: with no fallback, while redis-server is
// stopped Acquire fails with an error matching ratesem.ErrUnavailable (wrapping the
// Redis error, not matching context.DeadlineExceeded), within the round
// trip bound; nothing panics. Once the server is back (restarted empty,
// mid-run), the next probe finds it and the limit holds again across both
// processes; no goroutine is left after Close.
func TestRedisDownWithoutFallback(t *testing.T) {
	noLeaks(t)
	srv := redistest.Start(t)
	name := uniqueName(t)
	const (
		N, P, G = 6, 2, 4
		per     = 200 * time.Millisecond
	)
	sems := make([]*RateSemaphore, P)
	for i := range sems {
		sems[i] = newRedisSem(t, newClient(t, srv.Addr()), name, N, per, WithLease(2*time.Second))
	}
	r := runOutage(t, srv, sems, G, 600*time.Millisecond, 1500*time.Millisecond, 2500*time.Millisecond)
	if len(r.failures) == 0 {
		t.Fatal("no Acquire failed while Redis was down")
	}
	perProc := make([]int, P)
	var slowest time.Duration
	for _, f := range r.failures {
		perProc[f.proc]++
		if !errors.Is(f.err, ratesem.ErrUnavailable) || errors.Is(f.err, context.DeadlineExceeded) {
			t.Fatalf("process %d: %v; want ratesem.ErrUnavailable, not DeadlineExceeded", f.proc, f.err)
		}
		if f.returned.Before(r.stopAt) || f.called.After(r.started.Add(probeMax+probeTimeout)) {
			t.Fatalf("a failure outside the outage: called %v after the stop, returned %v after", f.called.Sub(r.stopAt), f.returned.Sub(r.stopAt))
		}
		from := f.called
		if from.Before(r.stopAt) {
			from = r.stopAt
		}
		slowest = max(slowest, f.returned.Sub(from))
	}
	t.Logf("%d failures %v per process, the slowest after %v; first: %v", len(r.failures), perProc, slowest, r.failures[0].err)
	if slowest > DefaultRedisTimeout+probeTimeout+per+200*time.Millisecond {
		t.Errorf("a failure took %v: not prompt", slowest)
	}
	checkRecovered(t, r, sems, N, per)
}

// TestRedisDownWithFallback: with WithFallback(0.5) and 2 processes
// sharing 8 units per 200 ms, calls go on while redis-server is stopped,
// each process within its 4 units per 200 ms; no Acquire fails. Once the
// server is back the processes return to Redis and the limit of 8 holds
// over the calls Redis admitted since.
func TestRedisDownWithFallback(t *testing.T) {
	noLeaks(t)
	srv := redistest.Start(t)
	name := uniqueName(t)
	const (
		N, P, G = 8, 2, 4
		per     = 200 * time.Millisecond
	)
	sems := make([]*RateSemaphore, P)
	for i := range sems {
		sems[i] = newRedisSem(t, newClient(t, srv.Addr()), name, N, per, WithFallback(0.5), WithLease(2*time.Second))
	}
	r := runOutage(t, srv, sems, G, 600*time.Millisecond, 1500*time.Millisecond, 2500*time.Millisecond)
	for _, f := range r.failures {
		t.Errorf("process %d: Acquire failed with a fallback: %v", f.proc, f.err)
	}
	for p, s := range sems {
		local := filter(r.calls, func(c call) bool { return c.proc == p && c.local })
		if len(local) == 0 {
			t.Fatalf("process %d: no call admitted by the fallback", p)
		}
		if _, err := checkCompletion(local, 4, per); err != nil {
			t.Fatalf("process %d, fallback calls: %v", p, err)
		}
		if st := s.Stats(); st.FallbackAdmitted != uint64(len(local)) {
			t.Errorf("process %d: Stats.FallbackAdmitted %d, %d fallback calls recorded", p, st.FallbackAdmitted, len(local))
		}
		for _, c := range local {
			if c.start.Before(r.stopAt) || c.start.After(r.started.Add(probeMax+per)) {
				t.Errorf("process %d: a fallback call outside the outage", p)
				break
			}
		}
	}
	checkRecovered(t, r, sems, N, per)
}

// checkRecovered checks that both processes went back to Redis after the
// restart, with the limit holding over the calls Redis admitted since, and
// over those it admitted before the stop.
func checkRecovered(t *testing.T, r outageRun, sems []*RateSemaphore, n int64, per time.Duration) {
	t.Helper()
	before := filter(r.calls, func(c call) bool { return !c.local && c.start.Before(r.stopAt) })
	after := filter(r.calls, func(c call) bool { return !c.local && c.start.After(r.started) })
	if _, err := checkCompletion(before, n, per); err != nil {
		t.Errorf("before the stop: %v", err)
	}
	peak, err := checkCompletion(after, n, per)
	if err != nil {
		t.Errorf("after the restart: %v", err)
	}
	t.Logf("Redis admitted %d calls before the stop, %d after the restart (peak %d of %d)", len(before), len(after), peak, n)
	for p, s := range sems {
		if len(filter(after, func(c call) bool { return c.proc == p })) == 0 {
			t.Errorf("process %d: no call admitted by Redis after the restart", p)
		}
		st := s.Stats()
		t.Logf("process %d: %+v", p, st)
		if st.Unavailable || st.Recoveries == 0 || st.RedisErrors == 0 || st.InFlight != 0 || st.Waiting != 0 {
			t.Errorf("process %d at the end: %+v", p, st)
		}
	}
	for _, c := range r.calls {
		if !c.local && c.start.After(r.stopped.Add(50*time.Millisecond)) && c.start.Before(r.startAt) {
			t.Errorf("a call admitted by Redis %v after it was stopped", c.start.Sub(r.stopped))
		}
	}
}

// TestRedisFallbackEdges: with Redis down from the start, the fallback
// admits what fits its share and refuses heavier calls with
// ratesem.ErrUnavailable; TryAcquire asks the fallback; without a fallback the
// failures come at once, with no round trip while the last one is recent.
func TestRedisFallbackEdges(t *testing.T) {
	noLeaks(t)
	srv := redistest.Start(t)
	srv.Stop()
	s := newRedisSem(t, newClient(t, srv.Addr()), uniqueName(t), 4, 300*time.Millisecond,
		WithFallback(0.5), WithRedisTimeout(200*time.Millisecond), WithDeferredRedisChecks())
	ctx := ctxT(t, 5*time.Second)
	if err := s.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Acquire(ctx, 3); !errors.Is(err, ratesem.ErrUnavailable) {
		t.Fatalf("3 units over a fallback share of 2: %v; want ratesem.ErrUnavailable", err)
	}
	if !s.TryAcquire(1) {
		t.Fatal("TryAcquire with room in the fallback failed")
	}
	if s.TryAcquire(1) {
		t.Fatal("TryAcquire over the fallback's 2 units succeeded")
	}
	s.Release(1)
	s.Release(1)
	st := s.Stats()
	if st.FallbackAdmitted != 2 || st.Admitted != 2 || st.InFlight != 0 || !st.Unavailable || st.ReleasesDropped != 0 {
		t.Fatalf("%+v", st)
	}
	nf := newRedisSem(t, newClient(t, srv.Addr()), uniqueName(t), 4, 300*time.Millisecond,
		WithRedisTimeout(200*time.Millisecond), WithDeferredRedisChecks())
	if err := nf.Acquire(ctx, 1); !errors.Is(err, ratesem.ErrUnavailable) {
		t.Fatalf("no fallback: %v", err)
	}
	begin := time.Now()
	for range 10 {
		if err := nf.Acquire(ctx, 1); !errors.Is(err, ratesem.ErrUnavailable) {
			t.Fatalf("no fallback: %v", err)
		}
		if nf.TryAcquire(1) {
			t.Fatal("TryAcquire succeeded with Redis down and no fallback")
		}
	}
	// With the circuit closed each failure would wait for the timeout
	// (20 × ≥ 100 ms); 500 ms leaves room for a loaded machine.
	if d := time.Since(begin); d > 500*time.Millisecond {
		t.Errorf("20 failures with the circuit open took %v", d)
	}
	if st := nf.Stats(); st.RedisAdmits != 1 {
		t.Errorf("%d round trips; want 1, then none until the next probe", st.RedisAdmits)
	}
}
