package accuracy

import (
	"flag"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratesem/ratesem/semaphore"
)

var update = flag.Bool("update", false, "TestWriteResults: write results/virtual.md and results/virtual.svg")

// runVirtual runs one cell of the matrix on virtual time: the limiter is
// built and used inside a fresh synctest bubble.
func runVirtual(t *testing.T, cfg Config, p Peer, lat Latency) Result {
	t.Helper()
	var r Result
	synctest.Test(t, func(*testing.T) { r = Run(cfg, p, lat) })
	return r
}

var (
	matrixMu      sync.Mutex
	matrixResults []Result
)

// matrix runs every peer under every latency distribution on virtual time,
// once per test binary, and returns the results in RunAll's order.
func matrix(t *testing.T) []Result {
	t.Helper()
	matrixMu.Lock()
	defer matrixMu.Unlock()
	if matrixResults == nil {
		cfg := DefaultConfig()
		for _, lat := range Latencies() {
			for _, p := range Peers() {
				matrixResults = append(matrixResults, runVirtual(t, cfg, p, lat))
			}
		}
	}
	return matrixResults
}

func find(t *testing.T, rs []Result, peer, lat string) Result {
	t.Helper()
	for _, r := range rs {
		if r.Peer == peer && r.Latency == lat {
			return r
		}
	}
	t.Fatalf("no result for %q under %q", peer, lat)
	return Result{}
}

func TestServerSlidingWindow(t *testing.T) {
	t0 := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	s := NewServer(3, time.Second)
	steps := []struct {
		at   time.Duration
		want bool
	}{
		{0, true}, {0, true}, {0, true}, // N equal instants are all accepted
		{0, false},                      // the (N+1)-th at the same instant is not
		{999 * time.Millisecond, false}, // still inside (t−T, t]
		{time.Second, true},             // the three at 0 are at t−T exactly: outside
		{time.Second, true},
		{1500 * time.Millisecond, true}, // window (0.5 s, 1.5 s] holds two accepted
		{1600 * time.Millisecond, false},
		{2 * time.Second, true}, // the two at 1 s left; 1.5 s is left alone
		{2 * time.Second, true}, // rejected arrivals (1.6 s) do not count
		{2400 * time.Millisecond, false},
		{2500 * time.Millisecond, true}, // 1.5 s left
	}
	for i, st := range steps {
		assert.Equal(t, st.want, s.ArriveAt(at(st.at)).Accepted, "step %d at %v", i, st.at)
	}
	log := s.Arrivals()
	require.Len(t, log, len(steps))
	var acc []time.Time
	for i, a := range log {
		assert.Equal(t, at(steps[i].at), a.At)
		assert.Equal(t, steps[i].want, a.Accepted)
		if a.Accepted {
			acc = append(acc, a.At)
		}
	}
	assert.Equal(t, 3, MaxInWindow(acc, time.Second), "accepted arrivals never exceed N in a window")

	// An instant earlier than one already seen counts as the latest.
	assert.Equal(t, Arrival{At: at(2500 * time.Millisecond), Accepted: false}, s.ArriveAt(at(0)))
	assert.Equal(t, at(2500*time.Millisecond), s.Arrivals()[len(steps)].At)

	assert.Panics(t, func() { NewServer(0, time.Second) })
	assert.Panics(t, func() { NewServer(1, 0) })
}

func TestServerArriveUsesClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewServer(2, time.Second)
		assert.True(t, s.Arrive().Accepted)
		time.Sleep(time.Second - 1)
		assert.True(t, s.Arrive().Accepted)
		assert.False(t, s.Arrive().Accepted)
		time.Sleep(1)
		assert.True(t, s.Arrive().Accepted, "the first arrival is exactly T old: outside the window")
		assert.False(t, s.Arrive().Accepted)
	})
}

func TestMaxInWindow(t *testing.T) {
	t0 := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(ds ...int) []time.Time {
		var ts []time.Time
		for _, d := range ds {
			ts = append(ts, t0.Add(time.Duration(d)*time.Millisecond))
		}
		return ts
	}
	for _, tc := range []struct {
		ts   []time.Time
		want int
	}{
		{nil, 0},
		{ms(0), 1},
		{ms(0, 0, 0), 3},
		{ms(0, 1000), 1},            // exactly T apart: never in one window
		{ms(0, 999), 2},             // less than T apart
		{ms(1000, 0, 999, 1999), 2}, // unsorted; every window of T holds two of them
		{ms(0, 500, 999, 1000, 1001), 4},
	} {
		assert.Equal(t, tc.want, MaxInWindow(tc.ts, time.Second), "%v", tc.ts)
	}
	assert.Panics(t, func() { MaxInWindow(nil, 0) })
}

func TestSteadyThroughputAndPercentile(t *testing.T) {
	t0 := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	var ts []time.Time
	for i := range 10 {
		ts = append(ts, t0) // a burst of 10 at t0
		_ = i
	}
	for i := 1; i <= 20; i++ {
		ts = append(ts, t0.Add(time.Duration(i)*100*time.Millisecond))
	}
	assert.InDelta(t, 10.0, SteadyThroughput(ts, 10), 1e-9, "20 calls in the 2 s after the burst")
	assert.Zero(t, SteadyThroughput(ts[:10], 10))

	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i))
	}
	assert.Equal(t, time.Duration(50), Percentile(ds, 50))
	assert.Equal(t, time.Duration(99), Percentile(ds, 99))
	assert.Equal(t, time.Duration(100), Percentile(ds, 100))
	assert.Equal(t, time.Duration(1), Percentile(ds[:1], 99))
	assert.Zero(t, Percentile(nil, 50))
}

