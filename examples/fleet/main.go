// Command fleet runs K real processes of one Binance bot that share the
// whole Binance Spot rule set through one Redis: REQUEST_WEIGHT and
// RAW_REQUESTS of their common IP, ORDERS_10S and ORDERS_1D of their common
// account, each call admitted under every rule it falls under at once
// (redisrate.Shared over the exchange/binance preset, unchanged).
//
//	go run ./examples/fleet                           # 3 processes, one redis-server, 20 s
//	go run ./examples/fleet -cluster                  # the same through a 3-master Redis Cluster
//	go run ./examples/fleet -procs 5 -scale 20 -duration 30s -foreign 0.4
//	go run ./examples/fleet -redis 127.0.0.1:6379     # a Redis of your own (keys under a fresh prefix)
//	go run ./examples/fleet -local                    # no Redis: each process 1/K of every limit
//
// The parent process
//   - starts Redis, unless -redis names one: a redis-server child on a free
//     loopback port (no persistence), or with -cluster three redis-server
//     children in cluster mode joined by `redis-cli --cluster create …
//     --cluster-replicas 0 --cluster-yes` (all of a pool's keys share one
//     hash tag, so they live on one of the three masters);
//   - serves Binance Spot from exchange/exchangetest's server, which
//     enforces Binance's own rules (fixed windows aligned to the clock,
//     divided by -scale, 429 with Retry-After and 418 bans) and logs every
//     arrival, with a latency uniform in -latency;
//   - starts K copies of itself with -worker. Each runs a klines backfill
//     (-klines goroutines of GET /api/v3/klines, weight 2), an order book
//     poller (-depth goroutines of GET /api/v3/depth, whose limits 100,
//     500, 1000 and 5000 in turn weigh 5, 25, 50 and 250) and an order
//     stream (-orders goroutines of POST /api/v3/order on one account:
//     weight 1 and one order in each ORDERS rule) through
//     httpclient.NewPool, for -duration;
//   - runs a foreign client: another program on the same IP that spends
//     -foreign of the REQUEST_WEIGHT limit at the start of every window, all at once,
//     without asking ratesem. The workers learn of it only from the
//     X-MBX-USED-WEIGHT-1M header of their own responses
//     (Ticket.ObserveHeaders, which httpclient.NewPool calls);
//   - prints, from the workers' reports, each process's and the total use
//     of every rule, and from the server's log, for every window of
//     REQUEST_WEIGHT, the foreign client's weight and the share of what it
//     left that the fleet used, the rejections (429 and 418, to anyone) and
//     the violations (a window in which the load offered exceeded a rule).
//
// It exits 0 when there was no rejection, no violation and no failed worker,
// and every full window of REQUEST_WEIGHT (one that lies within the run)
// was used to at least -min-use percent of what the foreign client left; 1
// otherwise; 2 when it could not run.
//
// With -kill, worker 1 first acquires half of the REQUEST_WEIGHT limit and
// never releases it; the parent SIGKILLs it while it holds that call. The
// other workers carry on: the call's lease (-lease) runs out in Redis and
// frees its units. Windows that begin before the kill plus the lease are not
// held to -min-use; the ones after are, which they can only meet if the
// lease freed the dead process's units.
//
// Workers die with the parent: on Linux the kernel kills them (and the
// redis-servers) when it dies, and everywhere a worker stops when its stdin,
// a pipe from the parent, closes.
package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ratesem/ratesem/exchange/binance"
	"github.com/ratesem/ratesem/exchange/exchangetest"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == workerFlag {
		os.Exit(workerMain(os.Args[2:]))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(parentMain(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// config is what one run does; see the flags in parseFlags.
type config struct {
	Procs    int
	Cluster  bool
	Redis    string
	Scale    float64
	Duration time.Duration
	Foreign  float64 // share of the REQUEST_WEIGHT limit
	Klines   int     // per process
	Depth    int     // per process
	Orders   int     // per process
	LatMin   time.Duration
	LatMax   time.Duration
	Lease    time.Duration // 0: the pool's default
	Local    bool
	Kill     bool
	NoUsage  bool
	MinUse   float64 // percent
}

// defaultLease is the lease of clientpool over Redis when -lease is 0, for
// the report of -kill.
const defaultLease = time.Minute

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var cfg config
	var latency string
	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.Procs, "procs", 3, "worker processes (K)")
	fs.BoolVar(&cfg.Cluster, "cluster", false, "a 3-master Redis Cluster instead of one redis-server (with -redis: the address is a cluster's seed nodes, comma-separated)")
	fs.StringVar(&cfg.Redis, "redis", "", "Redis address host:port (empty: start redis-server children)")
	fs.Float64Var(&cfg.Scale, "scale", 10, "clock scale: every window of the server and of the preset is divided by it (10: Binance's minute lasts 6 s; in Redis mode every scaled window must be a whole number of µs)")
	fs.DurationVar(&cfg.Duration, "duration", 20*time.Second, "how long the workers run")
	fs.Float64Var(&cfg.Foreign, "foreign", 0.25, "share of the IP's REQUEST_WEIGHT limit a foreign client spends at the start of every window, outside ratesem (0 to 0.9)")
	fs.IntVar(&cfg.Klines, "klines", 16, "goroutines of the klines backfill per process")
	fs.IntVar(&cfg.Depth, "depth", 2, "goroutines of the order book poller per process (GET /api/v3/depth, weights 5, 25, 50 and 250 in turn)")
	fs.IntVar(&cfg.Orders, "orders", 2, "goroutines of the order stream per process")
	fs.StringVar(&latency, "latency", "10ms-30ms", "server latency, uniform in min-max")
	fs.DurationVar(&cfg.Lease, "lease", 0, "how long an admitted call counts in Redis without a release (0: the pool's default)")
	fs.BoolVar(&cfg.Local, "local", false, "no Redis: every process its own in-memory pool with 1/K of every limit (the static split, for comparison)")
	fs.BoolVar(&cfg.Kill, "kill", false, "SIGKILL worker 1 while it holds an admitted call of all the REQUEST_WEIGHT the foreign client leaves")
	fs.BoolVar(&cfg.NoUsage, "no-usage", false, "ignore the usage headers (X-MBX-USED-WEIGHT-1M, ...): with -foreign, shows the rejections they prevent")
	fs.Float64Var(&cfg.MinUse, "min-use", 95, "target: percent of what the foreign client leaves that every full REQUEST_WEIGHT window must use")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if cfg.LatMin, cfg.LatMax, err = parseRange(latency); err != nil {
		return cfg, err
	}
	switch {
	case cfg.Procs < 1 || cfg.Procs > 64:
		return cfg, fmt.Errorf("-procs %d: want 1 to 64", cfg.Procs)
	case !(cfg.Scale >= 1 && cfg.Scale <= 1000):
		return cfg, fmt.Errorf("-scale %v: want 1 to 1000", cfg.Scale)
	case cfg.Duration <= 0:
		return cfg, fmt.Errorf("-duration %v: want > 0", cfg.Duration)
	case !(cfg.Foreign >= 0 && cfg.Foreign <= 0.9):
		return cfg, fmt.Errorf("-foreign %v: want 0 to 0.9", cfg.Foreign)
	case cfg.Klines < 0 || cfg.Depth < 0 || cfg.Orders < 0 || cfg.Klines+cfg.Depth+cfg.Orders == 0 || cfg.Klines+cfg.Depth+cfg.Orders > 1024:
		return cfg, fmt.Errorf("-klines %d -depth %d -orders %d: want ≥ 0 each, 1 to 1024 together", cfg.Klines, cfg.Depth, cfg.Orders)
	case cfg.Lease < 0:
		return cfg, fmt.Errorf("-lease %v: want ≥ 0", cfg.Lease)
	case !(cfg.MinUse >= 0 && cfg.MinUse <= 100):
		return cfg, fmt.Errorf("-min-use %v: want 0 to 100", cfg.MinUse)
	case !cfg.Local && !wholeMicros(cfg.Scale):
		return cfg, fmt.Errorf("-scale %v: in Redis every scaled window must be a whole number of microseconds (10 and 20 are; 12 and 30 are not)", cfg.Scale)
	case cfg.Kill && (cfg.Local || cfg.Procs < 2):
		return cfg, errors.New("-kill needs Redis and at least 2 processes")
	}
	return cfg, nil
}

// wholeMicros reports whether every window of the preset divided by scale
// is a whole number of microseconds, as Redis keeps them.
func wholeMicros(scale float64) bool {
	for _, r := range binance.Spot(binance.WithTimeScale(scale)).Rules {
		if r.Limit.Per%time.Microsecond != 0 {
			return false
		}
	}
	return true
}

// parseRange parses a latency range "10ms-30ms" (or one duration).
func parseRange(s string) (lo, hi time.Duration, err error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		b = a
	}
	if lo, err = time.ParseDuration(a); err == nil {
		hi, err = time.ParseDuration(b)
	}
	if err != nil || lo < 0 || hi < lo || hi > time.Minute {
		return 0, 0, fmt.Errorf("invalid -latency %q: want min-max, as in 10ms-30ms, at most 1m", s)
	}
	return lo, hi, nil
}

