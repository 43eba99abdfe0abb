package semaphore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/redistest"
)

// lossBurst has the P semaphores make calls of 1 unit and 5 ms, count
// calls in all, in parallel (at most count goroutines), each Acquire
// retried after an ErrUnavailable (a restarting server) until ctx ends; it
// records them in rec.
func lossBurst(t *testing.T, ctx context.Context, sems []*RateSemaphore, count int, rec *recorder) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range count {
		p := i % len(sems)
		wg.Go(func() {
			for {
				err := sems[p].Acquire(ctx, 1)
				if err == nil {
					break
				}
				if ctx.Err() != nil {
					t.Errorf("process %d: %v", p, err)
					return
				}
				if !errors.Is(err, ratesem.ErrUnavailable) {
					t.Errorf("process %d: %v", p, err)
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
			start := time.Now()
			time.Sleep(5 * time.Millisecond)
			end := time.Now()
			sems[p].Release(1)
			rec.add(call{start: start, end: end, n: 1, proc: p})
		})
	}
	wg.Wait()
}

// waitReleased waits until Redis holds no lease of name (the releases,
// sent in the background, have landed).
func waitReleased(t *testing.T, admin *goredis.Client, name string) {
	t.Helper()
	ctx := context.Background()
	waitUntil(t, 5*time.Second, "the releases reach Redis", func() bool {
		keys, err := admin.Keys(ctx, "*"+name+"*:f").Result()
		if err != nil {
			return false
		}
		for _, k := range keys {
			if admin.ZCard(ctx, k).Val() != 0 {
				return false
			}
		}
		return true
	})
}

// testWholeLoss: three processes (clients of their own) share 30 per 2 s;
// they make 30 calls, which end; Redis then loses everything (lose); 30
// more calls follow at once. The completion guarantee must hold over all
// 60: the processes remember the scope, find its state gone and hold the
// limit full for a Per. Before: the 60 calls took about 330 ms.
func testWholeLoss(t *testing.T, lose func(srv *redistest.Server, admin *goredis.Client)) {
	srv := redistest.Start(t)
	admin := newClient(t, srv.Addr())
	name := uniqueName(t)
	const (
		N   = 30
		per = 2 * time.Second
	)
	sems := make([]*RateSemaphore, 3)
	for i := range sems {
		sems[i] = newRedisSem(t, newClient(t, srv.Addr()), name, N, per)
	}
	ctx := ctxT(t, 20*time.Second)
	var rec recorder
	lossBurst(t, ctx, sems, N, &rec)
	waitReleased(t, admin, name)
	lostAt := time.Now()
	lose(srv, admin)
	lossBurst(t, ctx, sems, N, &rec)
	calls := rec.all()
	var last time.Time
	for _, c := range calls {
		if c.start.After(last) {
			last = c.start
		}
	}
	peak, err := checkCompletion(sortByStart(calls), N, per)
	var lost uint64
	for _, s := range sems {
		lost += s.Stats().StateLost
	}
	t.Logf("%d calls; the last started %v after the loss; peak %d; %d admissions found the state lost", len(calls), last.Sub(lostAt).Round(time.Millisecond), peak, lost)
	if err != nil {
		t.Fatal(err)
	}
	if lost == 0 {
		t.Error("no process reported the state lost (Stats().StateLost)")
	}
}

// sortByStart returns calls ordered by their start.
func sortByStart(calls []call) []call {
	out := append([]call(nil), calls...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].start.Before(out[j-1].start); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// TestRedisFlushAllHoldsTheWindow: FLUSHALL while the window holds calls
// that have ended.
func TestRedisFlushAllHoldsTheWindow(t *testing.T) {
	testWholeLoss(t, func(_ *redistest.Server, admin *goredis.Client) {
		if err := admin.FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRedisRestartHoldsTheWindow: a restart without persistence while the
// window holds calls that have ended.
func TestRedisRestartHoldsTheWindow(t *testing.T) {
	testWholeLoss(t, func(srv *redistest.Server, _ *goredis.Client) { srv.Restart() })
}

// testFrozen: three processes × four goroutines share 10 per 2 s (lease a
// minute), each Acquire with a deadline of 300 ms, retried; Redis freezes
// for 8 s, longer than an admission's round trip may last in
// internal/remote (its Timeout, 1 s, plus 5 s of grace), so that nobody
// reads the answers of the admissions sent during the freeze (freeze
// returns when Redis answers again). The admissions sent
// during the freeze, whose callers gave up long before Redis ran them,
// must not hold the window: from one Per after Redis answers again the
// fleet runs at full rate (10 calls per 2 s and a little) and the
// completion guarantee holds throughout. Before: 3 calls per 2 s for the
// lease's minute.
func testFrozen(t *testing.T, freeze func(srv *redistest.Server, admin *goredis.Client)) {
	srv := redistest.Start(t)
	admin := newClient(t, srv.Addr())
	name := uniqueName(t)
	const (
		N, P, G = 10, 3, 4
		per     = 2 * time.Second
	)
	sems := make([]*RateSemaphore, P)
	for i := range sems {
		sems[i] = newRedisSem(t, newClient(t, srv.Addr()), name, N, per)
	}
	run, cancel := context.WithCancel(context.Background())
	defer cancel()
	var rec recorder
	var wg sync.WaitGroup
	for p, s := range sems {
		for range G {
			wg.Go(func() {
				for run.Err() == nil {
					ctx, cancel := context.WithTimeout(run, 300*time.Millisecond)
					err := s.Acquire(ctx, 1)
					cancel()
					if err != nil {
						time.Sleep(20 * time.Millisecond)
						continue
					}
					start := time.Now()
					time.Sleep(20 * time.Millisecond)
					end := time.Now()
					s.Release(1)
					rec.add(call{start: start, end: end, n: 1, proc: p})
				}
			})
		}
	}
	time.Sleep(2500 * time.Millisecond)
	freeze(srv, admin)
	woke := time.Now()
	time.Sleep(per + 4*time.Second)
	cancel()
	wg.Wait()
	calls := sortByStart(rec.all())
	from, to := woke.Add(per), woke.Add(per+4*time.Second)
	after := filter(calls, func(c call) bool { return !c.start.Before(from) && c.start.Before(to) })
	leases, _ := admin.Keys(context.Background(), "*"+name+"*:f").Result()
	var held int64
	for _, k := range leases {
		held += admin.ZCard(context.Background(), k).Val()
	}
	peak, err := checkCompletion(calls, N, per)
	t.Logf("%d calls in all; %d started in the 4 s from a Per after Redis woke; peak %d; %d leases left", len(calls), len(after), peak, held)
	if err != nil {
		t.Fatal(err)
	}
	// Full rate: N per (Per + a call + latency), about 19 in 4 s; the
	// leases of admissions nobody waits for would hold it at 3 per 2 s.
	if len(after) < 15 {
		t.Fatalf("only %d calls started in the 4 s from a Per after Redis woke: want at least 15 (10 per 2 s)", len(after))
	}
}

// TestRedisDebugSleepAdmissionsNobodyWaitsFor: DEBUG SLEEP 8.
func TestRedisDebugSleepAdmissionsNobodyWaitsFor(t *testing.T) {
	testFrozen(t, func(_ *redistest.Server, admin *goredis.Client) {
		c := goredis.NewClient(&goredis.Options{Addr: admin.Options().Addr, ReadTimeout: 30 * time.Second})
		defer c.Close()
		if err := c.Do(context.Background(), "DEBUG", "SLEEP", "8").Err(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRedisSIGSTOPAdmissionsNobodyWaitsFor: the server stopped with
// SIGSTOP for 8 s, then SIGCONT.
func TestRedisSIGSTOPAdmissionsNobodyWaitsFor(t *testing.T) {
	testFrozen(t, func(_ *redistest.Server, admin *goredis.Client) {
		info, err := admin.Info(context.Background(), "server").Result()
		if err != nil {
			t.Fatal(err)
		}
		pid := 0
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
				pid, _ = strconv.Atoi(v)
			}
		}
		if pid <= 0 {
			t.Fatalf("no process_id in INFO server: %q", info)
		}
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
		time.Sleep(8 * time.Second)
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 5*time.Second, "Redis answers again", func() bool { return admin.Ping(context.Background()).Err() == nil })
	})
}

// TestRedisFlushAllWithCallsInFlight: FLUSHALL while 30 calls (of 500 ms)
// are in flight; 30 more follow at once. The hold after the loss (a Per)
// ends before a Per after those calls' ends: their releases, which find
// no lease, count their ends, so the completion guarantee still holds
// over all 60.
func TestRedisFlushAllWithCallsInFlight(t *testing.T) {
	srv := redistest.Start(t)
	admin := newClient(t, srv.Addr())
	name := uniqueName(t)
	const (
		N   = 30
		per = 2 * time.Second
	)
	sems := make([]*RateSemaphore, 3)
	for i := range sems {
		sems[i] = newRedisSem(t, newClient(t, srv.Addr()), name, N, per)
	}
	ctx := ctxT(t, 20*time.Second)
	var rec recorder
	var wg sync.WaitGroup
	admitted := make(chan struct{}, N)
	for i := range N {
		p := i % len(sems)
		wg.Go(func() {
			if err := sems[p].Acquire(ctx, 1); err != nil {
				t.Error(err)
				return
			}
			admitted <- struct{}{}
			start := time.Now()
			time.Sleep(500 * time.Millisecond)
			end := time.Now()
			sems[p].Release(1)
			rec.add(call{start: start, end: end, n: 1, proc: p})
		})
	}
	for range N {
		<-admitted
	}
	if err := admin.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	lostAt := time.Now()
	lossBurst(t, ctx, sems, N, &rec)
	wg.Wait()
	calls := sortByStart(rec.all())
	peak, err := checkCompletion(calls, N, per)
	t.Logf("%d calls; the last started %v after the loss; peak %d", len(calls), calls[len(calls)-1].start.Sub(lostAt).Round(time.Millisecond), peak)
	if err != nil {
		t.Fatal(err)
	}
}
