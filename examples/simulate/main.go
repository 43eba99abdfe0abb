// Command simulate runs the configurations of a published simulation table
// of a Redis ZSET throttler shared by several replicas (the "ZSET
// throttler" below) with real OS processes sharing one redisrate.NewSemaphore
// limiter, against a server that enforces the limit exactly, and prints
// ratesem's figures next to the ZSET throttler's.
//
//	go run ./examples/simulate                      # the ZSET throttler's four rows (a few minutes)
//	go run ./examples/simulate -rows 1,2            # a subset
//	go run ./examples/simulate -rows all            # also the start-window variant (rows 5-8)
//	go run ./examples/simulate -out examples/simulate/results.md   # also write the markdown table
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/simulate -rows 4
//
// It prints each row as it ends and the markdown table at the end; it
// writes a file only when -out names one (results.md beside this file is
// the table of a run made that way).
//
// The parent process
//   - starts a redis-server child on a free loopback port (no persistence),
//     or uses REDIS_ADDR (or -redis);
//   - serves the API on 127.0.0.1: a request arriving at t is accepted iff
//     fewer than limit accepted arrivals lie in (t−period, t], and is
//     answered after a latency uniform in 10–30 ms (the ZSET throttler's
//     perform_request sleep), 200 if accepted, 429 if not; it logs every
//     arrival;
//   - for each row starts P copies of itself with -worker, each running
//     `concurrency` goroutines that send its share of the row's requests
//     through one redisrate.NewSemaphore RateSemaphore named for the row, so that all P
//     processes share one limit in Redis;
//   - releases them together, waits for their reports and exit statuses, and
//     prints the ZSET throttler's columns for the row.
//
// Rows 1–4 are the ZSET throttler's table with ratesem's default, the completion
// window (buffer n/a): a call's slot counts from its start until its end +
// period, so the server sees at most limit arrivals per period whatever the
// latency. Rows 5–8 repeat them with the start window (WithStartWindow) and
// the ZSET throttler's buffer times as margins.
//
// Workers die with the parent: on Linux the kernel kills them (and
// redis-server) when the parent dies, and everywhere a worker stops when its
// stdin, a pipe from the parent, closes. The program exits 1 if a worker
// failed or a completion-window row missed its target (no failures, mean
// interval ≤ 1.05 × period).
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
	"math"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ratesem/ratesem/redistest"
)

// row is one line of the simulation table.
type row struct {
	Period      time.Duration
	Limit       int64
	Processes   int
	Concurrency int           // goroutines per process
	Requests    int           // over all processes
	Buffer      time.Duration // > 0: start window with this margin; 0: completion window
	ZSet        zsetRow       // what the ZSET throttler reported for this configuration
	// ServerLimit, when not 0, is the limit the server enforces instead of
	// Limit (tests use it to show that a limiter above it is caught).
	ServerLimit int64
}

// zsetRow is a line of the ZSET throttler's table as printed there.
type zsetRow struct {
	Buffer      time.Duration
	Successes   int
	Failures    int
	RequestTime float64 // "平均请求时间(s)", as printed (the values read as milliseconds)
	Interval    float64 // "平均间隔时间(s)"
}

// zsetTable is the ZSET throttler's table: period, limit, processes, concurrency per
// process, requests (successes + failures), and what its design reported.
var zsetTable = []row{
	{Period: time.Second, Limit: 200, Processes: 3, Concurrency: 2000, Requests: 9000,
		ZSet: zsetRow{Buffer: 60 * time.Millisecond, Successes: 9000, RequestTime: 71, Interval: 1.61}},
	{Period: time.Second, Limit: 50, Processes: 3, Concurrency: 1000, Requests: 3000,
		ZSet: zsetRow{Buffer: 50 * time.Millisecond, Successes: 3000, RequestTime: 64, Interval: 1.11}},
	{Period: 5 * time.Second, Limit: 100, Processes: 3, Concurrency: 500, Requests: 1500,
		ZSet: zsetRow{Buffer: 50 * time.Millisecond, Successes: 1500, RequestTime: 70, Interval: 5.05}},
	{Period: time.Second, Limit: 1, Processes: 3, Concurrency: 10, Requests: 30,
		ZSet: zsetRow{Buffer: 50 * time.Millisecond, Successes: 30, RequestTime: 27, Interval: 1.06}},
}