// parentMain runs the fleet with args (the command line without the
// program name), printing to stdout and stderr; it returns the exit status.
func parentMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "fleet:", err)
		return 2
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "fleet:", err)
		return 2
	}
	res, err := run(ctx, cfg, exe, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "fleet:", err)
		if !res.Ran {
			return 2
		}
	}
	if err != nil || len(res.Problems) > 0 {
		return 1
	}
	return 0
}

// worker is a child process.
type worker struct {
	id      int
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	stderr  *syncBuffer
	ready   chan struct{}
	holding chan struct{}
	report  chan workerReport // receives the report, or is closed without one
	killed  bool
}

// startWorker starts exe as a worker for wc; a goroutine reads its stdout:
// "ready", possibly "holding", then the JSON report.
func startWorker(ctx context.Context, exe string, wc workerConfig) (*worker, error) {
	w := &worker{
		id:      wc.ID,
		stderr:  &syncBuffer{},
		ready:   make(chan struct{}),
		holding: make(chan struct{}),
		report:  make(chan workerReport, 1),
	}
	w.cmd = exec.CommandContext(ctx, exe, append([]string{workerFlag}, wc.args()...)...)
	w.cmd.Stderr = w.stderr
	w.cmd.WaitDelay = 10 * time.Second
	dieWithParent(w.cmd)
	var err error
	if w.stdin, err = w.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := w.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := w.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(w.report)
		in := bufio.NewScanner(stdout)
		in.Buffer(nil, 1<<20)
		for in.Scan() {
			switch line := in.Text(); {
			case line == "ready":
				close(w.ready)
			case line == "holding":
				close(w.holding)
			case strings.HasPrefix(line, "{"):
				var rep workerReport
				if err := json.Unmarshal(in.Bytes(), &rep); err != nil {
					fmt.Fprintf(w.stderr, "parent: bad report %q: %v\n", line, err)
					return
				}
				w.report <- rep
				_, _ = io.Copy(io.Discard, stdout)
				return
			default:
				fmt.Fprintf(w.stderr, "parent: unexpected line %q\n", line)
			}
		}
	}()
	return w, nil
}

