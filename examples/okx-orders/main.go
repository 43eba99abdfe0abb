// Command okx-orders places a burst of OKX orders over many instruments from
// many goroutines, through one http.Client whose Transport is a
// clientpool.Pool built from the OKX preset (package exchange/okx), with zero
// rejections and about as fast as OKX's limits allow.
//
// Every order counts under two of OKX's limits at once
// (https://www.okx.com/docs-v5/en/#overview-rate-limits):
//
//   - its instrument's: 60 requests per 2 s per (UID, instId) for POST
//     /api/v5/trade/order, and, separately, 300 orders per 2 s per (UID,
//     instId) for the orders of POST /api/v5/trade/batch-orders;
//   - the sub-account's: 1000 new and amended orders per 2 s per UID, single
//     or batched (https://www.okx.com/docs-v5/en/#overview-rate-limits-sub-account-rate-limit).
//
// The default burst, 3830 orders in 3110 requests, makes both matter:
//
//   - 20 instruments × (150 single orders + 4 batches of 10), queued round
//     after round, one request per instrument: 20 instruments could take
//     20 × 60 single orders per 2 s, more than the sub-account's 1000, so the
//     sub-account rule binds; the run needs ⌈3830/1000⌉ = 4 of its windows;
//   - 30 more single orders on BTC-USDT, queued first (a burst on the lead
//     instrument): with its share of the round-robin they are more than 60
//     in the first 2 s, so BTC-USDT's own rule binds there.
//
// By default it starts an embedded server (package exchangetest) that
// enforces OKX's limits exactly, as sliding windows of 2 s on arrival,
// answering code 50011 beyond them, with a latency drawn uniformly from
// -latency:
//
//	go run ./examples/okx-orders                                        # the burst above
//	go run ./examples/okx-orders -instruments 8 -batches 0 -lead 0      # only the instruments' rule binds
//	go run ./examples/okx-orders -client-limit sub-account-orders=1200  # break a rule on purpose: rejections
//	go run ./examples/okx-orders -base-url https://... -api-key ...     # another server
//
// Requests are not signed (no OK-ACCESS-SIGN): -base-url must point at a
// server that does not check signatures, or at a proxy that signs.
//
// It prints the rejections (the server's count and the client's view), the
// elapsed time against the ideal, and how much of each limit the run used,
// read from the embedded server's own log. It exits with status 1 if any
// request was rejected or failed.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/exchange/exchangetest"
	"github.com/ratesem/ratesem/exchange/okx"
	"github.com/ratesem/ratesem/httpclient"
)

// Paths of the two order endpoints.
const (
	orderPath = "/api/v5/trade/order"
	batchPath = "/api/v5/trade/batch-orders"
)

// allInstruments are the spot instruments orders go to: the first
// -instruments of them. The first is the lead instrument of -lead.
var allInstruments = []string{
	"BTC-USDT", "ETH-USDT", "SOL-USDT", "XRP-USDT", "DOGE-USDT",
	"ADA-USDT", "TRX-USDT", "LINK-USDT", "AVAX-USDT", "DOT-USDT",
	"LTC-USDT", "BCH-USDT", "TON-USDT", "NEAR-USDT", "UNI-USDT",
	"APT-USDT", "ARB-USDT", "OP-USDT", "FIL-USDT", "ATOM-USDT",
	"SUI-USDT", "ETC-USDT", "XLM-USDT", "HBAR-USDT", "ICP-USDT",
}

// reported are the preset's rules the summary reports, each with the name of
// the embedded server's rule (package exchangetest), which names an
// endpoint's own rule "METHOD path".
var reported = []struct{ rule, server string }{
	{okx.RuleSubAccountOrders, exchangetest.OKXSubAccountRule},
	{okx.RulePlaceOrder, "POST " + orderPath},
	{okx.RuleBatchOrders, "POST " + batchPath},
}

// config is what the flags set.
type config struct {
	baseURL     string // "" starts the embedded server
	apiKey      string // OK-ACCESS-KEY: the user (UID) the limits count per
	instruments int    // how many of allInstruments
	lead        int    // single orders on the first instrument, queued first
	orders      int    // single orders per instrument
	batches     int    // batch requests per instrument
	batchSize   int    // orders per batch
	workers     int    // goroutines of the errgroup
	latencyMin  time.Duration
	latencyMax  time.Duration
	// clientLimits overrides the N of the client's rules (the preset's
	// names), to break a rule on purpose; the server keeps OKX's limits.
	clientLimits map[string]int64
	// inMemory serves the embedded server over in-memory pipes, so that
	// it runs inside a testing/synctest bubble.
	inMemory bool
}

