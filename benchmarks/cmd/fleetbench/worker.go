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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/benchmarks/internal/trips"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/redisrate"
	"github.com/ratesem/ratesem/window"
)

// workerFlag, as the first argument, makes the program a worker. The
// parent starts them; nobody else should.
const workerFlag = "-worker"

// workerConfig is what a worker is told on its command line.
type workerConfig struct {
	ID         int // 1 to Procs
	Redis      string
	Cluster    bool
	Prefix     string
	Goroutines int
	Scopes     int // 0: one shared semaphore
	N          int64
	Per        time.Duration
	Duration   time.Duration
}

// args renders c as the worker's command line (after workerFlag).
func (c workerConfig) args() []string {
	return []string{
		"-id", strconv.Itoa(c.ID),
		"-redis", c.Redis,
		"-cluster=" + strconv.FormatBool(c.Cluster),
		"-prefix", c.Prefix,
		"-g", strconv.Itoa(c.Goroutines),
		"-scopes", strconv.Itoa(c.Scopes),
		"-n", strconv.FormatInt(c.N, 10),
		"-per", c.Per.String(),
		"-duration", c.Duration.String(),
	}
}

// parseWorkerArgs is the inverse of args.
func parseWorkerArgs(args []string) (workerConfig, error) {
	var c workerConfig
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.IntVar(&c.ID, "id", 0, "")
	fs.StringVar(&c.Redis, "redis", "", "")
	fs.BoolVar(&c.Cluster, "cluster", false, "")
	fs.StringVar(&c.Prefix, "prefix", "", "")
	fs.IntVar(&c.Goroutines, "g", 0, "")
	fs.IntVar(&c.Scopes, "scopes", 0, "")
	fs.Int64Var(&c.N, "n", 0, "")
	fs.DurationVar(&c.Per, "per", 0, "")
	fs.DurationVar(&c.Duration, "duration", 0, "")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.ID < 1 || c.Redis == "" || c.Prefix == "" || c.Goroutines < 1 || c.Scopes < 0 || c.N < 1 || c.Per <= 0 || c.Duration <= 0 || fs.NArg() > 0 {
		return c, fmt.Errorf("invalid worker arguments %q", args)
	}
	return c, nil
}

// scopeOf is the scope that goroutine g (0-based) of worker id (1-based)
// calls under: the K·G goroutines of the fleet dealt round the scopes in
// turn, so every scope gets the same number (±1) and a worker's G
// goroutines take G consecutive scopes.
func scopeOf(id, g, goroutines, scopes int) int {
	return ((id-1)*goroutines + g) % scopes
}

// scopeName is the Table.Scope (hence the Redis Cluster hash tag) of scope i.
func scopeName(i int) string { return fmt.Sprintf("fleetbench-%02d", i) }

// workerReport is one worker's result, one JSON line on its stdout.
type workerReport struct {
	ID         int
	Calls      int64   // Acquire+Release pairs completed in the run
	Errors     int64   // failed Acquires
	FirstError string  `json:",omitempty"`
	Trips      int64   // round trips (a pipeline is one) during the run
	Cmds       int64   // Redis commands they carried
	CPUMicros  int64   // user + system CPU of the worker during the run
	Seconds    float64 // the run's wall time
	ScopeCalls []int64 `json:",omitempty"` // calls per scope index (Scopes > 0)
}

// workerMain builds the worker's limits, prints "ready", waits for "go" on
// stdin, runs its goroutines for the duration, and prints its report. A
// closed stdin before "go" ends it.
func workerMain(args []string) int {
	cfg, err := parseWorkerArgs(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetbench worker:", err)
		return 2
	}
	rep, err := work(cfg, os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fleetbench worker %d: %v\n", cfg.ID, err)
		return 1
	}
	b, _ := json.Marshal(rep)
	fmt.Println(string(b))
	return 0
}

