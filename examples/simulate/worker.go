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
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/redisrate"
	"github.com/ratesem/ratesem/semaphore"
)

// workerFlag, as the first argument, makes the program a worker: one of the
// P replicas of a row. The parent starts them; nobody else should.
const workerFlag = "-worker"

// workerConfig is what a worker is told on its command line.
type workerConfig struct {
	ID          int
	Redis       string        // host:port
	URL         string        // the API server
	Name        string        // the limiter's name, shared by the row's workers
	Limit       int64         // N
	Period      time.Duration // per
	Buffer      time.Duration // > 0: start window with this margin; 0: completion window
	Concurrency int           // goroutines
	Requests    int           // this worker's share of the row's requests
}

// args renders c as the worker's command line (after workerFlag).
func (c workerConfig) args() []string {
	return []string{
		"-id", strconv.Itoa(c.ID),
		"-redis", c.Redis,
		"-url", c.URL,
		"-name", c.Name,
		"-limit", strconv.FormatInt(c.Limit, 10),
		"-period", c.Period.String(),
		"-buffer", c.Buffer.String(),
		"-concurrency", strconv.Itoa(c.Concurrency),
		"-requests", strconv.Itoa(c.Requests),
	}
}

// parseWorkerArgs is the inverse of args.
func parseWorkerArgs(args []string) (workerConfig, error) {
	var c workerConfig
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.IntVar(&c.ID, "id", 0, "")
	fs.StringVar(&c.Redis, "redis", "", "")
	fs.StringVar(&c.URL, "url", "", "")
	fs.StringVar(&c.Name, "name", "", "")
	fs.Int64Var(&c.Limit, "limit", 0, "")
	fs.DurationVar(&c.Period, "period", 0, "")
	fs.DurationVar(&c.Buffer, "buffer", 0, "")
	fs.IntVar(&c.Concurrency, "concurrency", 0, "")
	fs.IntVar(&c.Requests, "requests", 0, "")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.Redis == "" || c.URL == "" || c.Name == "" || c.Limit < 1 || c.Period <= 0 || c.Concurrency < 1 || c.Requests < 0 || c.Buffer < 0 {
		return c, fmt.Errorf("invalid worker arguments %q", args)
	}
	return c, nil
}

// workerResult is what a worker reports to the parent, as one JSON line on
// its stdout.
type workerResult struct {
	ID        int
	Requests  int // sent to the server
	Successes int // HTTP 200
	Rejected  int // HTTP 429
	Errors    int // limiter errors, transport errors, other statuses
	// FirstError describes the first of Errors.
	FirstError string `json:",omitempty"`
	// RequestTime is the sum over requests of the HTTP round trip: from the
	// limiter's admission to the response body read.
	RequestTime time.Duration
	// MaxRequest is the longest of those round trips.
	MaxRequest time.Duration
	// Wait is the sum over requests of the time spent waiting for admission.
	Wait time.Duration
	// End is when the last response was read (Unix nanoseconds).
	End int64
	// Stats is the counters of the worker's semaphore (redisrate.NewSemaphore)
	// at the end, after Close sent the releases still queued.
	Stats semaphore.Stats
}

// workerMain is the worker's main: it prints "ready" once its limiter and
// HTTP client are set up, waits for "go" on stdin, sends its requests from
// Concurrency goroutines through the shared limiter, prints its
// workerResult and exits. When its stdin closes (the parent died or gave
// up) it stops at once. It returns the exit status.
func workerMain(args []string) int {
	cfg, err := parseWorkerArgs(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "simulate worker:", err)
		return 2
	}
	res, err := work(cfg, os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "simulate worker %d: %v\n", cfg.ID, err)
		return 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		fmt.Fprintf(os.Stderr, "simulate worker %d: %v\n", cfg.ID, err)
		return 1
	}
	if res.Errors > 0 {
		fmt.Fprintf(os.Stderr, "simulate worker %d: %d errors, the first: %s\n", cfg.ID, res.Errors, res.FirstError)
		return 1
	}
	return 0
}

