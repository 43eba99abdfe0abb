// Command fanout is ratesem's main example: an errgroup fan-out of OKX-shaped
// API calls through an http.Client whose Transport is rate-limited by a
// RateSemaphore, with zero rejections and as fast as the limit allows.
//
// By default it starts an embedded server (package exchangetest) that enforces
// OKX's documented rule for GET /api/v5/public/funding-rate-history exactly:
// 10 requests per 2 seconds per (IP, instId), in any window, answering 429 with
// code 50011 beyond it (https://www.okx.com/docs-v5/en/#public-data-rest-api-get-funding-rate-history).
//
//	go run ./examples/fanout                       # 50 calls, 10/2s, embedded server
//	go run ./examples/fanout -calls 100 -limit 12/2s  # break the rule on purpose: rejections
//	go run ./examples/fanout -base-url https://www.okx.com
//
// It prints a line per call as calls complete, then a summary: calls,
// rejections, elapsed time against the ideal for the limit and the measured
// latency, and the mean time each call waited for the limiter. It exits with
// status 1 if any call was rejected or failed.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ratesem/ratesem/exchange/exchangetest"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/semaphore"
	"github.com/ratesem/ratesem/window"
)

// config is what the flags set.
type config struct {
	calls       int
	concurrency int
	limit       window.Limit
	start       bool          // start window with margin instead of the completion window
	margin      time.Duration // with start
	baseURL     string        // "" starts the embedded server
	instID      string
	latencyMin  time.Duration // embedded server only
	latencyMax  time.Duration
	serverLimit window.Limit // the rule the embedded server enforces
	progress    io.Writer    // nil: no per-call lines
}

// summary is what a run measured.
type summary struct {
	Calls, Rejected, Failed int
	Elapsed                 time.Duration
	Ideal                   time.Duration // (ceil(calls/N)−1)·Per + mean latency
	MeanLatency, MeanWait   time.Duration
	Arrivals                int   // requests the embedded server logged (0 for another server)
	Peak                    int64 // the most accepted requests of one IP+instId in one window, by the server's log
}

func main() {
	var cfg config
	var limit, serverLimit, latency string
	flag.IntVar(&cfg.calls, "calls", 50, "number of API calls")
	flag.IntVar(&cfg.concurrency, "concurrency", 50, "goroutines in the errgroup fan-out")
	flag.StringVar(&limit, "limit", "10/2s", "client limit, N/duration")
	flag.BoolVar(&cfg.start, "start-window", false, "use the start window with a margin instead of the completion window")
	flag.DurationVar(&cfg.margin, "margin", 50*time.Millisecond, "margin (buffer time) of the start window")
	flag.StringVar(&cfg.baseURL, "base-url", "", "API base URL, e.g. https://www.okx.com (default: an embedded server enforcing OKX's rule)")
	flag.StringVar(&cfg.instID, "inst", "BTC-USDT-SWAP", "instrument ID")
	flag.StringVar(&latency, "latency", "10ms-30ms", "embedded server latency, uniform in min-max")
	flag.StringVar(&serverLimit, "server-limit", "10/2s", "rule the embedded server enforces (OKX: 10/2s per IP and instId)")
	flag.Parse()

	var err error
	if cfg.limit, err = window.ParseLimit(limit); err != nil {
		fatal(err)
	}
	if cfg.serverLimit, err = window.ParseLimit(serverLimit); err != nil {
		fatal(err)
	}
	if cfg.latencyMin, cfg.latencyMax, err = parseRange(latency); err != nil {
		fatal(err)
	}
	if cfg.calls < 1 || cfg.concurrency < 1 {
		fatal(errors.New("-calls and -concurrency must be positive"))
	}
	cfg.progress = os.Stdout

	scheme := "completion window"
	if cfg.start {
		scheme = fmt.Sprintf("start window, margin %v", cfg.margin)
	}
	target := cfg.baseURL
	if target == "" {
		target = fmt.Sprintf("embedded OKX server (%v per IP+instId, latency %v–%v)", cfg.serverLimit, cfg.latencyMin, cfg.latencyMax)
	}
	fmt.Printf("fan-out: %d calls of funding-rate-history?instId=%s, %d goroutines, limit %v (%s)\ntarget:  %s\n\n",
		cfg.calls, cfg.instID, cfg.concurrency, cfg.limit, scheme, target)

	s, err := run(context.Background(), cfg)
	if err != nil {
		fatal(err)
	}
	printSummary(os.Stdout, cfg, s)
	if s.Rejected > 0 || s.Failed > 0 {
		os.Exit(1)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "fanout:", err)
	os.Exit(2)
}

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

// call is what one call measured; the transport below the limiter fills sent.
type call struct {
	sent time.Time // when the limiter admitted the request and it was sent
}

type callKey struct{}

// stampTransport records, per request, the instant the rate-limited
// transport handed it on, that is, the instant it was admitted.
type stampTransport struct{ base http.RoundTripper }

// RoundTrip records the send instant in the request's *call, then sends.
func (t stampTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if c, ok := req.Context().Value(callKey{}).(*call); ok {
		c.sent = time.Now()
	}
	return t.base.RoundTrip(req)
}

// fundingPath is OKX's funding-rate-history endpoint
// (https://www.okx.com/docs-v5/en/#public-data-rest-api-get-funding-rate-history),
// and fundingRule the embedded server's name for its rule.
const (
	fundingPath = "/api/v5/public/funding-rate-history"
	fundingRule = "GET " + fundingPath
)