// allRows is the ZSET throttler's rows with the completion window (1–4), then with
// the start window and the ZSET throttler's buffers (5–8).
func allRows() []row {
	rows := slices.Clone(zsetTable)
	for _, r := range zsetTable {
		r.Buffer = r.ZSet.Buffer
		rows = append(rows, r)
	}
	return rows
}

// targetSlack is the target on the mean interval: at most 5% above the
// period.
const targetSlack = 1.05

// rowResult is what a row measured.
type rowResult struct {
	// Complete reports whether every worker sent its report (runRow may
	// still return an error, for a worker that then exited with an error).
	Complete  bool
	Index     int // 1-based, as in -rows
	Row       row
	LatMin    time.Duration
	LatMax    time.Duration
	Requests  int // sent, as the workers counted
	Successes int
	Rejected  int // HTTP 429, as the workers counted
	Errors    int // limiter, transport or other errors, as the workers counted
	// MeanRequest is the mean HTTP round trip of an admitted request (from
	// admission to the response read): the ZSET throttler's "mean request time".
	MeanRequest time.Duration
	// MaxRequest is the longest such round trip.
	MaxRequest time.Duration
	// MeanWait is the mean time a request waited for admission.
	MeanWait time.Duration
	// Elapsed runs from the moment the workers were told to go to the last
	// response read in any of them.
	Elapsed time.Duration
	// Arrivals, ServerRejected and Busiest are from the server's log: the
	// requests it saw, the ones it answered 429, and the most arrivals in
	// one window (t−period, t].
	Arrivals, ServerRejected, Busiest int
	// Spacing is the time the server saw between windows: (last arrival −
	// first arrival) ÷ (⌈requests ÷ limit⌉ − 1), 0 with one window. Unlike
	// MeanInterval it does not count the first window as a full period.
	Spacing time.Duration
	// MeanDelay and MaxDelay are the mean and longest time from a worker's
	// admission to the server's arrival (the server's log). The start
	// window is safe while these delays differ by at most its margin.
	MeanDelay, MaxDelay time.Duration
	// RejectionNotes describe the first few rejected arrivals: when, and
	// the admission-to-arrival delays of it and of the oldest accepted
	// arrival in its window.
	RejectionNotes []string
	// RedisAdmits is the admission round trips of all workers, and
	// RedisErrors the failed round trips, failed or lost releases and
	// failed cancellations and dropped releases (from semaphore.Stats).
	RedisAdmits, RedisErrors uint64
}

// Failures is the ZSET throttler's "failures": requests rejected by the server or that
// failed otherwise.
func (r rowResult) Failures() int { return r.Rejected + r.Errors }

// MeanInterval is the ZSET throttler's "mean interval": the elapsed time divided by
// the number of windows' worth of requests, requests ÷ limit.
func (r rowResult) MeanInterval() time.Duration {
	return time.Duration(float64(r.Elapsed) * float64(r.Row.Limit) / float64(r.Row.Requests))
}

// TargetMet reports whether the row had no failures and a mean interval at
// most 5% above the period.
func (r rowResult) TargetMet() bool {
	return r.Failures() == 0 && r.Successes == r.Row.Requests &&
		float64(r.MeanInterval()) <= targetSlack*float64(r.Row.Period)
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == workerFlag {
		os.Exit(workerMain(os.Args[2:]))
	}
	os.Exit(parentMain())
}

// options are the parent's flags.
type options struct {
	Rows    string // -rows
	Out     string // -out: the file to write the markdown table to; "" for none
	Redis   string // -redis
	Latency string // -latency
}

// parseFlags reads the parent's command line (without the program name).
func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.StringVar(&o.Rows, "rows", "1,2,3,4", "rows to run, comma-separated (1-4: the ZSET throttler's rows with the completion window; 5-8: the same with the start window and the ZSET throttler's buffers), or all")
	fs.StringVar(&o.Out, "out", "", "also write the markdown table to this file (default: print it only)")
	fs.StringVar(&o.Redis, "redis", os.Getenv("REDIS_ADDR"), "Redis address host:port (default $REDIS_ADDR; empty: start a redis-server child)")
	fs.StringVar(&o.Latency, "latency", "10ms-30ms", "server latency, uniform in min-max")
	return o, fs.Parse(args)
}

