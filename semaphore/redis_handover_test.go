package semaphore

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ratesem/ratesem/redistest"
)

// handoverRun runs P processes (semaphores on clients of their own) × G
// goroutines calling Acquire in a loop with calls of 20 to 50 ms, while
// redis-server is stopped for outage and started again (empty: a
// restart without persistence), and records every call, whoever admitted
// it.
func handoverRun(t *testing.T, srv *redistest.Server, sems []*RateSemaphore, g int, before, outage, after time.Duration) outageRun {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var rec recorder
	var r outageRun
	var wg sync.WaitGroup
	for p, s := range sems {
		for range g {
			wg.Go(func() {
				for ctx.Err() == nil {
					local, err := s.acquireLocal(ctx, 1)
					if err != nil {
						if ctx.Err() != nil {
							return
						}
						time.Sleep(20 * time.Millisecond)
						continue
					}
					start := time.Now()
					time.Sleep(20*time.Millisecond + rand.N(30*time.Millisecond))
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

// TestRedisFallbackHandover: 3 processes × 4 goroutines share 10 units per
// 600 ms (WithFallback(1/3): 3 each while Redis is down); redis-server is
// stopped for 2 s and started again. From one interval after the stop
// on (the hand-over into the fallback aside), every start sees at most 10
// units in flight or ended within the interval, counting the calls of the
// fallback and of Redis together: when Redis answers again, the
// fallback's calls are carried into it and its window is honoured until it
// drains, so Redis does not admit a fresh 10 on top of them (issue 18: 9
// rejected at the server each time Redis came back). Every process is
// back on Redis after the restart.
func TestRedisFallbackHandover(t *testing.T) {
	noLeaks(t)
	srv := redistest.Start(t)
	name := uniqueName(t)
	const (
		N, P, G = 10, 3, 4
		per     = 600 * time.Millisecond
	)
	sems := make([]*RateSemaphore, P)
	for i := range sems {
		sems[i] = newRedisSem(t, newClient(t, srv.Addr()), name, N, per, WithFallback(1.0/3), WithLease(5*time.Second), WithRedisTimeout(250*time.Millisecond))
	}
	r := handoverRun(t, srv, sems, G, 800*time.Millisecond, 2*time.Second, 2500*time.Millisecond)
	from := r.stopAt.Add(per + 100*time.Millisecond)
	var local, back int
	for _, c := range r.calls {
		if c.local {
			local++
		} else if c.start.After(r.started) {
			back++
		}
	}
	if local == 0 || back == 0 {
		t.Fatalf("%d calls of the fallback, %d of Redis after the restart: the run did not cover the hand-over", local, back)
	}
	peak, err := checkCompletionFrom(r.calls, N, per, from)
	if err != nil {
		t.Fatalf("fallback and Redis together, from %v after the restart on: %v", from.Sub(r.started).Round(time.Millisecond), err)
	}
	t.Logf("%d calls, %d of the fallback, %d of Redis after the restart; peak %d of %d", len(r.calls), local, back, peak, N)
	for p, s := range sems {
		if len(filter(r.calls, func(c call) bool { return c.proc == p && !c.local && c.start.After(r.started) })) == 0 {
			t.Errorf("process %d: no call admitted by Redis after the restart", p)
		}
		if st := s.Stats(); st.FallbackCarried == 0 || st.Unavailable || st.InFlight != 0 {
			t.Errorf("process %d: %+v; want the fallback's calls carried, Redis answering, nothing in flight", p, st)
		}
	}
}
