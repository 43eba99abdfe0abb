package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/exchange/binance"
	"github.com/ratesem/ratesem/httpclient"
)

// workerFlag, as the first argument, makes the program a worker: one of the
// K replicas. The parent starts them; nobody else should.
const workerFlag = "-worker"

// account is the API key of the one account every worker's orders count
// against (the ORDERS rules are keyed by it).
const account = "fleet-account"

// workerConfig is what a worker is told on its command line.
type workerConfig struct {
	ID      int
	Redis   string // host:port, comma-separated for a cluster's seed nodes
	Cluster bool
	Prefix  string // of the Redis keys, unique to the run
	URL     string // the Binance test server
	Scale   float64
	Klines  int           // goroutines of the klines backfill
	Depth   int           // goroutines of the order book poller
	Orders  int           // goroutines of the order stream
	Lease   time.Duration // how long an admitted call counts without a release (Redis); 0: the default
	Local   bool          // an in-process pool with 1/Procs of every limit instead of Redis
	Procs   int           // K, for Local
	Hold    int64         // > 0: first acquire this much REQUEST_WEIGHT, say "holding" and never release it
	NoUsage bool          // ignore the usage headers (Rule.Usage nil)
}

// args renders c as the worker's command line (after workerFlag).
func (c workerConfig) args() []string {
	return []string{
		"-id", strconv.Itoa(c.ID),
		"-redis", c.Redis,
		"-cluster=" + strconv.FormatBool(c.Cluster),
		"-prefix", c.Prefix,
		"-url", c.URL,
		"-scale", strconv.FormatFloat(c.Scale, 'g', -1, 64),
		"-klines", strconv.Itoa(c.Klines),
		"-depth", strconv.Itoa(c.Depth),
		"-orders", strconv.Itoa(c.Orders),
		"-lease", c.Lease.String(),
		"-local=" + strconv.FormatBool(c.Local),
		"-procs", strconv.Itoa(c.Procs),
		"-hold", strconv.FormatInt(c.Hold, 10),
		"-no-usage=" + strconv.FormatBool(c.NoUsage),
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
	fs.StringVar(&c.URL, "url", "", "")
	fs.Float64Var(&c.Scale, "scale", 0, "")
	fs.IntVar(&c.Klines, "klines", 0, "")
	fs.IntVar(&c.Depth, "depth", 0, "")
	fs.IntVar(&c.Orders, "orders", 0, "")
	fs.DurationVar(&c.Lease, "lease", 0, "")
	fs.BoolVar(&c.Local, "local", false, "")
	fs.IntVar(&c.Procs, "procs", 0, "")
	fs.Int64Var(&c.Hold, "hold", 0, "")
	fs.BoolVar(&c.NoUsage, "no-usage", false, "")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.URL == "" || c.Prefix == "" || !(c.Scale > 0) || c.Klines < 0 || c.Depth < 0 || c.Orders < 0 || c.Procs < 1 ||
		c.Lease < 0 || c.Hold < 0 || (!c.Local && c.Redis == "") {
		return c, fmt.Errorf("invalid worker arguments %q", args)
	}
	return c, nil
}

// workerReport is what a worker reports to the parent, as one JSON line on
// its stdout.
type workerReport struct {
	ID       int
	Requests int // sent to the server (the pool admitted them)
	Accepted int // answered 200
	Rejected int // answered 429 or 418
	Errors   int // anything else: transport errors, other statuses, pool errors
	// FirstError describes the first of Errors.
	FirstError string `json:",omitempty"`
	// Units is, per rule, the units of the requests answered 200, as the
	// pool classified them (Pool.Classify).
	Units map[string]int64
}

// workerMain is the worker's main: it prints "ready" once its pool and HTTP
// client are set up, waits for "go <end>" on stdin (end: Unix nanoseconds),
// runs the backfill and the order stream until end, prints its report and
// exits. When its stdin closes (the parent died or gave up) it stops at
// once. It returns the exit status.
func workerMain(args []string) int {
	cfg, err := parseWorkerArgs(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet worker:", err)
		return 2
	}
	out := &lineWriter{w: os.Stdout}
	rep, err := work(cfg, os.Stdin, out)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fleet worker %d: %v\n", cfg.ID, err)
		return 1
	}
	b, err := json.Marshal(rep)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fleet worker %d: %v\n", cfg.ID, err)
		return 1
	}
	if err := out.line(string(b)); err != nil {
		return 1
	}
	return 0
}