// result is what a run saw.
type result struct {
	// Ran reports that the workers were started (a later error is a
	// failure of the run, not of its setup).
	Ran      bool
	Begin    time.Time // the workers were told to go
	End      time.Time // the workers stop starting calls
	KillAt   time.Time // -kill: when worker 1 was killed
	Reports  []workerReport
	Killed   []int // IDs of the workers killed on purpose
	Windows  []weightWindow
	Orders   []ordersWindow
	Server   map[string]int64 // the fleet's accepted units per server rule
	Foreign  int64            // the foreign client's accepted weight
	Stats    exchangetest.Stats
	ByFleet  [2]int // 429s and 418s to the fleet
	ByAlien  [2]int // 429s and 418s to the foreign client
	Viol     []exchangetest.Violation
	Problems []string
}

// weightWindow is one fixed window of REQUEST_WEIGHT as the server counted
// it.
type weightWindow struct {
	Start    time.Time
	Foreign  int64 // accepted weight of the foreign client
	Fleet    int64 // accepted weight of the workers
	Rejected int   // 429 and 418, to anyone
	Full     bool  // lies within the run, and (-kill) after the lease of the killed call
	Held     bool  // -kill: begins before the killed call's lease ran out
}

// Left is what the foreign client left of limit.
func (w weightWindow) Left(limit int64) int64 { return max(limit-w.Foreign, 0) }

