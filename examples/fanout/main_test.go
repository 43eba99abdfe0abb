package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratesem/ratesem/window"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestFanOutNoRejections runs the example end to end against the embedded
// server on real time, with OKX's rule scaled from 10/2s to 10/200ms so the
// test takes about a second. Whatever the timing, the completion window must
// give zero rejections, and the server's own log must hold at most 10
// arrivals per (IP, instId) in every window.
func TestFanOutNoRejections(t *testing.T) {
	rule := window.Limit{N: 10, Per: 200 * time.Millisecond}
	var progress bytes.Buffer
	s, err := run(context.Background(), config{
		calls: 50, concurrency: 50, limit: rule, serverLimit: rule,
		instID: "BTC-USDT-SWAP", latencyMin: time.Millisecond, latencyMax: 5 * time.Millisecond,
		progress: &progress,
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Calls != 50 || s.Rejected != 0 || s.Failed != 0 {
		t.Fatalf("calls %d, rejected %d, failed %d; want 50, 0, 0", s.Calls, s.Rejected, s.Failed)
	}
	if s.Arrivals != 50 {
		t.Fatalf("server saw %d arrivals; want 50", s.Arrivals)
	}
	// No rejection (above), so every arrival was accepted and counted.
	if s.Peak > rule.N || s.Peak < 1 {
		t.Errorf("server counted %d arrivals of one IP+instId in one %v window; want 1 to %d", s.Peak, rule.Per, rule.N)
	}
	if got := strings.Count(progress.String(), "\n"); got != 50 {
		t.Errorf("progress printed %d lines; want one per call", got)
	}
	// 50 calls at 10 per window need at least 4 full windows.
	if s.Elapsed < 4*rule.Per {
		t.Errorf("elapsed %v < 4 windows of %v: the limiter cannot have held", s.Elapsed, rule.Per)
	}
}

// TestFanOutWithoutRateIsRejected is the control: a plain concurrency limit
// (interval 0) sends faster than the rule allows, and the server rejects.
// It shows the server and the test above can fail.
func TestFanOutWithoutRateIsRejected(t *testing.T) {
	s, err := run(context.Background(), config{
		calls: 30, concurrency: 10, limit: window.Limit{N: 10},
		serverLimit: window.Limit{N: 10, Per: time.Minute}, instID: "BTC-USDT-SWAP",
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Rejected != 20 {
		t.Fatalf("rejected %d; want 20 (only 10 fit in the server's minute)", s.Rejected)
	}
}

func TestParseRange(t *testing.T) {
	for in, want := range map[string][2]time.Duration{
		"10ms-30ms": {10 * time.Millisecond, 30 * time.Millisecond},
		"20ms":      {20 * time.Millisecond, 20 * time.Millisecond},
	} {
		lo, hi, err := parseRange(in)
		if err != nil || lo != want[0] || hi != want[1] {
			t.Errorf("parseRange(%q) = %v, %v, %v; want %v", in, lo, hi, err, want)
		}
	}
	for _, in := range []string{"", "30ms-10ms", "-5ms", "x"} {
		if _, _, err := parseRange(in); err == nil {
			t.Errorf("parseRange(%q): want an error", in)
		}
	}
}
