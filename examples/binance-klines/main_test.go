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
// log shows every rule respected, and the binding limit (REQUEST_WEIGHT)
// is used to at least 90% in every full window.
func TestBackfill(t *testing.T) {
	res := runVirtual(t, config{Requests: 6000, Workers: 32, Scale: 12, Latency: 20 * time.Millisecond})
	if res.Rejected != 0 || len(res.Violations) != 0 {
		t.Fatalf("%d rejections, violations %v", res.Rejected, res.Violations)
	}
	if use := res.busiestUse(); use < 0.9 {
		t.Fatalf("binding limit used to %.1f%% (per window %v), want at least 90%%", 100*use, res.PerWindow)
	}
}

// A foreign client on the same IP spends 2000 of the 6000 weight of each
// window; reading X-MBX-USED-WEIGHT-1M, the pool takes it in and gets no
// 429. Without the header it is rejected: the test can fail.
func TestForeignClientHeaderFeedback(t *testing.T) {
	cfg := config{Requests: 6000, Workers: 32, Scale: 12, Latency: 20 * time.Millisecond, Foreign: 2000}
	res := runVirtual(t, cfg)
	if res.Rejected != 0 || len(res.Violations) != 0 {
		t.Fatalf("with usage headers: %d rejections (per window %v)", res.Rejected, res.PerWindow)
	}
	if use := res.busiestUse(); use < 0.9 {
		t.Fatalf("with usage headers: binding limit used to %.1f%% (per window %v)", 100*use, res.PerWindow)
	}
	cfg.NoUsage = true
	if res := runVirtual(t, cfg); res.Rejected == 0 {
		t.Fatal("without the usage headers the foreign client's spend caused no rejection: the test shows nothing")
	}
}

// ideal: 18000 units at 6000 per 5 s window with 48 workers at 20 ms (4800
// units a second, 1.25 s to spend a window's budget) fill three windows
// when the run starts at least 1.25 s before the first boundary, and need a
// fourth when it starts later; never less than the workers' own time.
func TestIdeal(t *testing.T) {
	const per, lat = 5 * time.Second, 20 * time.Millisecond
	send := func(units int64) time.Duration { return time.Duration(float64(units) / 4800 * float64(time.Second)) }
	// Early in the first window: windows 0, 1, 2; the last starts at
	// 2 windows + the time to send 5998 units after the second boundary.
	rest := 4 * time.Second
	want := rest + per + send(5998) + lat
	if got := ideal(18000, 6000, per, rest, 48, lat); got != want {
		t.Errorf("ideal, starting %v before a boundary = %v, want %v", rest, got, want)
	}
	// Late in the first window (0.5 s left: 2400 units): a fourth window.
	rest = 500 * time.Millisecond
	left := int64(18000 - 2400 - 6000 - 6000)
	want = rest + 2*per + send(left-2) + lat
	if got := ideal(18000, 6000, per, rest, 48, lat); got != want {
		t.Errorf("ideal, starting %v before a boundary = %v, want %v", rest, got, want)
	}
	// A rule loose enough for the workers alone to bind.
	if got, floor := ideal(18000, 1<<40, per, rest, 48, lat), send(17998); got != floor+lat {
		t.Errorf("ideal with no binding rule = %v, want the workers' %v + one latency", got, floor)
	}
	for _, bad := range [][2]int64{{0, 6000}, {18000, 0}, {-1, 6000}} {
		if got := ideal(bad[0], bad[1], per, rest, 48, lat); got != 0 {
			t.Errorf("ideal(%d, %d) = %v, want 0", bad[0], bad[1], got)
		}
	}
}