// lineWriter writes whole lines from several goroutines.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) line(s string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := io.WriteString(l.w, s+"\n")
	return err
}

// errParentGone is returned when stdin closes before the work is done.
var errParentGone = errors.New("stdin closed: the parent is gone")

func work(cfg workerConfig, stdin io.Reader, out *lineWriter) (workerReport, error) {
	rep := workerReport{ID: cfg.ID, Units: map[string]int64{}}
	pool, closePool, err := newPool(cfg)
	if err != nil {
		return rep, err
	}
	defer closePool()
	base := &http.Transport{MaxIdleConnsPerHost: cfg.Klines + cfg.Depth + cfg.Orders + 1}
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: httpclient.NewPool(pool, httpclient.WithBase(detached{base}))}

	if err := out.line("ready"); err != nil {
		return rep, err
	}
	in := bufio.NewScanner(stdin)
	if !in.Scan() {
		return rep, errParentGone
	}
	endNanos, ok := strings.CutPrefix(in.Text(), "go ")
	if !ok {
		return rep, fmt.Errorf("want \"go <end>\" on stdin, got %q", in.Text())
	}
	n, err := strconv.ParseInt(endNanos, 10, 64)
	if err != nil {
		return rep, fmt.Errorf("bad end %q: %w", endNanos, err)
	}
	end := time.Unix(0, n)
	// stop ends the waits for admission at the end of the run, or at once
	// when the parent goes away; a call admitted before finishes anyway
	// (detached).
	stop, cancel := context.WithDeadlineCause(context.Background(), end, errRunOver)
	defer cancel()
	gone, goneCancel := context.WithCancelCause(context.Background())
	defer goneCancel(nil)
	go func() { // the parent holds stdin open until this worker exits
		for in.Scan() {
		}
		goneCancel(errParentGone)
	}()
	stop, cancelStop := mergeCancel(stop, gone)
	defer cancelStop()

	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		seq atomic.Int64
	)
	add := func(r workerReport) {
		mu.Lock()
		defer mu.Unlock()
		rep.Requests += r.Requests
		rep.Accepted += r.Accepted
		rep.Rejected += r.Rejected
		rep.Errors += r.Errors
		if rep.FirstError == "" {
			rep.FirstError = r.FirstError
		}
		for k, v := range r.Units {
			rep.Units[k] += v
		}
	}
	loop := func(newReq func(ctx context.Context, i int64) (*http.Request, error)) {
		r := workerReport{Units: map[string]int64{}}
		defer func() { add(r) }()
		for stop.Err() == nil {
			req, err := newReq(stop, seq.Add(1))
			if err == nil {
				err = send(client, pool, req, &r)
			}
			if errors.Is(err, ratesem.ErrDeadline) {
				// The pool knows this call could only be admitted after
				// the run's end (the stop context's deadline): it is over
				// for this goroutine.
				return
			}
			if err != nil && stop.Err() == nil {
				r.Errors++
				if r.FirstError == "" {
					r.FirstError = err.Error()
				}
			}
		}
	}
	if cfg.Hold > 0 {
		// The victim of the SIGKILL test: one call admitted in Redis and
		// never released; the parent kills this process once it holds it.
		t, err := pool.Acquire(stop, clientpool.Charge{Rule: binance.RuleRequestWeight, Weight: cfg.Hold})
		if err != nil {
			return rep, fmt.Errorf("holding %d REQUEST_WEIGHT: %w", cfg.Hold, err)
		}
		_ = t // never released: the process dies holding it
		if err := out.line("holding"); err != nil {
			return rep, err
		}
	}
	for range cfg.Klines {
		wg.Go(func() { loop(func(ctx context.Context, i int64) (*http.Request, error) { return klines(ctx, cfg, i) }) })
	}
	for range cfg.Depth {
		wg.Go(func() { loop(func(ctx context.Context, i int64) (*http.Request, error) { return depth(ctx, cfg, i) }) })
	}
	for range cfg.Orders {
		wg.Go(func() { loop(func(ctx context.Context, i int64) (*http.Request, error) { return order(ctx, cfg, i) }) })
	}
	wg.Wait()
	if err := context.Cause(gone); err != nil {
		return rep, err
	}
	return rep, nil
}

