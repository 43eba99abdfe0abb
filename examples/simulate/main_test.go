package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratesem/ratesem/redistest"
)

// TestMain doubles as the worker: the tests start copies of the test binary
// with -worker as their first argument, as the program starts copies of
// itself, so the tests below run real OS processes.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == workerFlag {
		os.Exit(workerMain(os.Args[2:]))
	}
	goleak.VerifyTestMain(m)
}

const (
	testLatMin = 10 * time.Millisecond
	testLatMax = 30 * time.Millisecond
)

// smallRow is the CI-sized row: 20 per 500 ms, 2 processes × 20 goroutines,
// 120 requests, that is 6 windows' worth; it takes about 2.7 s.
var smallRow = row{Period: 500 * time.Millisecond, Limit: 20, Processes: 2, Concurrency: 20, Requests: 120}

// runTestRow runs r with real worker processes (copies of the test binary)
// against a redis-server of its own and an API server with the ZSET throttler's
// 10–30 ms latency.
func runTestRow(t *testing.T, r row) rowResult {
	t.Helper()
	addr := redistest.Start(t).Addr()
	srv, err := startServer(testLatMin, testLatMax)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.close()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env := runEnv{Exe: exe, Redis: addr, Server: srv, Prefix: fmt.Sprintf("simulate-test-%s-%d", t.Name(), time.Now().UnixNano())}
	res, err := runRow(ctx, env, 1, r)
	if err != nil {
		t.Fatalf("runRow: %v", err)
	}
	t.Logf("%d ok, %d rejected, %d errors; request mean %v, max %v; mean wait %v; elapsed %v, mean interval %v, spacing %v; server: %d arrivals, %d rejected, busiest window %d",
		res.Successes, res.Rejected, res.Errors, res.MeanRequest, res.MaxRequest, res.MeanWait, res.Elapsed, res.MeanInterval(), res.Spacing,
		res.Arrivals, res.ServerRejected, res.Busiest)
	return res
}

// rowProblems checks a row run against what the completion window promises
// and returns what is wrong, if anything:
//
//   - every request succeeded: no 429 and no error, counted by the workers
//     and, independently, by the server's log (every request arrived once,
//     none rejected, at most limit arrivals in any window (t−period, t]);
//   - elapsed ≥ (⌈requests ÷ limit⌉ − 1) periods: the least time the rule
//     allows, so a run that is faster could not have been checked (this
//     guards the measurement, not the limiter);
//   - mean interval (the ZSET throttler's figure, elapsed ÷ (requests ÷ limit))
//     ≤ 1.05 × period + the server's largest latency (30 ms). Why: the
//     completion window hands a slot to the next call one period after the
//     call holding it ended, so a slot's cycle is the period, plus that
//     call's round trip (the server's latency, at most latMax, and the
//     client's HTTP work), plus admission overheads (Redis round trips, the
//     head's wake-up, jitter of at most 2 ms); 5% of the period (25 ms here)
//     is the allowance for everything beyond the server's latency. elapsed
//     spans ⌈requests ÷ limit⌉ − 1 such cycles and one round trip, so the
//     mean interval stays below one cycle;
//   - the spacing between windows seen by the server ((last − first
//     arrival) ÷ (⌈requests ÷ limit⌉ − 1)) ≤ 1.05 × period + the longest
//     round trip the workers measured: the same cycle, without the first
//     window's head start that makes the mean interval lenient, and with
//     the measured round trip in place of the server's latency, since the
//     client's HTTP work under -race on a busy machine is not negligible.
//     A limiter that waited, on average over the run, more than the period
//     and the 25 ms allowance after a call's end fails this.
func rowProblems(res rowResult, latMax time.Duration) []string {
	r := res.Row
	var p []string
	if res.Successes != r.Requests || res.Failures() != 0 {
		p = append(p, fmt.Sprintf("successes %d, failures %d (rejected %d, errors %d); want %d, 0", res.Successes, res.Failures(), res.Rejected, res.Errors, r.Requests))
	}
	if limit := cmp.Or(r.ServerLimit, r.Limit); res.Arrivals != r.Requests || res.ServerRejected != 0 || res.Busiest > int(limit) {
		p = append(p, fmt.Sprintf("server: %d arrivals, %d rejected, busiest window %d; want %d, 0, ≤ %d", res.Arrivals, res.ServerRejected, res.Busiest, r.Requests, limit))
	}
	if least := minDuration(r); res.Elapsed < least {
		p = append(p, fmt.Sprintf("elapsed %v < %v, the least the rule allows", res.Elapsed, least))
	}
	bound := time.Duration(targetSlack*float64(r.Period)) + latMax
	if mi := res.MeanInterval(); mi > bound {
		p = append(p, fmt.Sprintf("mean interval %v > 1.05 × %v + %v = %v", mi, r.Period, latMax, bound))
	}
	if b := time.Duration(targetSlack*float64(r.Period)) + res.MaxRequest; res.Spacing > b {
		p = append(p, fmt.Sprintf("spacing between windows %v > 1.05 × %v + longest round trip %v = %v", res.Spacing, r.Period, res.MaxRequest, b))
	}
	return p
}