// run performs the fan-out and measures it.
func run(ctx context.Context, cfg config) (summary, error) {
	var srv *exchangetest.OKXServer
	base := cfg.baseURL
	if base == "" {
		// OKX's rule is 10 per 2 s per IP+instId: the server's Scale
		// stretches or shrinks the 2 s to the chosen window, Limits sets N.
		srv = exchangetest.NewOKX(exchangetest.OKXConfig{
			Scale:   float64(2*time.Second) / float64(cfg.serverLimit.Per),
			Limits:  map[string]int64{fundingRule: cfg.serverLimit.N},
			Latency: exchangetest.UniformLatency(cfg.latencyMin, cfg.latencyMax),
		})
		defer srv.Close()
		base = srv.URL()
	}
	endpoint := strings.TrimSuffix(base, "/") + fundingPath + "?instId=" + url.QueryEscape(cfg.instID)

	var opts []semaphore.Option
	if cfg.start {
		opts = append(opts, semaphore.WithStartWindow(cfg.margin))
	}
	sem := semaphore.New(cfg.limit.N, cfg.limit.Per, opts...)
	inner := &http.Transport{MaxIdleConnsPerHost: cfg.concurrency}
	defer inner.CloseIdleConnections()
	client := &http.Client{
		Transport: httpclient.New(sem, httpclient.WithBase(stampTransport{inner})),
		Timeout:   time.Minute,
	}

	var (
		mu           sync.Mutex
		s            summary
		done         int
		totalLatency time.Duration
	)
	begin := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(cfg.concurrency)
	for range cfg.calls {
		g.Go(func() error {
			c := &call{}
			queued := time.Now()
			status, code, err := fetch(context.WithValue(gctx, callKey{}, c), client, endpoint)
			end := time.Now()
			rejected := err == nil && (status == http.StatusTooManyRequests || code == "50011")

			mu.Lock()
			defer mu.Unlock()
			done++
			s.Calls++
			switch {
			case err != nil:
				s.Failed++
			case rejected:
				s.Rejected++
			}
			latency := end.Sub(c.sent)
			totalLatency += latency
			wait := c.sent.Sub(queued)
			if cfg.progress != nil {
				outcome := fmt.Sprintf("HTTP %d code=%s", status, code)
				if err != nil {
					outcome = "error: " + err.Error()
				} else if rejected {
					outcome += "  REJECTED"
				}
				fmt.Fprintf(cfg.progress, "  [%3d/%d] +%6.3fs  waited %6.3fs  latency %4dms  %s\n",
					done, cfg.calls, end.Sub(begin).Seconds(), wait.Seconds(), latency.Milliseconds(), outcome)
			}
			return nil // a failed call is counted, not fatal to the fan-out
		})
	}
	_ = g.Wait()
	s.Elapsed = time.Since(begin)
	st := sem.Stats()
	if st.Admitted > 0 {
		s.MeanWait = st.TotalWait / time.Duration(st.Admitted)
	}
	s.MeanLatency = totalLatency / time.Duration(s.Calls)
	batches := (int64(cfg.calls) + cfg.serverLimit.N - 1) / cfg.serverLimit.N
	s.Ideal = time.Duration(batches-1)*cfg.serverLimit.Per + s.MeanLatency
	if srv != nil {
		s.Arrivals = len(srv.Log())
		for key, n := range srv.Peak() {
			if key.Rule == fundingRule {
				s.Peak = max(s.Peak, n)
			}
		}
	}
	return s, nil
}

// fetch makes one call and returns the HTTP status and the OKX code field.
func fetch(ctx context.Context, client *http.Client, endpoint string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close() // releases the limiter's slot: the call's end
	var body struct {
		Code string `json:"code"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body); err != nil {
		return resp.StatusCode, "", fmt.Errorf("HTTP %d: decoding body: %w", resp.StatusCode, err)
	}
	return resp.StatusCode, body.Code, nil
}

func printSummary(w io.Writer, cfg config, s summary) {
	fmt.Fprintf(w, "\nsummary\n")
	fmt.Fprintf(w, "  calls          %d\n", s.Calls)
	fmt.Fprintf(w, "  rejections     %d   (HTTP 429 or code 50011)\n", s.Rejected)
	if s.Failed > 0 {
		fmt.Fprintf(w, "  failed         %d   (transport or decoding errors)\n", s.Failed)
	}
	fmt.Fprintf(w, "  elapsed        %.3fs\n", s.Elapsed.Seconds())
	fmt.Fprintf(w, "  ideal          %.3fs   ((ceil(%d/%d)-1) x %v + mean latency: the earliest the server's rule lets the last call finish)\n",
		s.Ideal.Seconds(), cfg.calls, cfg.serverLimit.N, cfg.serverLimit.Per)
	fmt.Fprintf(w, "  efficiency     %.1f%%   (ideal / elapsed)\n", 100*s.Ideal.Seconds()/s.Elapsed.Seconds())
	fmt.Fprintf(w, "  mean latency   %.1fms\n", float64(s.MeanLatency.Microseconds())/1000)
	fmt.Fprintf(w, "  mean wait      %.3fs   (time each call waited for the limiter)\n", s.MeanWait.Seconds())
}