// Use is the percentage of Left that the fleet used.
func (w weightWindow) Use(limit int64) float64 {
	if w.Left(limit) == 0 {
		return 100
	}
	return 100 * float64(w.Fleet) / float64(w.Left(limit))
}

// ordersWindow is one fixed window of ORDERS 10s as the server counted it.
type ordersWindow struct {
	Start time.Time
	Units int64
	Full  bool
}

// foreignKey is the X-MBX-APIKEY header of the foreign client, so that the
// server's log tells its requests apart (the IP is the fleet's).
const foreignKey = "foreign-client"

func run(ctx context.Context, cfg config, exe string, out io.Writer) (result, error) {
	var res result
	redisAddr, redisKind := cfg.Redis, "given"
	if !cfg.Local && redisAddr == "" {
		addr, stop, err := startRedis(cfg.Cluster)
		if err != nil {
			return res, err
		}
		defer stop()
		redisAddr, redisKind = addr, "started"
	}
	srv := exchangetest.NewBinance(exchangetest.BinanceConfig{
		Scale:   cfg.Scale,
		Latency: exchangetest.UniformLatency(cfg.LatMin, cfg.LatMax),
	})
	defer srv.Close()
	weightRule, _ := srv.Rule(exchangetest.BinanceRequestWeight)
	ordersRule, _ := srv.Rule(exchangetest.BinanceOrders10s)
	foreign := int64(cfg.Foreign*float64(weightRule.Limit)) / 2 * 2 // spent in weights of 20 and 2

	switch {
	case cfg.Local:
		fmt.Fprintf(out, "fleet: %d processes, no Redis (-local: each its own pool with 1/%d of every limit)\n", cfg.Procs, cfg.Procs)
	case cfg.Cluster:
		fmt.Fprintf(out, "fleet: %d processes, one Redis Cluster of 3 masters (%s): %s\n", cfg.Procs, redisKind, redisAddr)
	default:
		fmt.Fprintf(out, "fleet: %d processes, one redis-server (%s): %s\n", cfg.Procs, redisKind, redisAddr)
	}
	fmt.Fprintf(out, "Binance test server %s, scale %g: REQUEST_WEIGHT %d per %v, ORDERS_10S %d per %v; latency %v-%v\n",
		srv.URL(), cfg.Scale, weightRule.Limit, weightRule.Window, ordersRule.Limit, ordersRule.Window, cfg.LatMin, cfg.LatMax)
	fmt.Fprintf(out, "each process: %d klines goroutines (weight 2), %d depth goroutines (weights 5, 25, 50, 250), %d order goroutines (weight 1, 1 order) for %v; foreign client: %d weight at the start of every window (%g%%)\n",
		cfg.Klines, cfg.Depth, cfg.Orders, cfg.Duration, foreign, 100*cfg.Foreign)

	ctx, cancel := context.WithTimeout(ctx, cfg.Duration+2*time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("fleet-%d-%d", os.Getpid(), time.Now().UnixNano())
	workers := make([]*worker, 0, cfg.Procs)
	// finish stops the workers (closing stdin makes them exit; cancel kills
	// them) on error and waits for every one.
	finish := func(err error) (result, error) {
		errs := []error{err}
		if err != nil {
			cancel()
		}
		for _, w := range workers {
			w.stdin.Close()
			if werr := w.cmd.Wait(); werr != nil && !w.killed {
				errs = append(errs, fmt.Errorf("worker %d: %v: %s", w.id, werr, strings.TrimSpace(w.stderr.String())))
			}
		}
		return res, errors.Join(errs...)
	}
	for i := range cfg.Procs {
		wc := workerConfig{
			ID: i + 1, Redis: redisAddr, Cluster: cfg.Cluster, Prefix: prefix, URL: srv.URL(), Scale: cfg.Scale,
			Klines: cfg.Klines, Depth: cfg.Depth, Orders: cfg.Orders, Lease: cfg.Lease, Local: cfg.Local, Procs: cfg.Procs, NoUsage: cfg.NoUsage,
		}
		if cfg.Kill && i == 0 {
			// All of what the foreign client leaves: while the lease holds,
			// the others can spend nothing; after it, anything they spend
			// shows the dead process's units were freed.
			wc.Hold = weightRule.Limit - foreign
		}
		w, err := startWorker(ctx, exe, wc)
		if err != nil {
			return finish(fmt.Errorf("starting worker %d: %w", i+1, err))
		}
		workers = append(workers, w)
	}
	for _, w := range workers {
		select {
		case <-w.ready:
		case <-w.report:
			return finish(fmt.Errorf("worker %d exited before it was ready", w.id))
		case <-ctx.Done():
			return finish(fmt.Errorf("waiting for worker %d to be ready: %w", w.id, context.Cause(ctx)))
		}
	}
	res.Ran = true
	// The run begins one twelfth of a window of REQUEST_WEIGHT before a
	// boundary, the same way every time: the first, partial window is
	// too short for the fleet to fill, so calls are in flight across the
	// boundary into the first full window, where a count carried over
	// from the window before would show.
	w := weightRule.Window
	res.Begin = time.Now().Truncate(w).Add(w - w/12)
	if time.Until(res.Begin) < 50*time.Millisecond {
		res.Begin = res.Begin.Add(w)
	}
	time.Sleep(time.Until(res.Begin))
	res.End = res.Begin.Add(cfg.Duration)
	for _, w := range workers {
		if _, err := fmt.Fprintf(w.stdin, "go %d\n", res.End.UnixNano()); err != nil {
			return finish(fmt.Errorf("starting worker %d: %w", w.id, err))
		}
	}

	var fg sync.WaitGroup
	alienCtx, stopAlien := context.WithDeadline(ctx, res.End)
	defer stopAlien()
	fg.Go(func() { spendForeign(alienCtx, srv, foreign, weightRule.Window) })

	if cfg.Kill {
		victim := workers[0]
		select {
		case <-victim.holding:
		case <-victim.report:
			return finish(fmt.Errorf("worker %d exited before it held its call", victim.id))
		case <-ctx.Done():
			return finish(fmt.Errorf("waiting for worker %d to hold its call: %w", victim.id, context.Cause(ctx)))
		}
		// Let its own backfill run a little, so that it dies with plain
		// calls in flight too.
		time.Sleep(weightRule.Window / 10)
		victim.killed = true
		if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			return finish(fmt.Errorf("killing worker %d: %w", victim.id, err))
		}
		res.KillAt = time.Now()
		res.Killed = append(res.Killed, victim.id)
		fmt.Fprintf(out, "worker %d SIGKILLed at +%.3fs holding %d REQUEST_WEIGHT; its lease (%v) frees them\n",
			victim.id, res.KillAt.Sub(res.Begin).Seconds(), weightRule.Limit-foreign, cmp.Or(cfg.Lease, defaultLease))
	}

	for _, w := range workers {
		var (
			rep workerReport
			ok  bool
		)
		select {
		case rep, ok = <-w.report:
		case <-ctx.Done():
			return finish(fmt.Errorf("waiting for worker %d: %w", w.id, context.Cause(ctx)))
		}
		switch {
		case ok:
			res.Reports = append(res.Reports, rep)
		case !w.killed:
			return finish(fmt.Errorf("worker %d exited without a report", w.id))
		}
	}
	stopAlien()
	fg.Wait()
	analyze(&res, cfg, srv)
	printResult(out, res, cfg, weightRule, ordersRule)
	return finish(nil)
}