// TestSmallRow is the CI version of the program: the small row with two
// real worker processes sharing one redisrate.NewSemaphore limiter (completion window).
func TestSmallRow(t *testing.T) {
	res := runTestRow(t, smallRow)
	for _, p := range rowProblems(res, testLatMax) {
		t.Error(p)
	}
}

// TestLimiterAboveServerLimitFails is the control: the same row with the
// workers' limiter set to 40 per 500 ms while the server allows 20. The
// server must reject, and rowProblems, the check TestSmallRow makes, must
// report it: the test above can fail.
func TestLimiterAboveServerLimitFails(t *testing.T) {
	r := smallRow
	r.Limit, r.ServerLimit = 40, smallRow.Limit
	res := runTestRow(t, r)
	if res.Rejected == 0 || res.ServerRejected != res.Rejected {
		t.Errorf("workers saw %d rejections, server %d; want the same number, > 0", res.Rejected, res.ServerRejected)
	}
	if len(rowProblems(res, testLatMax)) == 0 {
		t.Error("rowProblems found nothing wrong with a limiter above the server's limit")
	}
}

// TestServerWindow checks the server's rule at its edges: accept iff fewer
// than limit accepted arrivals lie in (t−period, t]; rejections do not count.
func TestServerWindow(t *testing.T) {
	s := &apiServer{}
	s.reset(2, time.Second)
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, c := range []struct {
		ms   int
		want bool
	}{
		{0, true}, {500, true}, {999, false},
		{1000, true},  // the arrival at 0 is at t−period: out of (t−period, t]
		{1400, false}, // 500 and 1000 in (400, 1400]
		{1500, true},  // 500 left
		{1999, false}, {2000, true}, {2500, true}, {2500, false},
	} {
		if got := s.admit(at(c.ms)); got != c.want {
			t.Errorf("admit at %d ms = %v; want %v", c.ms, got, c.want)
		}
	}
}

func TestBusiestWindow(t *testing.T) {
	t0 := time.Now()
	var arr []arrival
	for _, ms := range []int{0, 100, 999, 1000, 1001, 1500, 3000} {
		arr = append(arr, arrival{At: t0.Add(time.Duration(ms) * time.Millisecond)})
	}
	// (1, 1001] holds 100, 999, 1000 and 1001; (500, 1500] holds 999, 1000,
	// 1001 and 1500; no window of 1 s holds 5 (0 and 1000 are 1 s apart).
	if got := busiestWindow(arr, time.Second); got != 4 {
		t.Errorf("busiestWindow = %d; want 4", got)
	}
	if got := busiestWindow(nil, time.Second); got != 0 {
		t.Errorf("busiestWindow(nil) = %d; want 0", got)
	}
}

