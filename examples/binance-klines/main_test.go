package main

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

func runVirtual(t *testing.T, cfg config) result {
	t.Helper()
	var res result
	synctest.Test(t, func(t *testing.T) {
		cfg.InMemory = true
		var err error
		if res, err = run(context.Background(), cfg); err != nil {
			t.Fatal(err)
		}
	})
	return res
}

// The backfill end to end on virtual time: no rejection, the server's own
// log shows every rule respected, the binding limit (REQUEST_WEIGHT) is
// used to at least 90% in every full window, and the run ends close to the
// ideal it prints. 8800 requests (17600 weight) leave the last window a
// margin: with the usage headers read, the pool keeps about 1% of each
// window unspent (see TestIdealExactBudget).
func TestBackfill(t *testing.T) {
	res := runVirtual(t, config{Requests: 8800, Workers: 32, Scale: 12, Latency: 20 * time.Millisecond})
	if res.Rejected != 0 || len(res.Violations) != 0 {
		t.Fatalf("%d rejections, violations %v", res.Rejected, res.Violations)
	}
	if use := res.busiestUse(); use < 0.9 {
		t.Fatalf("binding limit used to %.1f%% (per window %v), want at least 90%%", 100*use, res.PerWindow)
	}
	checkIdeal(t, res)
}

// checkIdeal fails unless the run's elapsed time is within a sane band of
// the ideal it prints: not below it by more than the latency's spread can
// explain, and not above it by more than a tenth and a little.
func checkIdeal(t *testing.T, res result) {
	t.Helper()
	ratio := float64(res.Elapsed) / float64(res.Ideal)
	if ratio < 0.95 || ratio > 1.15 {
		t.Errorf("elapsed %v, ideal %v: ratio %.2f, want within [0.95, 1.15] (per window %v)", res.Elapsed, res.Ideal, ratio, res.PerWindow)
	}
}

// A weight that is exactly two windows' budget (6000 requests of weight 2,
// 6000 per window), from a window's start: without the usage headers the
// pool spends every window's budget in full and ends within the band of the
// ideal (5 s + 94 rounds of 20 ms for 32 workers). The old ideal ignored the
// workers' speed (it printed 5.02 s here).
func TestIdealExactBudget(t *testing.T) {
	res := runVirtual(t, config{Requests: 6000, Workers: 32, Scale: 12, Latency: 20 * time.Millisecond, NoUsage: true})
	if res.Rejected != 0 || len(res.Violations) != 0 {
		t.Fatalf("%d rejections, violations %v", res.Rejected, res.Violations)
	}
	if want := 5*time.Second + 94*20*time.Millisecond; res.Ideal != want {
		t.Errorf("ideal %v, want %v", res.Ideal, want)
	}
	checkIdeal(t, res)
}

// The ideal on hand-computed cases: 9000 calls of weight 2 (18000 weight,
// exactly three windows' budget of 6000), 48 workers, 20 ms per call, 5 s
// windows.
func TestIdeal(t *testing.T) {
	cfg := config{Requests: 9000, Workers: 48, Latency: 20 * time.Millisecond}
	const per = 5 * time.Second
	for _, c := range []struct {
		name   string
		cfg    config
		budget int64
		phase  time.Duration
		want   time.Duration
	}{
		// From a window's start: three full windows; the last one's 3000
		// calls take the 48 workers ceil(3000/48) = 63 rounds of 20 ms.
		{"aligned", cfg, 6000, 0, 2*per + 63*20*time.Millisecond},
		// 1.01 s before a boundary the workers spend only 51 rounds (2448
		// calls) of the first window's 3000, the last of them in flight at
		// the boundary, so it spends 96 weight of the second window too
		// (2952 calls left there). Window 3 takes 3000 calls; the 600 left
		// need a fourth window: 13 rounds into it.
		{"late start", cfg, 6000, 3990 * time.Millisecond, 1010*time.Millisecond + 2*per + 13*20*time.Millisecond},
		// Workers so slow that the rule never binds: 9000/48 rounds.
		{"worker-bound", config{Requests: 9000, Workers: 48, Latency: time.Second}, 6000, 0, 188 * time.Second},
		// One call: one latency.
		{"one call", config{Requests: 1, Workers: 48, Latency: 20 * time.Millisecond}, 6000, 0, 20 * time.Millisecond},
		// A budget of less than one call admits nothing: no ideal.
		{"no budget", cfg, 1, 0, 0},
	} {
		if got := ideal(c.cfg, c.budget, per, c.phase); got != c.want {
			t.Errorf("%s: ideal %v, want %v", c.name, got, c.want)
		}
	}
}

// A foreign client on the same IP spends 2000 of the 6000 weight of each
// window; reading X-MBX-USED-WEIGHT-1M, the pool takes it in and gets no
// 429. Without the header it is rejected: the test can fail.
func TestForeignClientHeaderFeedback(t *testing.T) {
	// 11400 units: 95% of three windows' 4000 left by the foreign client,
	// so the units the header feedback leaves unspent (the pool's calls in
	// flight count as possibly foreign, about 1.5%) do not cost a fourth
	// window, which TestIdealExactBudget shows on its own.
	cfg := config{Requests: 5700, Workers: 32, Scale: 12, Latency: 20 * time.Millisecond, Foreign: 2000}
	res := runVirtual(t, cfg)
	if res.Rejected != 0 || len(res.Violations) != 0 {
		t.Fatalf("with usage headers: %d rejections (per window %v)", res.Rejected, res.PerWindow)
	}
	if use := res.busiestUse(); use < 0.9 {
		t.Fatalf("with usage headers: binding limit used to %.1f%% (per window %v)", 100*use, res.PerWindow)
	}
	checkIdeal(t, res)
	cfg.NoUsage = true
	if res := runVirtual(t, cfg); res.Rejected == 0 {
		t.Fatal("without the usage headers the foreign client's spend caused no rejection: the test shows nothing")
	}
}