// spendForeign is the foreign client: at the start of every window of
// REQUEST_WEIGHT (and at once) it spends weight on the server from the same
// IP as the fleet, without asking ratesem, in GET /api/v3/exchangeInfo
// (weight 20) and GET /api/v3/ticker/24hr?symbol= (weight 2), all at once
// (up to 100 in parallel: the spend must be over early in the window, before
// the fleet can have used what it leaves, even on a slow machine), until
// ctx is done. After a 429 or 418 it sends nothing more until the next
// window (which begins after the Retry-After Binance sends for
// REQUEST_WEIGHT), so that its own rejection does not get the IP banned.
func spendForeign(ctx context.Context, srv *exchangetest.BinanceServer, weight int64, window time.Duration) {
	if weight <= 0 {
		return
	}
	client := srv.Client()
	var rejected atomic.Bool
	get := func(path string) {
		if rejected.Load() {
			return
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL()+path, nil)
		if err != nil {
			return
		}
		req.Header.Set(binance.HeaderAPIKey, foreignKey)
		resp, err := client.Do(req)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == exchangetest.StatusBanned {
			rejected.Store(true)
		}
	}
	for ctx.Err() == nil {
		rejected.Store(false)
		var paths []string
		for range weight / 20 {
			paths = append(paths, "/api/v3/exchangeInfo")
		}
		for range weight % 20 / 2 {
			paths = append(paths, "/api/v3/ticker/24hr?symbol=ETHUSDT")
		}
		var wg sync.WaitGroup
		next := make(chan string)
		for range min(len(paths), 100) {
			wg.Go(func() {
				for p := range next {
					get(p)
				}
			})
		}
		for _, p := range paths {
			next <- p
		}
		close(next)
		wg.Wait()
		wake := time.Now().Truncate(window).Add(window)
		select {
		case <-time.After(time.Until(wake)):
		case <-ctx.Done():
		}
	}
}