func work(cfg workerConfig, in io.Reader, out io.Writer) (workerReport, error) {
	rep := workerReport{ID: cfg.ID}
	var rdb goredis.UniversalClient
	if cfg.Cluster {
		rdb = goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: strings.Split(cfg.Redis, ",")})
	} else {
		rdb = goredis.NewClient(&goredis.Options{Addr: cfg.Redis})
	}
	defer rdb.Close()
	tc := new(trips.Counter)
	rdb.AddHook(tc)

	// ops[g] is goroutine g's call: Acquire then Release.
	ops := make([]func(context.Context) error, cfg.Goroutines)
	var closers []func() error
	defer func() {
		for _, c := range closers {
			_ = c()
		}
	}()
	if cfg.Scopes == 0 {
		s, err := redisrate.NewSemaphore(rdb, "one", cfg.N, cfg.Per, redisrate.WithPrefix(cfg.Prefix))
		if err != nil {
			return rep, err
		}
		closers = append(closers, s.Close)
		op := func(ctx context.Context) error {
			if err := s.Acquire(ctx, 1); err != nil {
				return err
			}
			s.Release(1)
			return nil
		}
		for g := range ops {
			ops[g] = op
		}
	} else {
		rep.ScopeCalls = make([]int64, cfg.Scopes)
		pools := map[int]*clientpool.Pool{}
		charge := clientpool.Charge{Rule: "calls", Key: "k", Weight: 1}
		for g := range ops {
			i := scopeOf(cfg.ID, g, cfg.Goroutines, cfg.Scopes)
			p := pools[i]
			if p == nil {
				table := clientpool.Table{
					Rules: []clientpool.Rule{{Name: "calls", Limit: window.Limit{N: cfg.N, Per: cfg.Per}}},
					Scope: scopeName(i),
				}
				var err error
				if p, err = clientpool.New(table, redisrate.Shared(rdb, cfg.Prefix)); err != nil {
					return rep, fmt.Errorf("scope %d: %w", i, err)
				}
				pools[i] = p
				closers = append(closers, p.Close)
			}
			ops[g] = func(ctx context.Context) error {
				tk, err := p.Acquire(ctx, charge)
				if err != nil {
					return err
				}
				tk.Release()
				return nil
			}
		}
	}

	fmt.Fprintln(out, "ready")
	sc := bufio.NewScanner(in)
	if !sc.Scan() || sc.Text() != "go" {
		return rep, errors.New("no go from the parent")
	}
	go func() { // the parent gone: stop
		for sc.Scan() {
		}
		os.Exit(1)
	}()

	var stop atomic.Bool
	calls := make([]int64, cfg.Goroutines)
	var errs atomic.Int64
	var firstErr atomic.Value
	tr0, cmd0, cpu0, t0 := tc.N.Load(), tc.Cmds.Load(), cpuMicros(), time.Now()
	var wg sync.WaitGroup
	for g := range ops {
		wg.Go(func() {
			ctx := context.Background()
			for !stop.Load() {
				if err := ops[g](ctx); err != nil {
					if errs.Add(1) == 1 {
						firstErr.Store(err.Error())
					}
					time.Sleep(time.Millisecond)
					continue
				}
				calls[g]++
			}
		})
	}
	time.Sleep(cfg.Duration)
	stop.Store(true)
	wg.Wait()
	rep.Seconds = time.Since(t0).Seconds()
	rep.CPUMicros = cpuMicros() - cpu0
	rep.Trips, rep.Cmds = tc.N.Load()-tr0, tc.Cmds.Load()-cmd0
	for g, n := range calls {
		rep.Calls += n
		if rep.ScopeCalls != nil {
			rep.ScopeCalls[scopeOf(cfg.ID, g, cfg.Goroutines, cfg.Scopes)] += n
		}
	}
	rep.Errors = errs.Load()
	if s, ok := firstErr.Load().(string); ok {
		rep.FirstError = s
	}
	return rep, nil
}
