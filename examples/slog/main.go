// Command slog shows ratesem's observability wired to log/slog: every event
// of a RateSemaphore and of the http Transport over it becomes a log line,
// and a ratesem.Metrics keeps the totals, the wait distribution and the
// queue depth that a metrics exporter would publish.
//
//	go run ./examples/slog                    # 12 calls, 4 per 500ms, text logs
//	go run ./examples/slog -json -calls 20    # JSON logs
//
// It starts a local server that answers the 5th request with 429 and
// Retry-After: 1, so the run shows a throttle, the pause it causes and the
// retry. It prints the log lines as they come, then the metrics.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/semaphore"
	"github.com/ratesem/ratesem/window"
)

func main() {
	calls := flag.Int("calls", 12, "number of requests")
	limit := flag.String("limit", "4/500ms", "the client's limit, N/interval")
	jsonLogs := flag.Bool("json", false, "log JSON instead of text")
	flag.Parse()
	l, err := window.ParseLimit(*limit)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if _, err := run(context.Background(), os.Stdout, *calls, l, *jsonLogs); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// eventAttrs turns an event into log attributes, leaving out the fields
// that do not apply (they are zero).
func eventAttrs(e ratesem.Event) []slog.Attr {
	var a []slog.Attr
	if e.Rule != "" || e.Key != "" {
		a = append(a, slog.String("rule", e.Rule), slog.String("key", e.Key))
	}
	if e.Weight != 0 {
		a = append(a, slog.Int64("weight", e.Weight))
	}
	if e.Wait != 0 {
		a = append(a, slog.Duration("wait", e.Wait))
	}
	if e.Pause != 0 {
		a = append(a, slog.Duration("pause", e.Pause), slog.String("source", e.Source))
	}
	if e.Status != 0 {
		a = append(a, slog.Int("status", e.Status))
	}
	if e.Attempt != 0 {
		a = append(a, slog.Int("attempt", e.Attempt))
	}
	if e.Err != nil {
		a = append(a, slog.String("err", e.Err.Error()))
	}
	return a
}

// level puts what a user should look at (throttles, refusals, calls left
// at their estimate by a reply closed unread) at Warn.
func level(k ratesem.EventKind) slog.Level {
	switch k {
	case ratesem.Throttled, ratesem.Refused, ratesem.Unsettled:
		return slog.LevelWarn
	case ratesem.Queued:
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// run sends calls requests at once through a Transport limited to l,
// logging every event to out, and returns the metrics.
func run(ctx context.Context, out io.Writer, calls int, l window.Limit, jsonLogs bool) (ratesem.MetricsSnapshot, error) {
	opts := &slog.HandlerOptions{Level: slog.LevelDebug}
	var h slog.Handler = slog.NewTextHandler(out, opts)
	if jsonLogs {
		h = slog.NewJSONHandler(out, opts)
	}
	logger := slog.New(h)

	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 5 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		fmt.Fprintln(w, "ok")
	}))
	defer srv.Close()

	// One Metrics for both observers: the semaphore reports the admissions
	// and the queue, the Transport what only it sees (throttles, retries).
	// Feeding it the Transport's Admitted events too would count each call
	// twice.
	var m ratesem.Metrics
	sem := semaphore.New(l.N, l.Per, semaphore.WithObserver(func(e ratesem.Event) {
		m.Observe(e)
		logger.LogAttrs(ctx, level(e.Kind), e.Kind.String(), append(eventAttrs(e), slog.String("from", "semaphore"))...)
	}))
	tr := httpclient.New(sem, httpclient.WithMaxRetries(2), httpclient.WithObserver(func(e ratesem.Event) {
		if e.Kind == ratesem.Throttled || e.Kind == ratesem.Retried {
			m.Observe(e)
			logger.LogAttrs(ctx, level(e.Kind), e.Kind.String(), append(eventAttrs(e), slog.String("from", "transport"))...)
		}
	}))
	client := &http.Client{Transport: tr}
	defer client.CloseIdleConnections()

	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for range calls {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			if err != nil {
				errs <- err
				return
			}
			resp, err := client.Do(req)
			if err != nil {
				errs <- err
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				errs <- fmt.Errorf("status %d", resp.StatusCode)
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return ratesem.MetricsSnapshot{}, err
	}

	s := m.Snapshot()
	fmt.Fprintf(out, "admitted %d, refused %d, cancelled %d, throttled %d, paused %d, retried %d, queue depth %d\n",
		s.Admitted, s.Refused, s.Cancelled, s.Throttled, s.Paused, s.Retried, s.QueueDepth)
	fmt.Fprintf(out, "waits: %d, sum %v\n", s.Wait.Count, s.Wait.Sum)
	prev := uint64(0)
	for i, b := range s.Wait.Bounds {
		if c := s.Wait.Counts[i]; c != prev {
			fmt.Fprintf(out, "  ≤ %-8v %d\n", b, c)
			prev = c
		}
	}
	return s, nil
}
