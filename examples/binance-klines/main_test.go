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
