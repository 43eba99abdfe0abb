package clientpool_test

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/internal/rstore"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// TestAdaptiveRedisRefusals: what Redis mode cannot share it refuses with
// an error (at New: an adaptive token bucket whose burst follows N; at
// SetLimit: a Per other than the rule's), and an adaptive window it
// accepts.
func TestAdaptiveRedisRefusals(t *testing.T) {
	c := newClient(t, redistest.Start(t).Addr())
	per := window.Limit{N: 10, Per: time.Second}
	bucket := clientpool.Rule{Name: "b", Limit: per, Adapt: &clientpool.Adaptive{Floor: 2},
		Window: func(l window.Limit) window.Policy { return window.NewTokenBucket(l, 0) }}
	if _, err := newRedisPoolErr(t, clientpool.Table{Rules: []clientpool.Rule{bucket}}, c, "a1"); err == nil {
		t.Error("an adaptive token bucket whose burst follows N: accepted in Redis mode")
	}
	p := newRedisPool(t, clientpool.Table{Rules: []clientpool.Rule{{Name: "w", Limit: per, Adapt: &clientpool.Adaptive{Floor: 2},
		Window: window.NewFixedWindow}}}, c, "a3")
	if err := p.SetLimit("w", window.Limit{N: 5, Per: 2 * time.Second}); err == nil {
		t.Error("SetLimit on an adaptive rule in Redis mode, another Per: no error")
	}
}

// adaptLevel returns the level p reports for the rule's key "" (0: none).
func adaptLevel(p *clientpool.Pool, rule string) int64 {
	for _, k := range p.Snapshot() {
		if k.Rule == rule && k.Key == "" {
			return k.Limit.N
		}
	}
	return 0
}