// errParentGone is returned when stdin closes before the work is done.
var errParentGone = errors.New("stdin closed: the parent is gone")

func work(cfg workerConfig, stdin io.Reader, stdout io.Writer) (workerResult, error) {
	res := workerResult{ID: cfg.ID}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)

	client := goredis.NewClient(&goredis.Options{Addr: cfg.Redis})
	defer client.Close()
	var opts []semaphore.Option
	if cfg.Buffer > 0 {
		opts = append(opts, semaphore.WithStartWindow(cfg.Buffer))
	}
	sem, err := redisrate.NewSemaphore(client, cfg.Name, cfg.Limit, cfg.Period, opts...)
	if err != nil {
		return res, err
	}
	defer sem.Close()
	transport := &http.Transport{MaxIdleConns: cfg.Concurrency, MaxIdleConnsPerHost: cfg.Concurrency}
	defer transport.CloseIdleConnections()
	hc := &http.Client{Transport: transport, Timeout: time.Minute}

	if err := client.Ping(ctx).Err(); err != nil {
		return res, fmt.Errorf("redis: %w", err)
	}
	if _, err := fmt.Fprintln(stdout, "ready"); err != nil {
		return res, err
	}
	in := bufio.NewScanner(stdin)
	if !in.Scan() || in.Text() != "go" {
		return res, errParentGone
	}
	go func() { // the parent holds stdin open until this worker exits
		for in.Scan() {
		}
		cancel(errParentGone)
	}()

	var (
		next atomic.Int64
		mu   sync.Mutex
		wg   sync.WaitGroup
	)
	for range cfg.Concurrency {
		wg.Go(func() {
			var r workerResult // this goroutine's share
			fail := func(err error) {
				r.Errors++
				if r.FirstError == "" {
					r.FirstError = err.Error()
				}
			}
			for next.Add(1) <= int64(cfg.Requests) && ctx.Err() == nil {
				queued := time.Now()
				called := false
				err := sem.Do(ctx, func(ctx context.Context) error {
					called = true
					began := time.Now()
					r.Wait += began.Sub(queued)
					r.Requests++
					status, err := get(ctx, hc, cfg.URL, cfg.ID, began)
					end := time.Now()
					r.RequestTime += end.Sub(began)
					r.MaxRequest = max(r.MaxRequest, end.Sub(began))
					r.End = max(r.End, end.UnixNano())
					switch {
					case err != nil:
						return err
					case status == http.StatusOK:
						r.Successes++
					case status == http.StatusTooManyRequests:
						r.Rejected++
					default:
						return fmt.Errorf("HTTP %d", status)
					}
					return nil
				})
				if err != nil {
					if !called {
						err = fmt.Errorf("limiter: %w", err)
					}
					fail(err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			res.Requests += r.Requests
			res.Successes += r.Successes
			res.Rejected += r.Rejected
			res.Errors += r.Errors
			if res.FirstError == "" {
				res.FirstError = r.FirstError
			}
			res.RequestTime += r.RequestTime
			res.MaxRequest = max(res.MaxRequest, r.MaxRequest)
			res.Wait += r.Wait
			res.End = max(res.End, r.End)
		})
	}
	wg.Wait()
	_ = sem.Close() // sends the releases still queued (Release never waits on Redis)
	res.Stats = sem.Stats()
	if err := context.Cause(ctx); err != nil {
		return res, err
	}
	return res, nil
}

// get sends one request and reads the whole response.
// admitted is sent in X-Admitted so that the server can log how long the
// request took to arrive.
func get(ctx context.Context, hc *http.Client, url string, worker int, admitted time.Time) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-Worker", strconv.Itoa(worker))
	req.Header.Set("X-Admitted", strconv.FormatInt(admitted.UnixNano(), 10))
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return resp.StatusCode, err
	}
	return resp.StatusCode, nil
}
