package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// TestMain doubles as the worker: the program starts copies of
// os.Executable(), here the test binary, with -worker as their first
// argument, so the tests below run real OS processes.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == workerFlag {
		os.Exit(workerMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// needRedis skips t when redis-server (and, for a cluster, redis-cli) is
// not installed, unless CI is set: a CI run must not pass by skipping; and
// under -short (the fleet's runs take seconds each).
func needRedis(t *testing.T, cluster bool) {
	t.Helper()
	bins := []string{"redis-server"}
	if cluster {
		bins = append(bins, "redis-cli")
	}
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s not found and CI is set: install it (apt-get install redis-server)", b)
			}
			t.Skipf("%s not found: install it (apt-get install redis-server) to run this test", b)
		}
	}
	skipShort(t)
}

// skipShort skips t under go test -short: a run of the fleet takes
// seconds.
func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the fleet for seconds; not under -short")
	}
}

// runFleet runs the program in this process (its workers are copies of the
// test binary) and returns its exit status and output.
func runFleet(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out, errs bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	code := parentMain(ctx, args, &out, &errs)
	t.Logf("fleet %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errs.String())
	return code, out.String() + errs.String()
}

// summary is what the tests read from the program's output.
type summary struct {
	rejections, violations, full int
	leastUse                     float64
	ok                           bool
}

var (
	reRejections = regexp.MustCompile(`(?m)^  rejections (\d+) `)
	reViolations = regexp.MustCompile(`(?m)^  violations (\d+)$`)
	reFull       = regexp.MustCompile(`(?m)^  full windows (\d+)(?:, least use ([0-9.]+)%)?`)
)

// parseSummary reads the summary lines of out; it fails t when one is
// missing.
func parseSummary(t *testing.T, out string) summary {
	t.Helper()
	var s summary
	num := func(re *regexp.Regexp, name string) (int, []string) {
		m := re.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no %q line in the output", name)
		}
		n, err := strconv.Atoi(m[1])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return n, m
	}
	s.rejections, _ = num(reRejections, "rejections")
	s.violations, _ = num(reViolations, "violations")
	var m []string
	s.full, m = num(reFull, "full windows")
	if m[2] != "" {
		s.leastUse, _ = strconv.ParseFloat(m[2], 64)
	}
	s.ok = strings.Contains(out, "\nresult: ok\n")
	return s
}

// smallArgs make a run small: a Binance minute of 6 s (scale 10), 13 s of
// work (at least one full window of REQUEST_WEIGHT), a quarter of the
// weight to the foreign client. -min-use 0: the tests check what must
// hold on any machine (no rejection at the server, no violation, the
// report); how much of the limit the workers spend is a speed claim, which
// depends on the machine (the race detector and the rest of the test run
// share CI's two cores) and is measured by running the program itself
// (`go run ./examples/fleet`, default -min-use 95).
var smallArgs = []string{"-procs", "3", "-scale", "10", "-duration", "13s", "-foreign", "0.25", "-min-use", "0"}

// checkClean asserts a run met what must hold anywhere: exit 0, no
// rejection, no violation, at least one full window.
func checkClean(t *testing.T, code int, out string) summary {
	t.Helper()
	s := parseSummary(t, out)
	if code != 0 || !s.ok || s.rejections != 0 || s.violations != 0 || s.full < 1 {
		t.Fatalf("exit %d, result ok %v, %d rejections, %d violations, %d full windows, least use %.1f%%; want 0, true, 0, 0, ≥ 1",
			code, s.ok, s.rejections, s.violations, s.full, s.leastUse)
	}
	return s
}

// Three processes share the preset's rules through one redis-server: no
// rejection at the server, no violation.
func TestFleetSingleServer(t *testing.T) {
	needRedis(t, false)
	code, out := runFleet(t, smallArgs...)
	checkClean(t, code, out)
}

// The same through a Redis Cluster of three masters that the program
// starts (redis-cli --cluster create).
func TestFleetCluster(t *testing.T) {
	needRedis(t, true)
	code, out := runFleet(t, append([]string{"-cluster"}, smallArgs...)...)
	checkClean(t, code, out)
	if !strings.Contains(out, "one Redis Cluster of 3 masters") {
		t.Fatal("the run did not say it used a cluster")
	}
}