// errRunOver ends the waits for admission at the end of the run.
var errRunOver = errors.New("the run is over")

// mergeCancel returns a context done when a or b is.
func mergeCancel(a, b context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(a)
	stopB := context.AfterFunc(b, func() { cancel(context.Cause(b)) })
	return ctx, func() { stopB(); cancel(nil) }
}

// klines is the i-th request of the backfill: 1000 one-minute candles of
// BTCUSDT, weight 2.
func klines(ctx context.Context, cfg workerConfig, i int64) (*http.Request, error) {
	q := url.Values{"symbol": {"BTCUSDT"}, "interval": {"1m"}, "limit": {"1000"},
		"startTime": {strconv.FormatInt(1_500_000_000_000+(int64(cfg.ID)<<40)+i*1000*60_000, 10)}}
	return http.NewRequestWithContext(ctx, http.MethodGet, cfg.URL+"/api/v3/klines?"+q.Encode(), nil)
}

// depthLimits are the limits the order book poller asks for in turn: weights
// 5, 25, 50 and 250 in the preset and at the server.
var depthLimits = [...]string{"100", "500", "1000", "5000"}

// depth is the i-th request of the order book poller: BTCUSDT's book at one
// of depthLimits, weight 5 to 250.
func depth(ctx context.Context, cfg workerConfig, i int64) (*http.Request, error) {
	q := url.Values{"symbol": {"BTCUSDT"}, "limit": {depthLimits[i%int64(len(depthLimits))]}}
	return http.NewRequestWithContext(ctx, http.MethodGet, cfg.URL+"/api/v3/depth?"+q.Encode(), nil)
}

// order is the i-th order of the stream: a limit buy on the shared account,
// weight 1 and one order in each ORDERS rule.
func order(ctx context.Context, cfg workerConfig, i int64) (*http.Request, error) {
	form := url.Values{"symbol": {"BTCUSDT"}, "side": {"BUY"}, "type": {"LIMIT"}, "timeInForce": {"GTC"},
		"quantity": {"0.001"}, "price": {"20000"}, "newClientOrderId": {fmt.Sprintf("fleet-%d-%d", cfg.ID, i)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.URL+"/api/v3/order", strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set(binance.HeaderAPIKey, account)
	return req, nil
}

// send sends req through client (the pool's transport) and counts the
// answer in r: the units of every rule for a 200, a rejection for a 429 or
// 418. A request the run's end stopped before admission returns
// req.Context()'s error and counts nothing.
func send(client *http.Client, pool *clientpool.Pool, req *http.Request, r *workerReport) error {
	charges, err := pool.Classify(req)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	r.Requests++
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		r.Accepted++
		for _, c := range charges {
			r.Units[c.Rule] += c.Weight
		}
	case http.StatusTooManyRequests, http.StatusTeapot:
		r.Rejected++
		return nil
	default:
		return fmt.Errorf("%s %s: HTTP %d", req.Method, req.URL.Path, resp.StatusCode)
	}
	return err
}

// detached sends a request on a context that the caller's cancellation
// does not reach: the end of the run stops the waits for admission
// (httpclient's Transport waits on the request's context), but a call the
// pool admitted is carried to its end, so that what the server counts and
// what the workers count agree.
type detached struct{ base http.RoundTripper }

// RoundTrip sends req, with its context's values but not its cancellation,
// through the base transport.
func (d detached) RoundTrip(req *http.Request) (*http.Response, error) {
	return d.base.RoundTrip(req.WithContext(context.WithoutCancel(req.Context())))
}