func parentMain() int {
	opts, err := parseFlags(os.Args[1:])
	if err != nil {
		return 2
	}
	rowsFlag, out, redisAddr, latency := opts.Rows, opts.Out, opts.Redis, opts.Latency

	rows := allRows()
	idx, err := parseRows(rowsFlag, len(rows))
	if err != nil {
		return fatal(err)
	}
	latMin, latMax, err := parseRange(latency)
	if err != nil {
		return fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fatal(err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if redisAddr == "" {
		rs, err := redistest.Launch()
		if err != nil {
			return fatal(err)
		}
		defer rs.Stop()
		redisAddr = rs.Addr()
		fmt.Printf("redis-server started on %s (no persistence)\n", redisAddr)
	} else {
		fmt.Printf("redis: %s\n", redisAddr)
	}
	srv, err := startServer(latMin, latMax)
	if err != nil {
		return fatal(err)
	}
	defer srv.close()
	fmt.Printf("API server: %s (exact sliding window on arrival, latency %v–%v)\n\n", srv.URL, latMin, latMax)

	env := runEnv{Exe: exe, Redis: redisAddr, Server: srv, Prefix: fmt.Sprintf("simulate-%d-%d", os.Getpid(), time.Now().UnixNano())}
	var results []rowResult
	status := 0
	for _, i := range idx {
		r := rows[i-1]
		fmt.Printf("row %d: %s, %v per %v, %d processes x %d goroutines, %d requests (at least %v)...\n",
			i, limiterName(r), r.Limit, r.Period, r.Processes, r.Concurrency, r.Requests, minDuration(r).Round(time.Second))
		res, err := runRow(ctx, env, i, r)
		if err != nil {
			fmt.Fprintf(os.Stderr, "simulate: row %d: %v\n", i, err)
			status = 1
			if ctx.Err() != nil {
				break
			}
			if !res.Complete {
				continue
			}
		}
		fmt.Printf("  %d ok, %d failures, mean interval %.3fs (%.1f%% of the period), spacing %.3fs, elapsed %.1fs; server: %d arrivals, %d rejected, busiest window %d, admission to arrival ≤ %.1fms\n",
			res.Successes, res.Failures(), res.MeanInterval().Seconds(), 100*float64(res.MeanInterval())/float64(r.Period),
			res.Spacing.Seconds(), res.Elapsed.Seconds(), res.Arrivals, res.ServerRejected, res.Busiest, ms(res.MaxDelay))
		for _, line := range res.RejectionNotes {
			fmt.Println("   ", line)
		}
		results = append(results, res)
		if r.Buffer == 0 && !res.TargetMet() {
			status = 1
		}
	}
	if len(results) == 0 {
		return 1
	}
	table := markdown(results)
	fmt.Println()
	fmt.Print(table)
	if out != "" {
		if err := os.WriteFile(out, []byte(table), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "simulate:", err)
			return 1
		}
		fmt.Printf("\nwritten to %s\n", out)
	}
	return status
}

func fatal(err error) int {
	fmt.Fprintln(os.Stderr, "simulate:", err)
	return 2
}

// parseRows parses -rows: "all" or comma-separated numbers in 1..n.
func parseRows(s string, n int) ([]int, error) {
	if s == "all" {
		idx := make([]int, n)
		for i := range idx {
			idx[i] = i + 1
		}
		return idx, nil
	}
	var idx []int
	for f := range strings.SplitSeq(s, ",") {
		i, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || i < 1 || i > n {
			return nil, fmt.Errorf("invalid -rows %q: want numbers in 1..%d, comma-separated, or all", s, n)
		}
		idx = append(idx, i)
	}
	return idx, nil
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
	if err != nil || lo < 0 || hi < lo {
		return 0, 0, fmt.Errorf("invalid latency range %q: want min-max, as in 10ms-30ms", s)
	}
	return lo, hi, nil
}

func limiterName(r row) string {
	if r.Buffer > 0 {
		return "start window"
	}
	return "completion window"
}

// windows is ⌈requests ÷ limit⌉, the windows' worth of requests of r.
func windows(r row) int64 { return (int64(r.Requests) + r.Limit - 1) / r.Limit }

// minDuration is the least time the server's rule lets a row take:
// ⌈requests ÷ limit⌉ − 1 periods between the first and last arrival.
func minDuration(r row) time.Duration { return time.Duration(windows(r)-1) * r.Period }

// runEnv is what every row shares.
type runEnv struct {
	Exe    string // the worker binary: this program, or the test binary
	Redis  string
	Server *apiServer
	Prefix string // of the limiters' names, unique to this run
}

// worker is a child process of a row.
type worker struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *syncBuffer
	ready  chan struct{}
	result chan workerResult // receives the report, or is closed without one
}

