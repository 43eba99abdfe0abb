package redissem

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratesem/ratesem/window/redis/redistest"
)

// TestLostStateNeverExceedsTheLimit: three processes (four goroutines
// each) share 5 calls per 300 ms on a server with maxmemory-policy
// allkeys-lru (allowed with WithEvictionAllowed), while the limit's keys are
// lost by hand mid-run, as eviction would lose them: the sorted set of
// calls (DEL), then the hash (DEL), then everything (FLUSHALL). The
// completion guarantee holds at every start of the whole run, the partial
// losses are detected (Stats.StateLost; a whole loss is detected when it
// matters: when a call it forgot still counts), and the heads do not spin: the server runs a
// bounded number of EVALSHA per second while the state is lost (on the old
// code a lost sorted set beside its hash made the head send about 15 000
// EVALSHA a second and admit nothing).
func TestLostStateNeverExceedsTheLimit(t *testing.T) {
	srv := redistest.StartServerArgs(t, "--maxmemory", "256mb", "--maxmemory-policy", "allkeys-lru")
	admin := newClient(t, srv.Addr())
	name := uniqueName(t)
	const (
		N, P, G = 5, 3, 4
		per     = 300 * time.Millisecond
	)
	sems := make([]*Semaphore, P)
	for i := range sems {
		sems[i] = newSem(t, newClient(t, srv.Addr()), name, N, per, WithEvictionAllowed(), WithLease(5*time.Second))
	}
	keys := sems[0].win.Keys() // z, l, h
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var rec recorder
	var wg sync.WaitGroup
	for p, s := range sems {
		for range G {
			wg.Go(func() {
				for ctx.Err() == nil {
					if err := s.Acquire(ctx, 1); err != nil {
						if ctx.Err() == nil {
							t.Errorf("process %d: %v", p, err)
						}
						return
					}
					start := time.Now()
					time.Sleep(2*time.Millisecond + rand.N(30*time.Millisecond))
					end := time.Now()
					s.Release(1)
					rec.add(call{start: start, end: end, n: 1, proc: p})
				}
			})
		}
	}
	var lostSoFar []uint64
	rate := func(what string, lose func() error) float64 {
		time.Sleep(500 * time.Millisecond)
		before := evalCalls(t, admin)
		if err := lose(); err != nil {
			t.Fatal(err)
		}
		begin := time.Now()
		time.Sleep(500 * time.Millisecond)
		r := float64(evalCalls(t, admin)-before) / time.Since(begin).Seconds()
		var lost uint64
		for _, s := range sems {
			lost += s.Stats().StateLost
		}
		t.Logf("%s: %.0f EVALSHA/s in the 500 ms after; StateLost so far %d", what, r, lost)
		lostSoFar = append(lostSoFar, lost)
		return r
	}
	bg := context.Background()
	rates := []float64{
		rate("DEL zset", func() error { return admin.Del(bg, keys[0]).Err() }),
		rate("DEL hash", func() error { return admin.Del(bg, keys[2]).Err() }),
		rate("FLUSHALL", func() error { return admin.FlushAll(bg).Err() }),
	}
	time.Sleep(500 * time.Millisecond)
	cancel()
	wg.Wait()
	calls := rec.all()
	peak, err := checkCompletion(calls, N, per)
	if err != nil {
		t.Fatal(err)
	}
	var lost uint64
	for i, s := range sems {
		st := s.Stats()
		t.Logf("process %d: admitted %d, StateLost %d, ReleasesLost %d, RedisAdmits %d", i, st.Admitted, st.StateLost, st.ReleasesLost, st.RedisAdmits)
		lost += st.StateLost
	}
	t.Logf("%d calls, peak %d of %d", len(calls), peak, N)
	if lostSoFar[0] < 1 || lostSoFar[1] < lostSoFar[0]+1 {
		t.Errorf("StateLost after DEL zset, DEL hash: %v; want each detected", lostSoFar)
	}
	for _, r := range rates {
		if r > 1000 {
			t.Errorf("%.0f EVALSHA/s while the state was lost: the heads spin", r)
		}
	}
	if len(calls) < 20 {
		t.Errorf("only %d calls in 3 s", len(calls))
	}
}

// TestRealEviction: as TestLostStateNeverExceedsTheLimit, with the keys
// really evicted: a server with maxmemory 4 MB and allkeys-random, filled
// with junk by another client the whole run, so that Redis evicts keys at
// random, the limit's among them. The completion guarantee holds at every
// start, and the heads do not spin.
func TestRealEviction(t *testing.T) {
	srv := redistest.StartServerArgs(t, "--maxmemory", "4mb", "--maxmemory-policy", "allkeys-random")
	admin := newClient(t, srv.Addr())
	name := uniqueName(t)
	const (
		N, P, G = 5, 3, 4
		per     = 200 * time.Millisecond
		run     = 2500 * time.Millisecond
	)
	sems := make([]*Semaphore, P)
	for i := range sems {
		sems[i] = newSem(t, newClient(t, srv.Addr()), name, N, per, WithEvictionAllowed(), WithLease(5*time.Second))
	}
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	var rec recorder
	var wg sync.WaitGroup
	junk := newClient(t, srv.Addr())
	wg.Go(func() {
		val := strings.Repeat("x", 512)
		for i := 0; ctx.Err() == nil; i++ {
			_ = junk.Set(context.Background(), "junk:"+strconv.Itoa(i), val, 0).Err()
		}
	})
	before := evalCalls(t, admin)
	began := time.Now()
	for p, s := range sems {
		for range G {
			wg.Go(func() {
				for ctx.Err() == nil {
					if err := s.Acquire(ctx, 1); err != nil {
						if ctx.Err() == nil && !errors.Is(err, ErrDeadline) {
							t.Errorf("process %d: %v", p, err)
						}
						return
					}
					start := time.Now()
					time.Sleep(2*time.Millisecond + rand.N(20*time.Millisecond))
					end := time.Now()
					s.Release(1)
					rec.add(call{start: start, end: end, n: 1, proc: p})
				}
			})
		}
	}
	wg.Wait()
	rate := float64(evalCalls(t, admin)-before) / time.Since(began).Seconds()
	info, _ := admin.Info(context.Background(), "stats").Result()
	evicted := ""
	for _, line := range strings.Split(info, "\n") {
		if strings.HasPrefix(line, "evicted_keys:") {
			evicted = strings.TrimSpace(strings.TrimPrefix(line, "evicted_keys:"))
		}
	}
	calls := rec.all()
	peak, err := checkCompletion(calls, N, per)
	var lost uint64
	for _, s := range sems {
		lost += s.Stats().StateLost
	}
	t.Logf("%d calls, peak %d of %d; %s keys evicted; StateLost %d; %.0f EVALSHA/s", len(calls), peak, N, evicted, lost, rate)
	if err != nil {
		t.Fatal(err)
	}
	if evicted == "" || evicted == "0" {
		t.Fatalf("no key evicted: the run proved nothing")
	}
	if rate > 1000 {
		t.Errorf("%.0f EVALSHA/s: the heads spin", rate)
	}
}