// serverRules maps the server's rule names to the preset's.
var serverRules = []struct{ server, preset string }{
	{exchangetest.BinanceRequestWeight, binance.RuleRequestWeight},
	{exchangetest.BinanceRawRequests, binance.RuleRawRequests},
	{exchangetest.BinanceOrders10s, binance.RuleOrders10s},
	{exchangetest.BinanceOrders1d, binance.RuleOrders1d},
}

// analyze reads the server's log into res and lists what missed the
// targets in res.Problems.
func analyze(res *result, cfg config, srv *exchangetest.BinanceServer) {
	log := srv.Log()
	rules := srv.Rules()
	weightRule, _ := srv.Rule(exchangetest.BinanceRequestWeight)
	ordersRule, _ := srv.Rule(exchangetest.BinanceOrders10s)
	res.Stats = exchangetest.Summarize(log)
	res.Viol = exchangetest.Violations(exchangetest.Offered(log), rules)
	res.Server = map[string]int64{}
	wins := map[int64]*weightWindow{}
	orders := map[int64]*ordersWindow{}
	winAt := func(t time.Time, w time.Duration) (int64, time.Time) {
		k := t.UnixNano() / int64(w)
		return k, time.Unix(0, k*int64(w))
	}
	for _, e := range log {
		k, start := winAt(e.At, weightRule.Window)
		ww := wins[k]
		if ww == nil {
			ww = &weightWindow{Start: start}
			wins[k] = ww
		}
		alien := e.APIKey == foreignKey
		if e.Status == http.StatusTooManyRequests || e.Status == exchangetest.StatusBanned {
			ww.Rejected++
			i := 0
			if e.Status == exchangetest.StatusBanned {
				i = 1
			}
			if alien {
				res.ByAlien[i]++
			} else {
				res.ByFleet[i]++
			}
		}
		if e.Outcome != exchangetest.OutcomeAccepted {
			continue
		}
		for _, c := range e.Charges {
			switch {
			case alien && c.Key.Rule == exchangetest.BinanceRequestWeight:
				ww.Foreign += c.Units
				res.Foreign += c.Units
			case alien:
			case c.Key.Rule == exchangetest.BinanceRequestWeight:
				ww.Fleet += c.Units
				res.Server[c.Key.Rule] += c.Units
			case c.Key.Rule == exchangetest.BinanceOrders10s:
				ko, ostart := winAt(e.At, ordersRule.Window)
				ow := orders[ko]
				if ow == nil {
					ow = &ordersWindow{Start: ostart}
					orders[ko] = ow
				}
				ow.Units += c.Units
				res.Server[c.Key.Rule] += c.Units
			default:
				res.Server[c.Key.Rule] += c.Units
			}
		}
	}
	// A window is full when it lies within the run; with -kill, one that
	// begins before the killed call's lease can have run out is held.
	heldUntil := time.Time{}
	if !res.KillAt.IsZero() {
		heldUntil = res.KillAt.Add(cmp.Or(cfg.Lease, defaultLease))
	}
	for k := res.Begin.UnixNano()/int64(weightRule.Window) + 1; ; k++ {
		start := time.Unix(0, k*int64(weightRule.Window))
		if start.Add(weightRule.Window).After(res.End) {
			break
		}
		if wins[k] == nil {
			wins[k] = &weightWindow{Start: start}
		}
		wins[k].Held = start.Before(heldUntil)
		wins[k].Full = !wins[k].Held
	}
	for _, k := range slices.Sorted(maps.Keys(wins)) {
		res.Windows = append(res.Windows, *wins[k])
	}
	for _, k := range slices.Sorted(maps.Keys(orders)) {
		ow := *orders[k]
		ow.Full = !ow.Start.Before(res.Begin) && !ow.Start.Add(ordersRule.Window).After(res.End)
		res.Orders = append(res.Orders, ow)
	}

	var p []string
	if n := res.Stats.Status429 + res.Stats.Status418; n > 0 {
		p = append(p, fmt.Sprintf("%d rejections", n))
	}
	if len(res.Viol) > 0 {
		p = append(p, fmt.Sprintf("%d violations", len(res.Viol)))
	}
	full := 0
	for _, w := range res.Windows {
		if !w.Full {
			continue
		}
		full++
		if u := w.Use(weightRule.Limit); u < cfg.MinUse {
			p = append(p, fmt.Sprintf("REQUEST_WEIGHT window at +%.3fs used %.1f%% of what the foreign client left, want ≥ %g%%",
				w.Start.Sub(res.Begin).Seconds(), u, cfg.MinUse))
		}
	}
	if full == 0 {
		p = append(p, "no full REQUEST_WEIGHT window: run longer (-duration) or faster (-scale)")
	}
	for _, r := range res.Reports {
		if r.Errors > 0 {
			p = append(p, fmt.Sprintf("worker %d: %d errors, the first: %s", r.ID, r.Errors, r.FirstError))
		}
	}
	if len(res.Killed) == 0 {
		for _, sr := range serverRules {
			var sum int64
			for _, r := range res.Reports {
				sum += r.Units[sr.preset]
			}
			if sum != res.Server[sr.server] {
				p = append(p, fmt.Sprintf("%s: the workers counted %d units accepted, the server %d", sr.preset, sum, res.Server[sr.server]))
			}
		}
	}
	res.Problems = p
}