// runRow starts the row's worker processes, releases them together, and
// collects their reports and the server's log.
func runRow(ctx context.Context, env runEnv, index int, r row) (rowResult, error) {
	res := rowResult{Index: index, Row: r, LatMin: env.Server.latMin, LatMax: env.Server.latMax}
	env.Server.reset(int(cmp.Or(r.ServerLimit, r.Limit)), r.Period)
	// Generous: the least time the rule allows, plus each window's latency
	// twice over, plus a minute.
	timeout := 2*minDuration(r) + time.Duration(windows(r))*time.Second + time.Minute
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	name := fmt.Sprintf("%s-row%d", env.Prefix, index)
	workers := make([]*worker, r.Processes)
	var startErr error
	for i := range workers {
		wc := workerConfig{
			ID: i + 1, Redis: env.Redis, URL: env.Server.URL, Name: name,
			Limit: r.Limit, Period: r.Period, Buffer: r.Buffer, Concurrency: r.Concurrency,
			Requests: share(r.Requests, r.Processes, i),
		}
		w, err := startWorker(ctx, env.Exe, wc)
		if err != nil {
			startErr = fmt.Errorf("starting worker %d: %w", i+1, err)
			break
		}
		workers[i] = w
	}
	started := slices.DeleteFunc(slices.Clone(workers), func(w *worker) bool { return w == nil })
	// finish stops the workers on error (closing stdin makes them exit;
	// cancel kills them), waits for every one and reports their failures.
	finish := func(err error) (rowResult, error) {
		errs := []error{err}
		if err != nil {
			cancel()
		}
		for i, w := range started {
			if werr := w.cmd.Wait(); werr != nil {
				errs = append(errs, fmt.Errorf("worker %d: %v: %s", i+1, werr, strings.TrimSpace(w.stderr.String())))
			}
		}
		return res, errors.Join(errs...)
	}
	if startErr != nil {
		return finish(startErr)
	}

	for i, w := range workers {
		select {
		case <-w.ready:
		case <-w.result:
			return finish(fmt.Errorf("worker %d exited before it was ready", i+1))
		case <-ctx.Done():
			return finish(fmt.Errorf("waiting for worker %d to be ready: %w", i+1, context.Cause(ctx)))
		}
	}
	begin := time.Now()
	for i, w := range workers {
		if _, err := io.WriteString(w.stdin, "go\n"); err != nil {
			return finish(fmt.Errorf("starting worker %d: %w", i+1, err))
		}
	}
	var end int64
	var reqTime, wait time.Duration
	for i, w := range workers {
		var (
			wr workerResult
			ok bool
		)
		select {
		case wr, ok = <-w.result:
		case <-ctx.Done():
			return finish(fmt.Errorf("waiting for worker %d: %w", i+1, context.Cause(ctx)))
		}
		if !ok {
			return finish(fmt.Errorf("worker %d exited without a report", i+1))
		}
		res.Requests += wr.Requests
		res.Successes += wr.Successes
		res.Rejected += wr.Rejected
		res.Errors += wr.Errors
		reqTime += wr.RequestTime
		wait += wr.Wait
		end = max(end, wr.End)
		res.MaxRequest = max(res.MaxRequest, wr.MaxRequest)
		res.RedisAdmits += wr.Stats.RedisAdmits
		res.RedisErrors += wr.Stats.RedisErrors + wr.Stats.ReleasesFailed + wr.Stats.ReleasesLost + wr.Stats.CancelsFailed + wr.Stats.ReleasesDropped
	}
	res.Complete = true
	if res.Requests > 0 {
		res.MeanRequest = reqTime / time.Duration(res.Requests)
		res.MeanWait = wait / time.Duration(res.Requests)
	}
	res.Elapsed = time.Unix(0, end).Sub(begin)
	arr := env.Server.arrivals()
	res.Arrivals = len(arr)
	var delays time.Duration
	for _, a := range arr {
		if !a.Accepted {
			res.ServerRejected++
		}
		delays += a.Delay
		res.MaxDelay = max(res.MaxDelay, a.Delay)
	}
	if len(arr) > 0 {
		res.MeanDelay = delays / time.Duration(len(arr))
	}
	res.Busiest = busiestWindow(arr, r.Period)
	res.RejectionNotes = rejectionNotes(arr, r.Period, begin, 5)
	if w := windows(r); w > 1 && len(arr) > 0 {
		res.Spacing = arr[len(arr)-1].At.Sub(arr[0].At) / time.Duration(w-1)
	}
	if res.Requests != r.Requests {
		return finish(fmt.Errorf("workers sent %d requests; want %d", res.Requests, r.Requests))
	}
	return finish(nil)
}