// defaults is the burst of the package documentation.
func defaults() config {
	return config{
		apiKey: "demo-api-key", instruments: 20, lead: 30, orders: 150, batches: 4, batchSize: 10,
		workers: 200, latencyMin: 10 * time.Millisecond, latencyMax: 30 * time.Millisecond,
		clientLimits: map[string]int64{},
	}
}

// summary is what a run measured.
type summary struct {
	Requests, Orders int
	Rejected         int // answers the client saw as throttled (okx.IsRateLimited)
	Failed           int // transport errors, and answers neither accepted nor throttled
	Pauses           int // Paused events of the pool: limiters a throttled answer paused
	Elapsed          time.Duration
	MeanLatency      time.Duration // from the send (the admission) to the end of the answer

	// The plan: what the workload costs under OKX's limits.
	Units   map[clientpool.Charge]int64 // units per (rule, key), Weight 0
	Limits  map[string]int64            // OKX's N of each rule of the preset
	Per     time.Duration               // OKX's window, 2 s
	Binding []clientpool.Charge         // the (rule, key)s that need the most windows
	Windows int64                       // how many: ⌈units / N⌉
	Ideal   time.Duration               // (Windows − 1) · Per + MeanLatency

	Server *serverReport // the embedded server's view; nil with -base-url
}

// serverReport is what the embedded server's own log says.
type serverReport struct {
	Stats      exchangetest.Stats
	Violations []exchangetest.Violation
	Rules      map[string]exchangetest.Rule // by the preset's rule name
	Peak       map[exchangetest.RuleKey]int64
	// Units, First and Last are each key's accepted units, and its first
	// and last accepted arrivals.
	Units       map[exchangetest.RuleKey]int64
	First, Last map[exchangetest.RuleKey]time.Time
	// PerWindow are the orders accepted in each Per since the first
	// arrival: [0, Per), [Per, 2·Per), ...
	PerWindow []int64
}

func main() {
	cfg := defaults()
	latency := fmt.Sprintf("%v-%v", cfg.latencyMin, cfg.latencyMax)
	flag.StringVar(&cfg.baseURL, "base-url", "", "API base URL (default: an embedded server enforcing OKX's limits)")
	flag.StringVar(&cfg.apiKey, "api-key", cfg.apiKey, "OK-ACCESS-KEY header: the user the limits count per")
	flag.IntVar(&cfg.instruments, "instruments", cfg.instruments, fmt.Sprintf("number of instruments, 1 to %d", len(allInstruments)))
	flag.IntVar(&cfg.lead, "lead", cfg.lead, "extra single orders on the first instrument ("+allInstruments[0]+"), queued before the rest")
	flag.IntVar(&cfg.orders, "orders", cfg.orders, "single orders (POST "+orderPath+") per instrument")
	flag.IntVar(&cfg.batches, "batches", cfg.batches, "batch requests (POST "+batchPath+") per instrument")
	flag.IntVar(&cfg.batchSize, "batch-size", cfg.batchSize, "orders per batch, 1 to 20")
	flag.IntVar(&cfg.workers, "workers", cfg.workers, "goroutines in the errgroup")
	flag.StringVar(&latency, "latency", latency, "embedded server latency, uniform in min-max")
	flag.Func("client-limit", "override the N of a rule of the client (not the server), as rule=N; repeatable; e.g. sub-account-orders=1200", func(s string) error {
		name, n, ok := strings.Cut(s, "=")
		v, err := strconv.ParseInt(n, 10, 64)
		if !ok || err != nil || v < 1 {
			return fmt.Errorf("want rule=N with N ≥ 1, got %q", s)
		}
		cfg.clientLimits[name] = v
		return nil
	})
	flag.Parse()

	var err error
	if cfg.latencyMin, cfg.latencyMax, err = parseRange(latency); err != nil {
		fatal(err)
	}
	if err := cfg.check(); err != nil {
		fatal(err)
	}

	target := cfg.baseURL
	if target == "" {
		target = fmt.Sprintf("embedded OKX v5 server (OKX's limits as sliding 2s windows, latency %v–%v)", cfg.latencyMin, cfg.latencyMax)
	}
	fmt.Printf("burst:  %d orders in %d requests from %d goroutines, for %s:\n",
		cfg.totalOrders(), cfg.totalRequests(), cfg.workers, cfg.apiKey)
	if cfg.lead > 0 {
		fmt.Printf("        %d single orders on %s first, then\n", cfg.lead, allInstruments[0])
	}
	batches := ""
	if cfg.batches > 0 {
		batches = fmt.Sprintf(" + %d batches of %d", cfg.batches, cfg.batchSize)
	}
	fmt.Printf("        %d instruments × (%d single orders%s), round-robin\n", cfg.instruments, cfg.orders, batches)
	fmt.Printf("client: clientpool.New(okx.Table()), completion window, via httpclient.NewPool")
	for _, name := range slices.Sorted(maps.Keys(cfg.clientLimits)) {
		fmt.Printf("; %s set to %d (OKX: %d)", name, cfg.clientLimits[name], okxLimit(name))
	}
	fmt.Printf("\ntarget: %s\n\n", target)

	s, err := run(context.Background(), cfg)
	if err != nil {
		fatal(err)
	}
	printSummary(os.Stdout, s)
	if s.Rejected > 0 || s.Failed > 0 || (s.Server != nil && s.Server.Stats.RateLimited > 0) {
		os.Exit(1)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "okx-orders:", err)
	os.Exit(2)
}