// TestEveryRunAccountsForEveryCall checks the harness itself on every cell:
// every call made it to the server once, and the server never accepted more
// than N in a window.
func TestEveryRunAccountsForEveryCall(t *testing.T) {
	cfg := DefaultConfig()
	for _, r := range matrix(t) {
		assert.Zero(t, r.Errors, "%s / %s", r.Latency, r.Peer)
		assert.Equal(t, cfg.Calls, r.Calls, "%s / %s", r.Latency, r.Peer)
		assert.Equal(t, cfg.Calls, r.Accepted+r.Rejected, "%s / %s", r.Latency, r.Peer)
		assert.GreaterOrEqual(t, r.Peak, min(cfg.N, cfg.Calls), "%s / %s", r.Latency, r.Peer)
		assert.Positive(t, r.Throughput, "%s / %s", r.Latency, r.Peer)
		assert.LessOrEqual(t, r.ShareNT, 1.0+1e-6, "%s / %s: nothing can be accepted faster than N/T", r.Latency, r.Peer)
	}
}

// TestCompletionWindowTargets: zero rejections under every distribution and
// at least 95% of N/(T + mean latency).
func TestCompletionWindowTargets(t *testing.T) {
	rs := matrix(t)
	for _, lat := range Latencies() {
		r := find(t, rs, CompletionWindow().Name, lat.Name)
		t.Logf("%s: rejected %d, peak %d, %.2f%% of N/T, %.2f%% of N/(T+L̄)", lat.Name, r.Rejected, r.Peak, 100*r.ShareNT, 100*r.ShareNTL)
		assert.Zero(t, r.Rejected, lat.Name)
		assert.LessOrEqual(t, r.Peak, DefaultConfig().N, lat.Name)
		assert.GreaterOrEqual(t, r.ShareNTL, 0.95, lat.Name)
	}
}

// TestStartWindowTargets: with a margin at least the one-way jitter (max −
// min: the fixed and uniform distributions), zero rejections and at least 98%
// of N/T. The heavy tail's margin covers only up to its p99; its outcome is
// logged, not asserted.
func TestStartWindowTargets(t *testing.T) {
	rs := matrix(t)
	for _, lat := range Latencies() {
		r := find(t, rs, StartWindow().Name, lat.Name)
		t.Logf("%s (m = %v, %s): rejected %d, peak %d, %.2f%% of N/T", lat.Name, r.Margin, lat.MarginNote, r.Rejected, r.Peak, 100*r.ShareNT)
		if lat.MarginNote != "max − min" {
			continue
		}
		assert.LessOrEqual(t, r.OutSpread, r.Margin, "%s: on virtual time the observed jitter is the distribution's", lat.Name)
		assert.Zero(t, r.Rejected, lat.Name)
		assert.LessOrEqual(t, r.Peak, DefaultConfig().N, lat.Name)
		assert.GreaterOrEqual(t, r.ShareNT, 0.98, lat.Name)
	}
}

// TestHarnessDetectsViolations shows the harness can fail: limiters that
// break the rule get rejections under it.
func TestHarnessDetectsViolations(t *testing.T) {
	cfg := DefaultConfig()
	rs := matrix(t)
	for _, lat := range Latencies() {
		for _, p := range []Peer{TokenBucket(0), GCRA()} {
			r := find(t, rs, p.Name, lat.Name)
			assert.Positive(t, r.Rejected, "%s under %s", p.Name, lat.Name)
			assert.Equal(t, 2*cfg.N-1, r.Peak, "%s under %s: a full bucket and its refill", p.Name, lat.Name)
		}
	}
	// The start window with no margin under jitter.
	noMargin := Peer{
		Name: "start window, m = 0",
		New: func(cfg Config, _ Latency) Limiter {
			return rateSem(semaphore.New(int64(cfg.N), cfg.Per, semaphore.WithStartWindow(0)))
		},
	}
	r := runVirtual(t, cfg, noMargin, Uniform(10*time.Millisecond, 30*time.Millisecond))
	assert.Positive(t, r.Rejected, "start window without margin under 10–30 ms")
	assert.Greater(t, r.Peak, cfg.N)
}

// TestVirtualRunsRepeat checks that a virtual-time run is reproducible.
func TestVirtualRunsRepeat(t *testing.T) {
	cfg := DefaultConfig()
	lat := Latencies()[2]
	for _, p := range []Peer{CompletionWindow(), StartWindow(), TokenBucket(0)} {
		a, b := runVirtual(t, cfg, p, lat), runVirtual(t, cfg, p, lat)
		assert.Equal(t, a, b, p.Name)
	}
}

// TestWriteResults writes results/virtual.md and results/virtual.svg from the
// virtual-time matrix when run with -update:
//
//	go test ./accuracy -run TestWriteResults -update
func TestWriteResults(t *testing.T) {
	rep := Report{
		Clock:     "virtual time (testing/synctest)",
		Command:   "go test ./accuracy -run TestWriteResults -update",
		Config:    DefaultConfig(),
		Latencies: Latencies(),
		Peers:     Peers(),
		Results:   matrix(t),
	}
	md, svg := rep.Markdown(), rep.SVG()
	assert.Contains(t, md, "| latency | limiter |")
	assert.Contains(t, svg, "</svg>")
	if !*update {
		t.Log("\n" + md)
		t.Skip("run with -update to write results/virtual.md and results/virtual.svg")
	}
	require.NoError(t, os.MkdirAll("results", 0o755))
	require.NoError(t, os.WriteFile(filepath.Join("results", "virtual.md"), []byte(md), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join("results", "virtual.svg"), []byte(svg), 0o644))
}