// rejectionNotes describes up to most rejected arrivals of arr (in time
// order): when each came, and its admission-to-arrival delay against that
// of the oldest accepted arrival in its window (t−period, t]. Under the
// start window with margin m, two calls admitted a period + m apart meet in
// one window of the server only if the earlier one's delay exceeds the
// later one's by more than m.
func rejectionNotes(arr []arrival, period time.Duration, begin time.Time, most int) []string {
	var notes []string
	for j, a := range arr {
		if a.Accepted {
			continue
		}
		if len(notes) == most {
			notes = append(notes, "(more rejections not shown)")
			break
		}
		oldest := -1
		for i := j - 1; i >= 0 && arr[i].At.After(a.At.Add(-period)); i-- {
			if arr[i].Accepted {
				oldest = i
			}
		}
		note := fmt.Sprintf("429 at +%.3fs (worker %s), admission to arrival %.1fms", a.At.Sub(begin).Seconds(), a.Worker, ms(a.Delay))
		if oldest >= 0 {
			o := arr[oldest]
			note += fmt.Sprintf("; oldest accepted arrival in its window: +%.3fs (worker %s), %.1fms", o.At.Sub(begin).Seconds(), o.Worker, ms(o.Delay))
		}
		notes = append(notes, note)
	}
	return notes
}

// share is worker i's part of total requests over p workers.
func share(total, p, i int) int {
	n := total / p
	if i < total%p {
		n++
	}
	return n
}

// startWorker starts exe as a worker for wc. Its stdout is read by a
// goroutine: "ready", then the JSON report.
func startWorker(ctx context.Context, exe string, wc workerConfig) (*worker, error) {
	w := &worker{
		stderr: &syncBuffer{},
		ready:  make(chan struct{}),
		result: make(chan workerResult, 1),
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
		defer close(w.result)
		in := bufio.NewScanner(stdout)
		if !in.Scan() || in.Text() != "ready" {
			return
		}
		close(w.ready)
		if !in.Scan() {
			return
		}
		var wr workerResult
		if err := json.Unmarshal(in.Bytes(), &wr); err != nil {
			fmt.Fprintf(w.stderr, "parent: bad report %q: %v\n", in.Text(), err)
			return
		}
		w.result <- wr
		_, _ = io.Copy(io.Discard, stdout)
	}()
	return w, nil
}

