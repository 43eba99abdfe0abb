package semaphore

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/window/redis/redistest"
)

// server is one kind of Redis the fleet tests run against.
type server struct {
	name      string
	start     func(t *testing.T) string
	newClient func(t testing.TB, addr string) goredis.UniversalClient
}

var servers = []server{
	{"single", func(t *testing.T) string { return redistest.Start(t) },
		func(t testing.TB, addr string) goredis.UniversalClient { return newClient(t, addr) }},
	{"cluster", func(t *testing.T) string { return redistest.StartCluster(t) },
		func(t testing.TB, addr string) goredis.UniversalClient { return newClusterClient(t, addr) }},
}

// hammer runs P semaphores (clients of their own: processes, as far as
// Redis can tell) × G goroutines over one name for run, with calls of 1 or
// 2 units that take 5 to 25 ms, and returns every call. during, if set,
// runs while they hammer.
func hammer(t *testing.T, sems []*RateSemaphore, g int, run time.Duration, during func()) []call {
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	var rec recorder
	var wg sync.WaitGroup
	for p, s := range sems {
		for range g {
			wg.Go(func() {
				for ctx.Err() == nil {
					n := int64(1)
					if rand.IntN(5) == 0 {
						n = 2
					}
					if err := s.Acquire(ctx, n); err != nil {
						if ctx.Err() == nil && !errors.Is(err, ErrDeadline) {
							t.Errorf("process %d: %v", p, err)
						}
						if ctx.Err() == nil {
							continue
						}
						return
					}
					start := time.Now()
					time.Sleep(5*time.Millisecond + rand.N(20*time.Millisecond))
					end := time.Now()
					s.Release(n)
					rec.add(call{start: start, end: end, n: n, proc: p})
				}
			})
		}
	}
	if during != nil {
		during()
	}
	wg.Wait()
	return rec.all()
}

// TestRedisManyProcessesShareTheLimit: four semaphores sharing one name
// (four processes, as far as Redis can tell), six goroutines each, hammer
// one limit of 8 units per 200 ms for 2 s, on a single server and on a
// cluster. The completion guarantee holds across all of them at every
// start, the throughput is at least 80% of N / (interval + latency), the
// most the completion window allows, and no process starves.
func TestRedisManyProcessesShareTheLimit(t *testing.T) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			addr := srv.start(t)
			name := uniqueName(t)
			const (
				N, P, G = 8, 4, 6
				per     = 200 * time.Millisecond
				run     = 2 * time.Second
			)
			sems := make([]*RateSemaphore, P)
			for i := range sems {
				sems[i] = newRedisSem(t, srv.newClient(t, addr), name, N, per)
			}
			began := time.Now()
			calls := hammer(t, sems, G, run, nil)
			elapsed := time.Since(began)
			peak, err := checkCompletion(calls, N, per)
			if err != nil {
				t.Fatal(err)
			}
			var units int64
			var latency time.Duration
			perProc := make([]int64, P)
			for _, c := range calls {
				units += c.n
				latency += c.end.Sub(c.start)
				perProc[c.proc] += c.n
			}
			latency /= time.Duration(len(calls))
			ideal := float64(N) * elapsed.Seconds() / (per + latency).Seconds()
			t.Logf("%d calls, %d units in %v (peak %d of %d); mean latency %v; ideal %.1f units: %.0f%%; units per process %v",
				len(calls), units, elapsed.Round(time.Millisecond), peak, N, latency.Round(time.Microsecond), ideal, 100*float64(units)/ideal, perProc)
			if float64(units) < 0.8*ideal {
				t.Errorf("throughput %d units, below 80%% of %.1f", units, ideal)
			}
			var admitted uint64
			for i, s := range sems {
				st := s.Stats()
				admitted += st.Admitted
				if st.InFlight != 0 || st.RedisErrors != 0 || st.FallbackAdmitted != 0 || st.ReleasesDropped != 0 {
					t.Errorf("process %d: %+v", i, st)
				}
			}
			if admitted != uint64(len(calls)) {
				t.Errorf("Stats count %d admissions, the run recorded %d calls", admitted, len(calls))
			}
			for p, u := range perProc {
				if u == 0 {
					t.Errorf("process %d made no call: starved", p)
				}
			}
		})
	}
}

