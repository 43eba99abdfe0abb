// Command accuracy runs the accuracy harness of package
// github.com/ratesem/ratesem/benchmarks/accuracy in real time: every limiter
// under every latency distribution, one run after another, against an
// in-process server that enforces "at most N arrivals in any window of T"
// exactly. It prints the markdown table and writes it, with an SVG chart, to
// the paths given by -md and -svg.
//
// Run it from the benchmarks directory:
//
//	go run ./cmd/accuracy
//
// With the defaults (20 per 500 ms, 400 calls on 100 goroutines) each run
// takes about 10 s and the whole matrix a few minutes.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"time"

	"github.com/ratesem/ratesem/benchmarks/accuracy"
)

func main() {
	def := accuracy.DefaultConfig()
	var cfg accuracy.Config
	flag.IntVar(&cfg.N, "n", def.N, "the server's limit: at most `N` arrivals per window")
	flag.DurationVar(&cfg.Per, "per", def.Per, "the window `T`")
	flag.IntVar(&cfg.Calls, "calls", def.Calls, "calls per run")
	flag.IntVar(&cfg.Workers, "workers", def.Workers, "goroutines sharing the calls")
	flag.Uint64Var(&cfg.Seed, "seed", def.Seed, "seed of the latency draws")
	mdPath := flag.String("md", "accuracy/results/realtime.md", "write the markdown table to `file` (\"\" for none)")
	svgPath := flag.String("svg", "accuracy/results/realtime.svg", "write the SVG chart to `file` (\"\" for none)")
	limiters := flag.String("limiters", "", "run only the limiters whose name matches this `regexp`")
	latencies := flag.String("latencies", "", "run only the latency distributions whose name matches this `regexp`")
	extra := flag.Duration("margin-extra", 0, "add `d` to every start-window margin, an allowance for the scheduler's own jitter in real time")
	flag.Parse()
	if cfg.N <= 0 || cfg.Per <= 0 || cfg.Calls <= 0 || cfg.Workers <= 0 {
		fmt.Fprintln(os.Stderr, "accuracy: -n, -per, -calls and -workers must be positive")
		os.Exit(2)
	}

	peers, err := filter(accuracy.Peers(), *limiters, func(p accuracy.Peer) string { return p.Name })
	if err != nil {
		fmt.Fprintln(os.Stderr, "accuracy: -limiters:", err)
		os.Exit(2)
	}
	lats, err := filter(accuracy.Latencies(), *latencies, func(l accuracy.Latency) string { return l.Name })
	if err != nil {
		fmt.Fprintln(os.Stderr, "accuracy: -latencies:", err)
		os.Exit(2)
	}

	if *extra < 0 {
		fmt.Fprintln(os.Stderr, "accuracy: -margin-extra must not be negative")
		os.Exit(2)
	}
	if *extra > 0 {
		for i := range lats {
			lats[i].Margin += *extra
			lats[i].MarginNote += fmt.Sprintf(" + %v allowance (-margin-extra)", *extra)
		}
	}

	fmt.Fprintf(os.Stderr, "accuracy: %d limiters × %d latency distributions, N = %d per %v, %d calls on %d goroutines (about %v per run)\n",
		len(peers), len(lats), cfg.N, cfg.Per, cfg.Calls, cfg.Workers, time.Duration(cfg.Calls/cfg.N)*cfg.Per)
	start := time.Now()
	results := accuracy.RunAll(cfg, peers, lats, func(r accuracy.Result) {
		fmt.Fprintf(os.Stderr, "  %-26s %-38s rejected %3d  peak %3d  %5.1f%% of N/T  %5.1f%% of N/(T+L̄)  (%v)\n",
			r.Latency, r.Peer, r.Rejected, r.Peak, 100*r.ShareNT, 100*r.ShareNTL, r.Elapsed.Round(time.Millisecond))
	})
	fmt.Fprintf(os.Stderr, "accuracy: done in %v\n", time.Since(start).Round(time.Second))

	rep := accuracy.Report{
		Clock:     fmt.Sprintf("real time (%s, GOMAXPROCS %d)", runtime.Version(), runtime.GOMAXPROCS(0)),
		Command:   command(),
		Config:    cfg,
		Latencies: lats,
		Peers:     peers,
		Results:   results,
	}
	md := rep.Markdown()
	fmt.Print(md)
	for _, out := range []struct{ path, data string }{{*mdPath, md}, {*svgPath, rep.SVG()}} {
		if out.path == "" {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(out.path), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "accuracy:", err)
			os.Exit(1)
		}
		if err := os.WriteFile(out.path, []byte(out.data), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "accuracy:", err)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "accuracy: wrote", out.path)
	}
}

// command is how the program was invoked, as "go run ./cmd/accuracy" and
// the flags given.
func command() string {
	c := "go run ./cmd/accuracy"
	flag.Visit(func(f *flag.Flag) { c += fmt.Sprintf(" -%s=%s", f.Name, f.Value) })
	return c
}

// filter keeps the elements whose name matches expr (all when expr is "").
func filter[T any](xs []T, expr string, name func(T) string) ([]T, error) {
	if expr == "" {
		return xs, nil
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, err
	}
	var out []T
	for _, x := range xs {
		if re.MatchString(name(x)) {
			out = append(out, x)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%q matches nothing", expr)
	}
	return out, nil
}