// markdown renders the results and, for comparison, the ZSET throttler's own rows.
func markdown(results []rowResult) string {
	var b strings.Builder
	b.WriteString("## ratesem (redisrate.NewSemaphore): the processes of a row share one limiter in Redis\n\n")
	fmt.Fprintf(&b, "Run with %s on %s/%s, %d CPUs; generated by `go run ./examples/simulate -out examples/simulate/results.md`.\n\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	b.WriteString("| row | limiter | period (s) | limit | processes | concurrency per process | request latency (ms) | buffer (ms) | successes | failures | mean request time (ms) | mean interval (s) | period ÷ mean interval | elapsed (s) | spacing between windows (s) | server: arrivals / 429 / busiest window | admission to arrival, mean / max (ms) | Redis admission round trips / errors | target |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	var zsets []row
	for _, r := range results {
		buffer := "n/a"
		if r.Row.Buffer > 0 {
			buffer = strconv.FormatInt(r.Row.Buffer.Milliseconds(), 10)
		}
		target := "n/a"
		if r.Row.Buffer == 0 {
			target = "met"
			if !r.TargetMet() {
				target = "**missed**"
			}
		}
		mi := r.MeanInterval()
		fmt.Fprintf(&b, "| %d | %s | %s | %d | %d | %d | %d-%d | %s | %d | %d | %.1f | %.3f | %.1f%% | %.1f | %.3f | %d / %d / %d | %.1f / %.1f | %d / %d | %s |\n",
			r.Index, limiterName(r.Row), seconds(r.Row.Period), r.Row.Limit, r.Row.Processes, r.Row.Concurrency,
			r.LatMin.Milliseconds(), r.LatMax.Milliseconds(), buffer,
			r.Successes, r.Failures(), ms(r.MeanRequest), mi.Seconds(),
			100*float64(r.Row.Period)/float64(mi), r.Elapsed.Seconds(), r.Spacing.Seconds(),
			r.Arrivals, r.ServerRejected, r.Busiest, ms(r.MeanDelay), ms(r.MaxDelay), r.RedisAdmits, r.RedisErrors, target)
		if !slices.ContainsFunc(zsets, func(s row) bool { return s.Period == r.Row.Period && s.Limit == r.Row.Limit }) {
			zsets = append(zsets, r.Row)
		}
	}
	b.WriteString("\n## The Redis ZSET throttler, as its own table reports it\n\n")
	b.WriteString("| period (s) | limit | processes | concurrency per process | request latency (ms) | buffer (ms) | successes | failures | mean request time (printed \"(s)\") | mean interval (s) | period ÷ mean interval |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range zsets {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | 10-30 | %d | %d | %d | %g | %.2f | %.0f%% |\n",
			seconds(s.Period), s.Limit, s.Processes, s.Concurrency, s.ZSet.Buffer.Milliseconds(),
			s.ZSet.Successes, s.ZSet.Failures, s.ZSet.RequestTime, s.ZSet.Interval,
			100*s.Period.Seconds()/s.ZSet.Interval)
	}
	b.WriteString(`
Columns: mean interval = elapsed ÷ (requests ÷ limit), the ZSET throttler's definition;
elapsed runs from the moment the workers are released to the last response
read. Period ÷ mean interval is the share of the limit used (the ZSET throttler's
200/1s row: 1 ÷ 1.61 = 62%). Mean request time is the HTTP round trip of an
admitted request (admission to response read). Failures are the requests
the server answered 429 plus any other error. The server columns come from
its own log: every arrival, the ones it rejected, and the most arrivals in
one window (t−period, t], and the time from a worker's admission (when
Acquire returned) to the request's arrival at the server. Redis admission
round trips are the workers' EVALSHAs of the admission script, refused or
admitted (each request's release is one more round trip); errors are failed
round trips, failed, dropped or lost releases and failed cancellations
(semaphore.Stats). Target (completion window rows): no failures and a mean
interval at most 5% above the period.

Because the first window's requests go out at once, elapsed covers only
about requests ÷ limit − 1 periods plus the last requests' round trips, so
the ZSET throttler's mean interval can come out below the period for a limiter that
runs at the limit (most visibly with few windows, as 1500 ÷ 100 = 15 windows
of 5 s), and its ratio above 100%. The spacing between windows does not
have that bias: (last arrival − first arrival) ÷ (⌈requests ÷ limit⌉ − 1),
from the server's log. For the completion window it is the period plus
about one request's round trip, since a slot comes back one period after
the call that held it ended.

The ZSET throttler's table prints its mean request time under "(s)", but its values (71, 64,
70, 27) only make sense as milliseconds: the 1/1s row cannot have taken 27 s
for 30 requests, and 10–30 ms of latency plus Redis round trips gives
tens of milliseconds. Its buffer for the 200/1s row is 60 ms in the table but
0.60 s in the code that follows it (the same 200/1s limit), and a 0.6 s
buffer matches its 1.61 s mean interval: its records count for buffer +
period, 1.6 s.
`)
	return b.String()
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// seconds prints a period in seconds without trailing zeros.
func seconds(d time.Duration) string {
	s := d.Seconds()
	if s == math.Trunc(s) {
		return strconv.FormatFloat(s, 'f', 0, 64)
	}
	return strconv.FormatFloat(s, 'f', -1, 64)
}