// printResult prints the tables of res.
func printResult(out io.Writer, res result, cfg config, weightRule, ordersRule exchangetest.Rule) {
	secs := cfg.Duration.Seconds()
	fmt.Fprintf(out, "\nper process: units of the requests the server accepted, as each process counted them (per second of the run)\n")
	fmt.Fprintf(out, "  %-8s %9s %8s %7s %16s %14s %12s %11s\n", "process", "requests", "429/418", "errors", binance.RuleRequestWeight, binance.RuleRawRequests, binance.RuleOrders10s, binance.RuleOrders1d)
	var total workerReport
	total.Units = map[string]int64{}
	for _, r := range res.Reports {
		fmt.Fprintf(out, "  %-8d %9d %8d %7d %9d %6.0f/s %7d %5.0f/s %12d %11d\n", r.ID, r.Requests, r.Rejected, r.Errors,
			r.Units[binance.RuleRequestWeight], float64(r.Units[binance.RuleRequestWeight])/secs,
			r.Units[binance.RuleRawRequests], float64(r.Units[binance.RuleRawRequests])/secs,
			r.Units[binance.RuleOrders10s], r.Units[binance.RuleOrders1d])
		total.Requests += r.Requests
		total.Rejected += r.Rejected
		total.Errors += r.Errors
		for k, v := range r.Units {
			total.Units[k] += v
		}
	}
	for _, id := range res.Killed {
		fmt.Fprintf(out, "  %-8d killed (no report)\n", id)
	}
	fmt.Fprintf(out, "  %-8s %9d %8d %7d %9d %6.0f/s %7d %5.0f/s %12d %11d\n", "total", total.Requests, total.Rejected, total.Errors,
		total.Units[binance.RuleRequestWeight], float64(total.Units[binance.RuleRequestWeight])/secs,
		total.Units[binance.RuleRawRequests], float64(total.Units[binance.RuleRawRequests])/secs,
		total.Units[binance.RuleOrders10s], total.Units[binance.RuleOrders1d])
	fmt.Fprintf(out, "  %-8s %9s %8s %7s %9d %8s %7d %7s %12d %11d\n", "server", "", "", "",
		res.Server[exchangetest.BinanceRequestWeight], "", res.Server[exchangetest.BinanceRawRequests], "",
		res.Server[exchangetest.BinanceOrders10s], res.Server[exchangetest.BinanceOrders1d])

	fmt.Fprintf(out, "\nREQUEST_WEIGHT per window of %v (server's count; limit %d)\n", weightRule.Window, weightRule.Limit)
	fmt.Fprintf(out, "  %-9s %8s %7s %5s %8s %14s\n", "window at", "foreign", "fleet", "left", "429/418", "use of left")
	minUse, full := 100.0, 0
	for _, w := range res.Windows {
		note := "(partial)"
		switch {
		case w.Full:
			note = ""
			full++
			minUse = min(minUse, w.Use(weightRule.Limit))
		case w.Held:
			note = "(lease of the killed call)"
		}
		fmt.Fprintf(out, "  %+8.3fs %8d %7d %5d %8d %13.1f%% %s\n", w.Start.Sub(res.Begin).Seconds(), w.Foreign, w.Fleet,
			w.Left(weightRule.Limit), w.Rejected, w.Use(weightRule.Limit), note)
	}
	var ofull int
	var osum, opeak int64
	for _, o := range res.Orders {
		opeak = max(opeak, o.Units)
		if o.Full {
			ofull++
			osum += o.Units
		}
	}
	if ofull > 0 {
		fmt.Fprintf(out, "ORDERS_10S per window of %v (limit %d): %d full windows, mean %.1f%%, peak %d\n",
			ordersRule.Window, ordersRule.Limit, ofull, 100*float64(osum)/float64(int64(ofull)*ordersRule.Limit), opeak)
	}

	fmt.Fprintf(out, "\nsummary\n")
	fmt.Fprintf(out, "  rejections %d (fleet: %d 429, %d 418; foreign client: %d 429, %d 418)\n",
		res.Stats.Status429+res.Stats.Status418, res.ByFleet[0], res.ByFleet[1], res.ByAlien[0], res.ByAlien[1])
	fmt.Fprintf(out, "  violations %d\n", len(res.Viol))
	for _, v := range res.Viol {
		fmt.Fprintf(out, "    %v\n", v)
	}
	if full > 0 {
		fmt.Fprintf(out, "  full windows %d, least use %.1f%% of what the foreign client left (target ≥ %g%%)\n", full, minUse, cfg.MinUse)
	} else {
		fmt.Fprintf(out, "  full windows 0\n")
	}
	fmt.Fprintf(out, "  foreign client %d weight accepted\n", res.Foreign)
	if len(res.Problems) == 0 {
		fmt.Fprintf(out, "result: ok\n")
		return
	}
	fmt.Fprintf(out, "result: FAILED\n")
	for _, p := range res.Problems {
		fmt.Fprintf(out, "  %s\n", p)
	}
}