// Worker 1 holds all the REQUEST_WEIGHT the foreign client leaves (4500 of
// 6000) in an admitted call and is SIGKILLed while it holds it. The two
// others carry on: no rejection, no violation, and they spend weight in the
// full windows that begin after the call's lease (2 s) ran out, which they
// could not while the dead process's units still counted. A window that
// begins while the lease holds is reported as held and not judged.
func TestFleetWorkerKilledMidCall(t *testing.T) {
	needRedis(t, false)
	code, out := runFleet(t, "-procs", "3", "-scale", "10", "-duration", "19s", "-foreign", "0.25", "-kill", "-lease", "2s", "-min-use", "0")
	s := checkClean(t, code, out)
	if !strings.Contains(out, "worker 1 SIGKILLed") {
		t.Fatal("worker 1 was not killed while holding its call")
	}
	if s.leastUse <= 0 {
		t.Fatalf("a full window after the lease used %.1f%% of what the foreign client left: the dead process's units were not freed", s.leastUse)
	}
}

// Without Redis, one process with all of every limit: the harness itself
// (processes, server, foreign client, report) meets the targets.
func TestFleetLocalOneProcess(t *testing.T) {
	skipShort(t)
	code, out := runFleet(t, "-local", "-procs", "1", "-klines", "48", "-scale", "10", "-duration", "13s", "-min-use", "0")
	checkClean(t, code, out)
}

// The program fails when the server rejects anything: one process that
// ignores the usage headers does not see the foreign client's weight and
// runs into 429s. 48 klines goroutines can send about 4800 weight a second
// at the server's latency, well above the 1000 a second the foreign client
// leaves, even on a loaded machine (with 16 a run under the race detector
// once stayed below it and saw no 429).
func TestFleetRejectionFails(t *testing.T) {
	skipShort(t)
	code, out := runFleet(t, "-local", "-procs", "1", "-klines", "48", "-scale", "20", "-duration", "5s", "-foreign", "0.5", "-no-usage")
	s := parseSummary(t, out)
	if code != 1 || s.ok || s.rejections == 0 {
		t.Fatalf("exit %d, result ok %v, %d rejections; want 1, false, > 0", code, s.ok, s.rejections)
	}
}

// Invalid command lines are refused with exit status 2 before anything
// starts.
func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-procs", "0"}, {"-procs", "-1"}, {"-procs", "65"},
		{"-scale", "0"}, {"-scale", "-3"}, {"-scale", "NaN"}, {"-scale", "+Inf"}, {"-scale", "1e9"},
		{"-duration", "0s"}, {"-duration", "-1s"},
		{"-foreign", "-0.1"}, {"-foreign", "0.95"}, {"-foreign", "NaN"},
		{"-klines", "0", "-depth", "0", "-orders", "0"}, {"-klines", "-1"}, {"-klines", "2000"}, {"-depth", "-1"},
		{"-latency", "30ms-10ms"}, {"-latency", "-1ms"}, {"-latency", "fast"}, {"-latency", "2m"}, {"-latency", ""},
		{"-lease", "-1s"}, {"-min-use", "101"}, {"-min-use", "-1"},
		{"-scale", "12"}, {"-scale", "30"},
		{"-kill", "-local"}, {"-kill", "-procs", "1"},
		{"-procs", "9223372036854775808"}, {"stray"},
	} {
		var out, errs bytes.Buffer
		if code := parentMain(context.Background(), args, &out, &errs); code != 2 {
			t.Errorf("fleet %q: exit %d, want 2 (%s)", args, code, errs.String())
		}
	}
}