// TestAdaptiveRedisOneCut: three processes report the throttles of calls
// they admitted before the fleet's level was cut: one cut, which every
// process's next admission is held to; a throttle of a call admitted
// after the cut cuts again.
func TestAdaptiveRedisOneCut(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	table := clientpool.Table{Rules: []clientpool.Rule{{Name: "api", Limit: window.Limit{N: 40, Per: time.Second},
		Adapt: &clientpool.Adaptive{Floor: 2}}}}
	ps := []*clientpool.Pool{newRedisPool(t, table, c, "fleet"), newRedisPool(t, table, c, "fleet"), newRedisPool(t, table, c, "fleet")}
	st, err := rstore.New(c, "fleet", rstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := st.Keys("fleet", rstore.Charge{Rule: "api", Key: ""})[0] + ":a"
	field := func(f string) int64 {
		v, _ := c.HGet(context.Background(), key, f).Result()
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	ch := clientpool.Charge{Rule: "api", Weight: 1}
	// 21 successes reach Redis: the first at once, the others an eighth
	// of Per later (with the 21st)
	for range 20 {
		acquire(t, ps[0], ch).Release()
	}
	time.Sleep(300 * time.Millisecond)
	acquire(t, ps[0], ch).Release()
	waitFor(t, func() bool { return field("cur")+field("prev") == 21 }, "21 successes in Redis")
	if n := field("n"); n != 40 {
		t.Fatalf("the level before any throttle: %d, want the rule's 40", n)
	}
	tks := []*clientpool.Ticket{acquire(t, ps[0], ch), acquire(t, ps[1], ch), acquire(t, ps[2], ch)}
	for i, tk := range tks {
		ps[i].ThrottledTicket(clientpool.Throttle{Status: 429}, tk)
		tk.Release()
	}
	waitFor(t, func() bool {
		return adaptLevel(ps[0], "api") < 40 && adaptLevel(ps[1], "api") < 40 && adaptLevel(ps[2], "api") < 40
	}, "the cut in every process")
	time.Sleep(100 * time.Millisecond) // the reports still under way land
	cut := field("n")
	if field("B") != 40 || cut >= 40 || cut < 2 || adaptLevel(ps[1], "api") != cut {
		t.Fatalf("after three reports of one overload: level %d (bad level %d), process 2 sees %d", cut, field("B"), adaptLevel(ps[1], "api"))
	}
	// a call admitted now (after the pause of the 429s) is held to the cut
	// level, and its throttle cuts again
	tk := acquire(t, ps[1], ch)
	ps[1].ThrottledTicket(clientpool.Throttle{Status: 429}, tk)
	tk.Release()
	waitFor(t, func() bool { return field("n") < cut }, "a second cut")
}

// waitFor waits up to 3 s for cond.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for end := time.Now().Add(3 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fleetStepN is the true limit of the fleet test: 100, 50, 150, 100 per
// window, fleetPhase windows each (stepN's schedule).
const fleetPhase = 60

func fleetStepN(w int) int {
	switch w / fleetPhase {
	case 0:
		return 100
	case 1:
		return 50
	case 2:
		return 150
	}
	return 100
}

// runUnknownFleet runs procs Pools over one Redis (the replicas of a
// fleet), each with an adaptive rule, against one unknownServer whose
// limit steps (fleetStepN), in real time: W = per, 4·fleetPhase windows,
// 200 workers in all, calls of 20 to 80 ms at W = 1 s, scaled to per (the
// in-process acceptance test's), a throttle reported with ThrottledTicket.
// procs 0 runs one Pool in process instead (the peer).
func runUnknownFleet(t *testing.T, c goredis.UniversalClient, prefix string, seed int64, procs int, per time.Duration) adaptRun {
	const windows = 4 * fleetPhase
	table := clientpool.Table{Rules: []clientpool.Rule{{Name: "api", Limit: window.Limit{Per: per}, Adapt: &clientpool.Adaptive{Floor: 10}}}}
	ps := make([]*clientpool.Pool, max(procs, 1))
	for i := range ps {
		if procs == 0 { // the peer: one Pool in process
			ps[i] = newPool(t, table.Rules)
			continue
		}
		ps[i] = newRedisPool(t, table, c, prefix)
	}
	var r adaptRun
	epoch := time.Now()
	srv := &unknownServer{epoch: epoch, w: per, n: fleetStepN, fixedWin: -1}
	r.acc = make([]int, windows)
	r.n = make([]int, windows)
	for w := range r.n {
		r.n[w] = fleetStepN(w)
	}
	var mu sync.Mutex
	ctx, cancel := context.WithDeadline(context.Background(), epoch.Add(windows*per))
	defer cancel()
	ch := clientpool.Charge{Rule: "api", Weight: 1}
	var wg sync.WaitGroup
	if os.Getenv("RATESEM_FLEET_TRACE") != "" {
		// the level ps[0] sees, per window, around the step up
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lv []int64
			for w := 0; w < windows; w++ {
				time.Sleep(time.Until(epoch.Add(time.Duration(w) * per)))
				lv = append(lv, adaptLevel(ps[0], "api"))
			}
			t.Logf("procs %d levels from window %d: %v", procs, 2*fleetPhase-2, lv[2*fleetPhase-2:min(len(lv), 2*fleetPhase+16)])
		}()
	}
	for k := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := ps[k%len(ps)]
			rng := rand.New(rand.NewSource(seed*1000 + int64(k)))
			// lo to hi thousandths of a second, scaled to the window (W/1 s)
			ms := func(lo, hi int) time.Duration {
				return time.Duration(lo*1000+rng.Intn((hi-lo)*1000+1)) * per / time.Second * time.Microsecond
			}
			for {
				tk, err := p.Acquire(ctx, ch)
				if err != nil {
					return
				}
				start := time.Now()
				time.Sleep(ms(5, 15))
				ok := srv.arrive(time.Now())
				time.Sleep(ms(10, 50))
				srv.end(time.Now())
				time.Sleep(ms(5, 15))
				if !ok {
					p.ThrottledTicket(clientpool.Throttle{Status: 429}, tk)
				}
				tk.Release()
				if w := srv.window(start); w < windows {
					mu.Lock()
					r.calls++
					if ok {
						r.acc[w]++
					} else {
						r.rej++
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	r.rejPct = 100 * float64(r.rej) / float64(max(r.calls, 1))
	r.measure([]int{fleetPhase, 2 * fleetPhase, 3 * fleetPhase}, fleetPhase)
	return r
}

// TestAdaptiveRedisFleet is issue 21's fleet acceptance test of adaptive
// limits: 3 Pools over one Redis (a fleet sharing one level) against a
// server whose limit is unknown to them and steps 100 > 50 > 150 > 100
// per window (TestAdaptiveUnknownServer's schedule, 240 windows), in real
// time (Redis decides on its own clock: no virtual time), W = 250 ms by
// default (60 s a run), alternating with its peers: one Pool over Redis,
// one Pool in process. Each run must keep rejections ≤ 2% of its calls,
// throughput ≥ 85% of the true limit once settled and recover to ≥ 85%
// within 10 windows of each step. It runs only with RATESEM_FLEET=1 (a
// few minutes of real time, sensitive to a loaded machine);
// RATESEM_FLEET_SEEDS=n runs n seeds, RATESEM_FLEET_W the window,
// RATESEM_FLEET_PROCS the runs ("3,1,0": 0 is the in-process peer). -v
// prints the table.
func TestAdaptiveRedisFleet(t *testing.T) {
	if os.Getenv("RATESEM_FLEET") == "" {
		t.Skip("RATESEM_FLEET=1 runs it: minutes of real time")
	}
	seeds := 1
	if s, err := strconv.Atoi(os.Getenv("RATESEM_FLEET_SEEDS")); err == nil && s > 0 {
		seeds = s
	}
	per := 250 * time.Millisecond
	if d, err := time.ParseDuration(os.Getenv("RATESEM_FLEET_W")); err == nil && d > 0 {
		per = d
	}
	procsList := []int{3, 1, 0}
	if l := os.Getenv("RATESEM_FLEET_PROCS"); l != "" {
		procsList = nil
		for _, f := range strings.Split(l, ",") {
			n, _ := strconv.Atoi(f)
			procsList = append(procsList, n)
		}
	}
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	for seed := int64(1); seed <= int64(seeds); seed++ {
		for _, procs := range procsList {
			r := runUnknownFleet(t, c, fmt.Sprintf("fleet%d-%d", seed, procs), seed, procs, per)
			line := fmt.Sprintf("%d Redis process(es) (0: in process) seed %d: calls %5d  rejected %5.2f%%  throughput %5.1f%% of N  recovery %v windows", procs, seed, r.calls, r.rejPct, r.settled, r.recover)
			t.Log(line)
			if r.rejPct > 2 || r.settled < 85 {
				t.Errorf("%s: want rejected ≤ 2%%, throughput ≥ 85%%", line)
			}
			for i, rec := range r.recover {
				if rec < 0 || rec > 10 {
					t.Errorf("%s: step %d recovered in %d windows, want ≤ 10", line, i, rec)
				}
			}
		}
	}
}