// okxLimit returns OKX's N of a rule of the preset, 0 for an unknown rule.
func okxLimit(rule string) int64 {
	for _, r := range okx.Table().Rules {
		if r.Name == rule {
			return r.Limit.N
		}
	}
	return 0
}

func (c config) check() error {
	switch {
	case c.instruments < 1 || c.instruments > len(allInstruments):
		return fmt.Errorf("-instruments must be 1 to %d", len(allInstruments))
	case c.lead < 0 || c.orders < 0 || c.batches < 0 || c.lead+c.orders+c.batches == 0:
		return errors.New("-lead, -orders and -batches must not be negative, nor all 0")
	case c.batches > 0 && (c.batchSize < 1 || c.batchSize > 20):
		return errors.New("-batch-size must be 1 to 20 (OKX's most orders per batch)")
	case c.workers < 1:
		return errors.New("-workers must be positive")
	}
	for name := range c.clientLimits {
		if okxLimit(name) == 0 {
			return fmt.Errorf("-client-limit: okx.Table() has no rule %q", name)
		}
	}
	return nil
}

func (c config) totalOrders() int   { return c.lead + c.instruments*(c.orders+c.batches*c.batchSize) }
func (c config) totalRequests() int { return c.lead + c.instruments*(c.orders+c.batches) }

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

// job is one request: a single order (batch false) or a batch of n orders,
// on one instrument.
type job struct {
	inst  string
	batch bool
	n     int
}

// jobs returns the workload in the order it is queued: the lead orders,
// then round after round one request per instrument, each instrument's
// batches spread evenly among its single orders.
func (c config) jobs() []job {
	var out []job
	for range c.lead {
		out = append(out, job{inst: allInstruments[0], n: 1})
	}
	total := c.orders + c.batches // requests per instrument
	isBatch := make([]bool, total)
	for b := range c.batches {
		isBatch[(2*b+1)*total/(2*c.batches)] = true // the middle of the b-th share
	}
	for k := range total {
		for _, inst := range allInstruments[:c.instruments] {
			if isBatch[k] {
				out = append(out, job{inst: inst, batch: true, n: c.batchSize})
			} else {
				out = append(out, job{inst: inst, n: 1})
			}
		}
	}
	return out
}

// order is one order as OKX's place-order takes it.
type order struct {
	InstID  string `json:"instId"`
	TdMode  string `json:"tdMode"`
	Side    string `json:"side"`
	OrdType string `json:"ordType"`
	Px      string `json:"px"`
	Sz      string `json:"sz"`
}

