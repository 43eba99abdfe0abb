// Command fleetbench measures a fleet of processes on ratesem over Redis:
// issue 20's item 6, "scale beyond one process, in simulation". It starts
// its own Redis (a redis-server on a free loopback port without persistence,
// or with -cluster a Redis Cluster of three masters, both through package
// redistest) and K worker processes (copies of itself with -worker), each
// running G goroutines of Acquire+Release as fast as they can for -duration,
// against
//
//   - by default one shared limit, redisrate.NewSemaphore(client, "one", N,
//     per), with N so high that it never binds: the measure is throughput;
//   - with -scopes S, S clientpool Pools over redisrate.Shared, each Table
//     one rule under its own Scope (its own hash tag, so on a cluster the
//     scopes spread over the masters); the K·G goroutines are dealt round
//     the scopes in turn (goroutine g of worker k calls scope
//     ((k-1)·G + g) mod S).
//
// It prints, per process and in total, calls/s, round trips per call
// (counted by a go-redis hook on the worker's client; a pipeline is one),
// commands per call, and the worker's CPU per call (getrusage over the run);
// and per Redis node its CPU over the run (INFO cpu, used_cpu_sys +
// used_cpu_user, before and after), how busy that kept its one command
// thread, its CPU per call of the fleet, and with scopes the share of the
// calls it decided and its CPU per call it decided.
//
//	cd benchmarks
//	go run ./cmd/fleetbench                                   # K=8 G=8, one semaphore, 10 s
//	go run ./cmd/fleetbench -cluster -scopes 16               # 16 scopes over 3 masters
//	go run ./cmd/fleetbench -procs 4 -g 16 -duration 5s
//
// The workers and Redis share this machine's cores: on a small machine the
// totals are a floor of what separate hosts would do.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/redistest"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == workerFlag {
		os.Exit(workerMain(os.Args[2:]))
	}
	os.Exit(parentMain(os.Args[1:], os.Stdout, os.Stderr))
}

// config is one run; see parseFlags.
type config struct {
	Procs, Goroutines, Scopes int
	Cluster                   bool
	N                         int64
	Per, Duration             time.Duration
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("fleetbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.Procs, "procs", 8, "worker processes (K)")
	fs.IntVar(&c.Goroutines, "g", 8, "goroutines per worker (G)")
	fs.IntVar(&c.Scopes, "scopes", 0, "0: one shared semaphore; S > 0: S clientpool scopes (one Pool each)")
	fs.BoolVar(&c.Cluster, "cluster", false, "a 3-master Redis Cluster instead of one redis-server")
	fs.Int64Var(&c.N, "n", 1<<40, "the limit's N (high enough never to bind)")
	fs.DurationVar(&c.Per, "per", time.Second, "the limit's interval")
	fs.DurationVar(&c.Duration, "duration", 10*time.Second, "how long the workers run")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	case c.Procs < 1 || c.Procs > 256:
		return c, fmt.Errorf("-procs %d: want 1 to 256", c.Procs)
	case c.Goroutines < 1 || c.Goroutines > 4096:
		return c, fmt.Errorf("-g %d: want 1 to 4096", c.Goroutines)
	case c.Scopes < 0 || c.Scopes > 1024:
		return c, fmt.Errorf("-scopes %d: want 0 to 1024", c.Scopes)
	case c.N < 1:
		return c, fmt.Errorf("-n %d: want ≥ 1", c.N)
	case c.Per <= 0 || c.Per%time.Microsecond != 0:
		return c, fmt.Errorf("-per %v: want > 0, a whole number of µs", c.Per)
	case c.Duration <= 0:
		return c, fmt.Errorf("-duration %v: want > 0", c.Duration)
	}
	return c, nil
}

func parentMain(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "fleetbench:", err)
		return 2
	}
	if err := run(cfg, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "fleetbench:", err)
		return 1
	}
	return 0
}

// worker is a running worker process.
type worker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