// TestRedisStartWindowShared: the start window (WithStartWindow) over
// three processes: no more than N units start in any interval.
func TestRedisStartWindowShared(t *testing.T) {
	addr := redistest.Start(t)
	name := uniqueName(t)
	const (
		N, P, G = 6, 3, 4
		per     = 200 * time.Millisecond
	)
	sems := make([]*RateSemaphore, P)
	for i := range sems {
		sems[i] = newRedisSem(t, newClient(t, addr), name, N, per, WithStartWindow(0))
	}
	calls := hammer(t, sems, G, 1500*time.Millisecond, nil)
	peak, err := checkStarts(calls, N, per, 2*time.Millisecond)
	t.Logf("%d calls, peak %d of %d starts per %v", len(calls), peak, N, per)
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) < 5*N {
		t.Errorf("only %d calls in 1.5 s at %d per %v", len(calls), N, per)
	}
}

// TestRedisScriptFlushMidRun: SCRIPT FLUSH while three processes hammer
// the limit: the scripts are loaded again (go-redis falls back to EVAL on
// NOSCRIPT), no call fails, and the guarantee holds over the whole run.
func TestRedisScriptFlushMidRun(t *testing.T) {
	addr := redistest.Start(t)
	admin := newClient(t, addr)
	name := uniqueName(t)
	const (
		N, P, G = 5, 3, 4
		per     = 200 * time.Millisecond
	)
	sems := make([]*RateSemaphore, P)
	for i := range sems {
		sems[i] = newRedisSem(t, newClient(t, addr), name, N, per)
	}
	calls := hammer(t, sems, G, 1500*time.Millisecond, func() {
		for range 3 {
			time.Sleep(300 * time.Millisecond)
			if err := admin.ScriptFlush(context.Background()).Err(); err != nil {
				t.Error(err)
			}
		}
	})
	peak, err := checkCompletion(calls, N, per)
	t.Logf("%d calls, peak %d of %d", len(calls), peak, N)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range sems {
		if st := s.Stats(); st.RedisErrors != 0 {
			t.Errorf("process %d: %+v", i, st)
		}
	}
}

// TestRedisLostStateNeverExceedsTheLimit: three processes share 5 calls
// per 300 ms while the limit's keys are lost mid-run (FLUSHALL, as an
// eviction or a restart without persistence would lose them): the
// completion guarantee holds at every start of the whole run, and the
// heads do not spin (a bounded number of EVALSHA per second).
func TestRedisLostStateNeverExceedsTheLimit(t *testing.T) {
	srv := redistest.StartServer(t)
	admin := newClient(t, srv.Addr())
	name := uniqueName(t)
	const (
		N, P, G = 5, 3, 4
		per     = 300 * time.Millisecond
	)
	sems := make([]*RateSemaphore, P)
	for i := range sems {
		sems[i] = newRedisSem(t, newClient(t, srv.Addr()), name, N, per, WithLease(5*time.Second))
	}
	var rate float64
	calls := hammer(t, sems, G, 2*time.Second, func() {
		time.Sleep(700 * time.Millisecond)
		before := evalCalls(t, admin)
		if err := admin.FlushAll(context.Background()).Err(); err != nil {
			t.Error(err)
		}
		begin := time.Now()
		time.Sleep(500 * time.Millisecond)
		rate = float64(evalCalls(t, admin)-before) / time.Since(begin).Seconds()
	})
	peak, err := checkCompletion(calls, N, per)
	var lost uint64
	for _, s := range sems {
		lost += s.Stats().StateLost
	}
	t.Logf("%d calls, peak %d of %d; StateLost %d; %.0f EVALSHA/s after the FLUSHALL", len(calls), peak, N, lost, rate)
	if err != nil {
		t.Fatal(err)
	}
	if rate > 1000 {
		t.Errorf("%.0f EVALSHA/s while the state was lost: the heads spin", rate)
	}
}