func TestParseRange(t *testing.T) {
	for _, c := range []struct {
		in     string
		lo, hi time.Duration
		ok     bool
	}{
		{"10ms-30ms", 10 * time.Millisecond, 30 * time.Millisecond, true},
		{"5ms", 5 * time.Millisecond, 5 * time.Millisecond, true},
		{"0s-0s", 0, 0, true},
		{"0s-1m", 0, time.Minute, true},
		{"0s-1m1ns", 0, 0, false},
		{"30ms-10ms", 0, 0, false},
		{"-5ms", 0, 0, false},
		{"1ms-", 0, 0, false},
		{"", 0, 0, false},
		{"1ms-2ms-3ms", 0, 0, false},
		{"9223372036854775807ns", 0, 0, false},
	} {
		lo, hi, err := parseRange(c.in)
		if (err == nil) != c.ok || lo != c.lo || hi != c.hi {
			t.Errorf("parseRange(%q) = %v, %v, %v; want %v, %v, ok %v", c.in, lo, hi, err, c.lo, c.hi, c.ok)
		}
	}
}

// FuzzParseRange: whatever the input, an accepted range is ordered, not
// negative and at most a minute.
func FuzzParseRange(f *testing.F) {
	for _, s := range []string{"10ms-30ms", "5ms", "", "-", "30ms-10ms", "1h", "0s-1m", "9223372036854775807ns-1ns"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lo, hi, err := parseRange(s)
		if err != nil {
			if lo != 0 || hi != 0 {
				t.Fatalf("parseRange(%q) = %v, %v with error %v", s, lo, hi, err)
			}
			return
		}
		if lo < 0 || hi < lo || hi > time.Minute {
			t.Fatalf("parseRange(%q) = %v, %v", s, lo, hi)
		}
	})
}

// The worker's command line survives the trip through args and
// parseWorkerArgs, and a worker refuses a broken one.
func TestWorkerArgs(t *testing.T) {
	c := workerConfig{ID: 2, Redis: "127.0.0.1:1,127.0.0.1:2", Cluster: true, Prefix: "p", URL: "http://x", Scale: 12.5,
		Klines: 3, Orders: 1, Lease: 1500 * time.Millisecond, Procs: 3, Hold: 3000, NoUsage: true}
	got, err := parseWorkerArgs(c.args())
	if err != nil || got != c {
		t.Fatalf("parseWorkerArgs(args(%+v)) = %+v, %v", c, got, err)
	}
	for _, bad := range []func(*workerConfig){
		func(c *workerConfig) { c.URL = "" },
		func(c *workerConfig) { c.Prefix = "" },
		func(c *workerConfig) { c.Scale = 0 },
		func(c *workerConfig) { c.Procs = 0 },
		func(c *workerConfig) { c.Lease = -1 },
		func(c *workerConfig) { c.Hold = -1 },
		func(c *workerConfig) { c.Klines = -1 },
		func(c *workerConfig) { c.Redis = "" },
	} {
		b := c
		bad(&b)
		if _, err := parseWorkerArgs(b.args()); err == nil {
			t.Errorf("parseWorkerArgs(args(%+v)) accepted it", b)
		}
	}
	if code := workerMain([]string{"-id", "x"}); code != 2 {
		t.Errorf("workerMain with a bad command line: exit %d, want 2", code)
	}
}

// The cluster the program starts is three masters sharing the 16384 slots,
// and a go-redis ClusterClient on its seed addresses reaches keys on every
// one of them.
func TestStartCluster(t *testing.T) {
	needRedis(t, true)
	addr, stop, err := startRedis(true)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	addrs := strings.Split(addr, ",")
	if len(addrs) != 3 {
		t.Fatalf("startRedis(true) = %q; want three addresses", addr)
	}
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs})
	defer c.Close()
	ctx := context.Background()
	masters := map[string]bool{}
	for i := range 64 {
		key := "k" + strconv.Itoa(i)
		if err := c.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		slot, err := c.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		masters[strconv.FormatInt(slot*3/16384, 10)] = true
	}
	if len(masters) != 3 {
		t.Fatalf("64 keys landed in %d thirds of the slot space; want 3", len(masters))
	}
	shards, err := c.ClusterShards(ctx).Result()
	if err != nil || len(shards) != 3 {
		t.Fatalf("CLUSTER SHARDS: %d shards, %v; want 3", len(shards), err)
	}
}
