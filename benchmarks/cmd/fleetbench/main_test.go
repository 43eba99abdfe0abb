package main

import (
	"bytes"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The program itself (Redis and worker processes) never runs under go test:
// these tests check its parsing and arithmetic.

func TestParseCPU(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:0.500001\r\nused_cpu_sys_children:9.000000\r\nused_cpu_user_children:9.000000\r\n"
	us, err := parseCPU(info)
	if err != nil || us != 1750001 {
		t.Fatalf("parseCPU = %d, %v; want 1750001", us, err)
	}
	if _, err := parseCPU("# CPU\r\nused_cpu_sys:1.0\r\n"); err == nil {
		t.Fatal("parseCPU without used_cpu_user: no error")
	}
	if _, err := parseCPU("used_cpu_sys:x\r\nused_cpu_user:1\r\n"); err == nil {
		t.Fatal("parseCPU of a non-number: no error")
	}
}

func TestWorkerArgsRoundTrip(t *testing.T) {
	c := workerConfig{ID: 3, Redis: "127.0.0.1:1,127.0.0.1:2", Cluster: true, Prefix: "p", Goroutines: 8, Scopes: 16, N: 1 << 40, Per: time.Second, Duration: 10 * time.Second}
	got, err := parseWorkerArgs(c.args())
	if err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("parseWorkerArgs(args()) = %+v, %v; want %+v", got, err, c)
	}
	c.Goroutines = 0
	if _, err := parseWorkerArgs(c.args()); err == nil {
		t.Fatal("-g 0: no error")
	}
}

func TestParseFlags(t *testing.T) {
	c, err := parseFlags(nil, &bytes.Buffer{})
	if err != nil || c.Procs != 8 || c.Goroutines != 8 || c.Scopes != 0 || c.Cluster || c.Duration != 10*time.Second {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
	for _, args := range [][]string{{"-procs", "0"}, {"-per", "1500ns"}, {"-scopes", "-1"}, {"extra"}} {
		if _, err := parseFlags(args, &bytes.Buffer{}); err == nil {
			t.Errorf("parseFlags(%q): no error", args)
		}
	}
}

// TestScopeOf: the fleet's goroutines are dealt round the scopes evenly, and
// a worker's goroutines take consecutive scopes.
func TestScopeOf(t *testing.T) {
	const k, g, s = 8, 8, 16
	per := make([]int, s)
	for id := 1; id <= k; id++ {
		for i := range g {
			per[scopeOf(id, i, g, s)]++
		}
	}
	for i, n := range per {
		if n != k*g/s {
			t.Fatalf("scope %d has %d goroutines, want %d", i, n, k*g/s)
		}
	}
	if scopeOf(2, 0, g, s) != 8 || scopeOf(3, 7, g, s) != 7 {
		t.Fatal("worker 2 should start at scope 8, worker 3 end at 7")
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestSummarize(t *testing.T) {
	reps := []workerReport{
		{ID: 1, Calls: 1000, Trips: 500, Cmds: 2000, CPUMicros: 30000, Seconds: 2, ScopeCalls: []int64{600, 400, 0}},
		{ID: 2, Calls: 3000, Trips: 3000, Cmds: 6000, CPUMicros: 60000, Seconds: 1.5, ScopeCalls: []int64{0, 0, 3000}},
	}
	addrs := []string{"a:1", "b:2"}
	s := summarize(reps, addrs, []int64{40000, 160000}, 2, []int{0, 1, 1})
	p1, p2, tot := s.Procs[0], s.Procs[1], s.Total
	switch {
	case !near(p1.PerSec, 500) || !near(p1.TripsPerCall, 0.5) || !near(p1.CmdsPerCall, 2) || !near(p1.ClientMicrosPerCall, 30):
		t.Errorf("proc 1: %+v", p1)
	case !near(p2.PerSec, 2000) || !near(p2.TripsPerCall, 1) || !near(p2.ClientMicrosPerCall, 20):
		t.Errorf("proc 2: %+v", p2)
	case tot.Calls != 4000 || !near(tot.PerSec, 2500) || !near(tot.TripsPerCall, 3500.0/4000) || !near(tot.ClientMicrosPerCall, 90000.0/4000):
		t.Errorf("total: %+v", tot)
	case !near(s.RedisMicrosPerCall, 50):
		t.Errorf("Redis µs per call %v, want 50", s.RedisMicrosPerCall)
	}
	n0, n1 := s.Nodes[0], s.Nodes[1]
	switch {
	case n0.Scopes != 1 || !near(n0.Share, 0.15) || !near(n0.MicrosPerCall, 10) || !near(n0.MicrosPerOwn, 40000.0/600) || !near(n0.Busy, 0.02):
		t.Errorf("node 0: %+v", n0)
	case n1.Scopes != 2 || !near(n1.Share, 0.85) || !near(n1.MicrosPerCall, 40) || !near(n1.MicrosPerOwn, 160000.0/3400) || !near(n1.Busy, 0.08):
		t.Errorf("node 1: %+v", n1)
	}
	var b bytes.Buffer
	s.write(&b)
	for _, want := range []string{"total", "85.0%", "50.0"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}

	// One node without scopes: it decided every call.
	one := summarize(reps[:1], []string{"a:1"}, []int64{25000}, 2, nil)
	if n := one.Nodes[0]; !near(n.Share, 1) || !near(n.MicrosPerOwn, 25) {
		t.Errorf("single node: %+v", n)
	}
}