func TestParseRows(t *testing.T) {
	for in, want := range map[string][]int{"1,2": {1, 2}, " 4 ": {4}, "all": {1, 2, 3, 4, 5, 6, 7, 8}} {
		if got, err := parseRows(in, 8); err != nil || !slices.Equal(got, want) {
			t.Errorf("parseRows(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "9", "1,x", "1,,2"} {
		if _, err := parseRows(in, 8); err == nil {
			t.Errorf("parseRows(%q): want an error", in)
		}
	}
}

func TestShare(t *testing.T) {
	for _, c := range []struct{ total, p int }{{9000, 3}, {30, 3}, {10, 3}, {2, 3}} {
		sum := 0
		for i := range c.p {
			n := share(c.total, c.p, i)
			if n < c.total/c.p || n > c.total/c.p+1 {
				t.Errorf("share(%d, %d, %d) = %d", c.total, c.p, i, n)
			}
			sum += n
		}
		if sum != c.total {
			t.Errorf("shares of %d over %d sum to %d", c.total, c.p, sum)
		}
	}
}

func TestWorkerArgsRoundTrip(t *testing.T) {
	want := workerConfig{ID: 2, Redis: "127.0.0.1:6379", URL: "http://127.0.0.1:1/api", Name: "n",
		Limit: 200, Period: time.Second, Buffer: 60 * time.Millisecond, Concurrency: 2000, Requests: 3000}
	got, err := parseWorkerArgs(want.args())
	if err != nil || got != want {
		t.Fatalf("parseWorkerArgs(args()) = %+v, %v; want %+v", got, err, want)
	}
	if _, err := parseWorkerArgs([]string{"-limit", "0"}); err == nil || !strings.Contains(err.Error(), "invalid") {
		t.Errorf("parseWorkerArgs of a bad config: err = %v; want invalid", err)
	}
}

// The program writes its results file only when -out asks for it: run with
// no flags, it prints the table and leaves the tracked results.md alone.
func TestWritesOnlyWhenAsked(t *testing.T) {
	o, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.Out != "" {
		t.Errorf("no flags: -out defaults to %q, want \"\" (write nothing)", o.Out)
	}
	if o, err = parseFlags([]string{"-out", "results.md"}); err != nil || o.Out != "results.md" {
		t.Errorf("-out results.md: %+v, %v", o, err)
	}
	if _, err := parseFlags([]string{"-seed", "1"}); err == nil {
		t.Error("an unknown flag was accepted")
	}
}

func TestZSetTable(t *testing.T) {
	// The rows and totals of the ZSET throttler's table; requests = successes + failures there.
	for _, r := range zsetTable {
		if r.Requests != r.ZSet.Successes+r.ZSet.Failures {
			t.Errorf("%v/%v: requests %d, ZSET throttler successes+failures %d", r.Limit, r.Period, r.Requests, r.ZSet.Successes+r.ZSet.Failures)
		}
	}
	rows := allRows()
	if len(rows) != 8 || rows[0].Buffer != 0 || rows[4].Buffer != 60*time.Millisecond {
		t.Errorf("allRows: %d rows, buffers %v, %v", len(rows), rows[0].Buffer, rows[4].Buffer)
	}
}

// TestWorkerStopsWhenStdinCloses checks the portable half of "no orphans":
// a worker started without the Linux parent-death signal stops, with an
// error, as soon as its stdin (the pipe from the parent) closes mid-run.
func TestWorkerStopsWhenStdinCloses(t *testing.T) {
	addr := redistest.Start(t).Addr()
	srv, err := startServer(testLatMin, testLatMax)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.close()
	srv.reset(1, time.Minute)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wc := workerConfig{ID: 1, Redis: addr, URL: srv.URL, Name: fmt.Sprintf("simulate-test-stdin-%d", time.Now().UnixNano()),
		Limit: 1, Period: time.Minute, Concurrency: 2, Requests: 10} // would take 9 minutes
	cmd := exec.Command(exe, append([]string{workerFlag}, wc.args()...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	in := bufio.NewScanner(stdout)
	if !in.Scan() || in.Text() != "ready" {
		_ = cmd.Process.Kill()
		t.Fatalf("worker said %q; want ready", in.Text())
	}
	go func() {
		for in.Scan() {
		}
		exited <- cmd.Wait()
	}()
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // one request admitted, the rest waiting a minute
	stdin.Close()
	select {
	case err := <-exited:
		if err == nil {
			t.Errorf("worker exited 0 after its stdin closed; want an error")
		}
		if !strings.Contains(stderr.String(), errParentGone.Error()) {
			t.Errorf("worker's stderr %q does not say %q", stderr.String(), errParentGone)
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatal("worker still running 10 s after its stdin closed")
	}
}