// request builds the HTTP request of j: a JSON object, or for a batch a JSON
// array of them. The body is a *bytes.Reader, so GetBody is set and the pool
// can read the instId before the body is sent.
func (j job) request(ctx context.Context, base, apiKey string) (*http.Request, error) {
	o := order{InstID: j.inst, TdMode: "cash", Side: "buy", OrdType: "limit", Px: "1", Sz: "1"}
	path, v := orderPath, any(o)
	if j.batch {
		path, v = batchPath, slices.Repeat([]order{o}, j.n)
	}
	body, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(okx.HeaderAPIKey, apiKey)
	return req, nil
}

type sentKey struct{}

// stampTransport records, per request, the instant the pool's transport
// handed it on, that is, the instant the pool admitted it.
type stampTransport struct{ base http.RoundTripper }

// RoundTrip records the send instant in the request's *time.Time, then sends.
func (t stampTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if p, ok := req.Context().Value(sentKey{}).(*time.Time); ok {
		*p = time.Now()
	}
	return t.base.RoundTrip(req)
}

// CloseIdleConnections closes the idle connections of the transport below.
func (t stampTransport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// run places the orders of cfg and measures the run.
func run(ctx context.Context, cfg config) (summary, error) {
	if err := cfg.check(); err != nil {
		return summary{}, err
	}
	base := strings.TrimSuffix(cfg.baseURL, "/")
	var inner http.RoundTripper = &http.Transport{MaxIdleConnsPerHost: cfg.workers}
	var srv *exchangetest.OKXServer
	if base == "" {
		srv = exchangetest.NewOKX(exchangetest.OKXConfig{
			Latency:  exchangetest.UniformLatency(cfg.latencyMin, cfg.latencyMax),
			InMemory: cfg.inMemory,
		})
		defer srv.Close()
		base, inner = srv.URL(), srv.Client().Transport
	}

	table := okx.Table()
	for i, r := range table.Rules {
		if n, ok := cfg.clientLimits[r.Name]; ok {
			table.Rules[i].Limit.N = n
		}
	}
	var pauses atomic.Int64
	pool, err := clientpool.New(table, clientpool.WithObserver(func(e ratesem.Event) {
		if e.Kind == ratesem.Paused {
			pauses.Add(1)
		}
	}))
	if err != nil {
		return summary{}, err
	}
	client := &http.Client{
		Transport: httpclient.NewPool(pool, httpclient.WithBase(stampTransport{inner}), httpclient.WithThrottledBody(okx.IsRateLimited)),
		Timeout:   time.Minute,
	}
	defer client.CloseIdleConnections()

	jobs := cfg.jobs()
	s := summary{Requests: len(jobs), Orders: cfg.totalOrders(), Per: okx.Per}
	if err := s.plan(pool, jobs, cfg.apiKey); err != nil {
		return summary{}, err
	}

	var (
		mu           sync.Mutex
		answered     int
		totalLatency time.Duration
	)
	begin := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(cfg.workers)
	for _, j := range jobs {
		g.Go(func() error {
			var sent time.Time
			req, err := j.request(context.WithValue(gctx, sentKey{}, &sent), base, cfg.apiKey)
			if err != nil {
				return err
			}
			status, body, err := send(client, req)
			end := time.Now()

			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				s.Failed++
				return nil // a failed request is counted, not fatal to the burst
			}
			switch {
			case okx.IsRateLimited(status, nil, body):
				s.Rejected++
			case status != http.StatusOK || !bytes.Contains(body, []byte(`"code":"0"`)):
				s.Failed++
			}
			answered++
			totalLatency += end.Sub(sent)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return summary{}, err
	}
	s.Elapsed = time.Since(begin)
	if answered > 0 {
		s.MeanLatency = totalLatency / time.Duration(answered)
	}
	s.Ideal = time.Duration(s.Windows-1)*s.Per + s.MeanLatency
	s.Pauses = int(pauses.Load())
	if srv != nil {
		s.Server = report(srv, s.Per)
	}
	return s, nil
}

// send sends req and reads the whole answer; closing the body ends the call
// for the pool.
func send(client *http.Client, req *http.Request) (int, []byte, error) {
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, body, err
}

// plan adds up what the workload costs under each (rule, key), as the pool
// classifies its requests, and finds the binding rule: the one whose units
// need the most windows of OKX's limit (the preset's, whatever
// -client-limit says).
func (s *summary) plan(pool *clientpool.Pool, jobs []job, apiKey string) error {
	s.Units = map[clientpool.Charge]int64{}
	s.Limits = map[string]int64{}
	for _, r := range okx.Table().Rules {
		s.Limits[r.Name] = r.Limit.N
	}
	for _, j := range jobs {
		req, err := j.request(context.Background(), "http://plan.invalid", apiKey)
		if err != nil {
			return err
		}
		charges, err := pool.Classify(req)
		if err != nil {
			return err
		}
		for _, c := range charges {
			s.Units[clientpool.Charge{Rule: c.Rule, Key: c.Key}] += c.Weight
		}
	}
	for c, u := range s.Units {
		n := s.Limits[c.Rule]
		switch w := (u + n - 1) / n; {
		case w > s.Windows:
			s.Windows, s.Binding = w, []clientpool.Charge{c}
		case w == s.Windows:
			s.Binding = append(s.Binding, c)
		}
	}
	slices.SortFunc(s.Binding, func(a, b clientpool.Charge) int {
		return strings.Compare(a.Rule+"\x00"+a.Key, b.Rule+"\x00"+b.Key)
	})
	return nil
}

// report reads the server's log.
func report(srv *exchangetest.OKXServer, per time.Duration) *serverReport {
	log := srv.Log()
	r := &serverReport{
		Stats:      exchangetest.Summarize(log),
		Violations: srv.Violations(),
		Rules:      map[string]exchangetest.Rule{},
		Peak:       srv.Peak(),
		Units:      map[exchangetest.RuleKey]int64{},
		First:      map[exchangetest.RuleKey]time.Time{},
		Last:       map[exchangetest.RuleKey]time.Time{},
	}
	for _, rep := range reported {
		if rule, ok := srv.Rule(rep.server); ok {
			r.Rules[rep.rule] = rule
		}
	}
	for _, e := range log {
		if e.Outcome != exchangetest.OutcomeAccepted {
			continue
		}
		for _, c := range e.Charges {
			if _, ok := r.First[c.Key]; !ok {
				r.First[c.Key] = e.At
			}
			r.Last[c.Key] = e.At
			r.Units[c.Key] += c.Units
			if c.Key.Rule == exchangetest.OKXSubAccountRule && len(log) > 0 {
				i := int(e.At.Sub(log[0].At) / per)
				for len(r.PerWindow) <= i {
					r.PerWindow = append(r.PerWindow, 0)
				}
				r.PerWindow[i] += c.Units
			}
		}
	}
	return r
}

// use is how much of one key's limit a run used, by the server's log.
type use struct {
	Key   exchangetest.RuleKey
	Units int64 // accepted over the run
	Peak  int64 // most accepted in any window of the rule
	Limit int64 // the rule's N
	// Sustained is the key's accepted units per window over the span they
	// held budget, from its first arrival to a window after its last,
	// Units · Window / (Last − First + Window), as a share of Limit.
	Sustained float64
}

// Use returns the use of the key of a rule of the preset that peaked
// highest (the busiest instrument, for a per-instrument rule; ties go to the
// key with the most units), and false when the run did not touch the rule.
func (r *serverReport) Use(rule string) (use, bool) {
	sr, ok := r.Rules[rule]
	if !ok {
		return use{}, false
	}
	var best use
	found := false
	for k, p := range r.Peak {
		if k.Rule != sr.Name {
			continue
		}
		u := use{Key: k, Units: r.Units[k], Peak: p, Limit: sr.Limit}
		span := r.Last[k].Sub(r.First[k]) + sr.Window
		u.Sustained = float64(u.Units) * float64(sr.Window) / float64(span) / float64(sr.Limit)
		better := u.Peak > best.Peak || u.Peak == best.Peak &&
			(u.Units > best.Units || u.Units == best.Units && u.Key.InstID < best.Key.InstID)
		if !found || better {
			best, found = u, true
		}
	}
	return best, found
}

func printSummary(w io.Writer, s summary) {
	fmt.Fprintf(w, "rejections\n")
	if s.Server != nil {
		st := s.Server.Stats
		by := ""
		for _, name := range slices.Sorted(maps.Keys(st.LimitedBy)) {
			by += fmt.Sprintf("; %d by %q", st.LimitedBy[name], name)
		}
		fmt.Fprintf(w, "  server      %d of %d requests rate-limited (code 50011; HTTP 429: %d)%s\n",
			st.RateLimited, st.Requests, st.Status429, by)
	}
	fmt.Fprintf(w, "  client      %d of %d answers throttled (okx.IsRateLimited), %d limiters paused", s.Rejected, s.Requests, s.Pauses)
	if s.Failed > 0 {
		fmt.Fprintf(w, "; %d FAILED (errors or other codes)", s.Failed)
	}

	n := s.Limits[s.Binding[0].Rule]
	var binding []string
	for i, c := range s.Binding {
		if i == 3 {
			binding = append(binding, fmt.Sprintf("and %d more", len(s.Binding)-i))
			break
		}
		binding = append(binding, fmt.Sprintf("%s[%s] %d units", c.Rule, c.Key, s.Units[c]))
	}
	lat := ms(s.MeanLatency)
	fmt.Fprintf(w, "\n\ntime\n")
	fmt.Fprintf(w, "  elapsed     %.3fs\n", s.Elapsed.Seconds())
	fmt.Fprintf(w, "  ideal       %.3fs = (%d − 1) × %v + %.1fms mean latency\n", s.Ideal.Seconds(), s.Windows, s.Per, lat)
	fmt.Fprintf(w, "              binding rule: %s; at %d per %v they need ⌈units/%d⌉ = %d windows,\n",
		strings.Join(binding, ", "), n, s.Per, n, s.Windows)
	fmt.Fprintf(w, "              so the server lets the last orders in %d × %v after the first at the earliest\n", s.Windows-1, s.Per)
	cw := time.Duration(s.Windows-1)*(s.Per+s.MeanLatency) + s.MeanLatency
	fmt.Fprintf(w, "  completion  %.3fs = (%d − 1) × (%v + %.1fms) + %.1fms: the client reuses a slot %v after its answer ends,\n",
		cw.Seconds(), s.Windows, s.Per, lat, lat, s.Per)
	fmt.Fprintf(w, "              so it runs at most N/(T + latency) = %.1f%% of N/T whatever the latency\n",
		100*float64(s.Per)/float64(s.Per+s.MeanLatency))
	fmt.Fprintf(w, "  efficiency  %.1f%% (ideal / elapsed)\n", 100*s.Ideal.Seconds()/s.Elapsed.Seconds())
	if s.Server == nil {
		return
	}

	fmt.Fprintf(w, "\nbudget used, by the server's log\n")
	fmt.Fprintf(w, "  peak: most units accepted in any sliding %v window, over the limit\n", s.Per)
	fmt.Fprintf(w, "  sustained: units per %v from the key's first arrival to %v after its last, over the limit\n", s.Per, s.Per)
	fmt.Fprintf(w, "  %-19s %-14s %6s %12s %7s %10s\n", "rule", "key (busiest)", "units", "peak/limit", "peak", "sustained")
	for _, rep := range reported {
		u, ok := s.Server.Use(rep.rule)
		if !ok {
			continue
		}
		key := u.Key.APIKey
		if u.Key.InstID != "" {
			key = u.Key.InstID
		}
		fmt.Fprintf(w, "  %-19s %-14s %6d %12s %6.1f%% %9.1f%%\n", rep.rule, key, u.Units,
			fmt.Sprintf("%d/%d", u.Peak, u.Limit), 100*float64(u.Peak)/float64(u.Limit), 100*u.Sustained)
	}
	b := s.Binding[0]
	best := float64(s.Units[b]) / float64(s.Windows*s.Limits[b.Rule])
	fmt.Fprintf(w, "  %s: %d units in %d windows of %d fill them to %.1f%%, the most any client could sustain here;\n",
		b.Rule, s.Units[b], s.Windows, s.Limits[b.Rule], 100*best)
	fmt.Fprintf(w, "  the completion window's ceiling is %.1f%% of that, %.1f%%\n",
		100*float64(s.Per)/float64(s.Per+s.MeanLatency), 100*best*float64(s.Per)/float64(s.Per+s.MeanLatency))
	var pw []string
	for _, n := range s.Server.PerWindow {
		pw = append(pw, strconv.FormatInt(n, 10))
	}
	fmt.Fprintf(w, "  orders accepted per %v from the first arrival: %s\n", s.Per, strings.Join(pw, ", "))
	if v := s.Server.Violations; len(v) > 0 {
		fmt.Fprintf(w, "  VIOLATIONS: %v\n", v)
	} else {
		fmt.Fprintf(w, "  violations: none (every key of every rule within its limit in every window)\n")
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