func run(cfg config, stdout, stderr io.Writer) error {
	ctx := context.Background()
	var addrs []string
	if cfg.Cluster {
		c, err := redistest.LaunchCluster()
		if err != nil {
			return err
		}
		defer c.Stop()
		addrs = c.Addrs()
	} else {
		s, err := redistest.Launch()
		if err != nil {
			return err
		}
		defer s.Stop()
		addrs = []string{s.Addr()}
	}
	nodes := make([]*goredis.Client, len(addrs))
	for i, a := range addrs {
		nodes[i] = goredis.NewClient(&goredis.Options{Addr: a})
		defer nodes[i].Close()
	}
	var scopeNode []int
	if cfg.Scopes > 0 {
		var err error
		if scopeNode, err = scopeNodes(ctx, nodes[0], addrs, cfg.Scopes, cfg.Cluster); err != nil {
			return err
		}
	}

	what := "one semaphore"
	if cfg.Scopes > 0 {
		what = fmt.Sprintf("%d scopes (one clientpool Pool each)", cfg.Scopes)
	}
	where := "one redis-server"
	if cfg.Cluster {
		where = fmt.Sprintf("a %d-master Redis Cluster", len(addrs))
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(stdout, "fleetbench: %d processes × %d goroutines, Acquire+Release on %s (N=%d per %v), %s, %v; %d CPUs shared by workers and Redis; load %s\n\n",
		cfg.Procs, cfg.Goroutines, what, cfg.N, cfg.Per, where, cfg.Duration, runtime.NumCPU(), strings.Join(strings.Fields(string(load))[:min(3, len(strings.Fields(string(load))))], " "))

	exe, err := os.Executable()
	if err != nil {
		return err
	}
	prefix := fmt.Sprintf("fleetbench-%d", time.Now().UnixNano())
	ws := make([]*worker, cfg.Procs)
	defer func() {
		for _, w := range ws {
			if w != nil && w.cmd.ProcessState == nil {
				_ = w.cmd.Process.Kill()
				_ = w.cmd.Wait()
			}
		}
	}()
	for i := range ws {
		wc := workerConfig{ID: i + 1, Redis: strings.Join(addrs, ","), Cluster: cfg.Cluster, Prefix: prefix,
			Goroutines: cfg.Goroutines, Scopes: cfg.Scopes, N: cfg.N, Per: cfg.Per, Duration: cfg.Duration}
		cmd := exec.Command(exe, append([]string{workerFlag}, wc.args()...)...)
		cmd.Stderr = stderr
		dieWithParent(cmd)
		in, err := cmd.StdinPipe()
		if err != nil {
			return err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		w := &worker{cmd: cmd, stdin: in, out: bufio.NewScanner(out)}
		w.out.Buffer(nil, 1<<20)
		ws[i] = w
	}
	for i, w := range ws {
		if !w.out.Scan() || w.out.Text() != "ready" {
			return fmt.Errorf("worker %d did not get ready", i+1)
		}
	}

	before, err := nodeCPU(ctx, nodes)
	if err != nil {
		return err
	}
	t0 := time.Now()
	for _, w := range ws {
		if _, err := io.WriteString(w.stdin, "go\n"); err != nil {
			return err
		}
	}
	reps := make([]workerReport, len(ws))
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Go(func() {
			if !w.out.Scan() {
				errs[i] = fmt.Errorf("worker %d: no report", i+1)
				return
			}
			errs[i] = json.Unmarshal(w.out.Bytes(), &reps[i])
		})
	}
	wg.Wait()
	wall := time.Since(t0).Seconds()
	after, err := nodeCPU(ctx, nodes)
	if err != nil {
		return err
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, w := range ws {
		if err := w.cmd.Wait(); err != nil {
			return fmt.Errorf("worker: %v", err)
		}
	}
	delta := make([]int64, len(nodes))
	for i := range delta {
		delta[i] = after[i] - before[i]
	}
	s := summarize(reps, addrs, delta, wall, scopeNode)
	s.write(stdout)
	for _, r := range reps {
		if r.Errors > 0 {
			return fmt.Errorf("worker %d: %d failed Acquires, the first: %s", r.ID, r.Errors, r.FirstError)
		}
	}
	return nil
}

// nodeCPU reads every node's CPU (µs).
func nodeCPU(ctx context.Context, nodes []*goredis.Client) ([]int64, error) {
	out := make([]int64, len(nodes))
	for i, n := range nodes {
		info, err := n.Info(ctx, "cpu").Result()
		if err != nil {
			return nil, err
		}
		if out[i], err = parseCPU(info); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// scopeNodes returns the index in addrs of the node holding each scope's
// hash tag (all 0 without a cluster).
func scopeNodes(ctx context.Context, c *goredis.Client, addrs []string, scopes int, cluster bool) ([]int, error) {
	out := make([]int, scopes)
	if !cluster {
		return out, nil
	}
	slots, err := c.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, err
	}
	for i := range out {
		slot, err := c.ClusterKeySlot(ctx, scopeName(i)).Result()
		if err != nil {
			return nil, err
		}
		out[i] = -1
		for _, r := range slots {
			if int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 {
				out[i] = nodeIndex(addrs, r.Nodes[0].Addr)
			}
		}
		if out[i] < 0 {
			return nil, fmt.Errorf("scope %s (slot %d): no master among %v", scopeName(i), slot, addrs)
		}
	}
	return out, nil
}

// nodeIndex is the index of addr in addrs, matching the port when the host
// is spelt differently (a node may name itself by another address).
func nodeIndex(addrs []string, addr string) int {
	for i, a := range addrs {
		if a == addr {
			return i
		}
	}
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	for i, a := range addrs {
		if a[strings.LastIndexByte(a, ':')+1:] == port {
			return i
		}
	}
	return -1
}
