// Command binance-klines backfills candlesticks from Binance spot through a
// clientpool.Pool built from the exchange/binance preset: thousands of
// GET /api/v3/klines requests, weight 2 each, from many goroutines, against
// an embedded server that enforces Binance's rules exactly (REQUEST_WEIGHT
// 6000 per minute per IP in fixed windows aligned to the clock, 429 with
// Retry-After, then 418 bans), on a scaled clock so that a Binance minute
// lasts a few seconds.
//
//	go run ./examples/binance-klines
//	go run ./examples/binance-klines -requests 6000 -workers 64 -scale 20
//	go run ./examples/binance-klines -foreign 2000   # another client on the same IP spends weight too
//
// It prints the rejections (none expected), the elapsed time against the
// ideal, and each minute window's REQUEST_WEIGHT as the server counted it;
// it exits 1 on any rejection.
//
// The ideal is the earliest finish that the server's rule and the workers
// allow: a perfect limiter's schedule of the same calls, every call taking
// the mean latency, from the same instant of the window (see ideal). It is
// more than the weight divided by the budget per window: the first window
// is partial, so when the workers cannot spend its budget before it ends
// (or the total is an exact multiple of the budget, as the default 18000
// of 6000 is) the rest needs one more window, and the last window's weight
// takes the workers time to spend. Reading the usage headers, the pool
// left about 1% of each window unspent in our runs (5974 and 5938 of
// 6000; 6000 with -no-usage); when the total is an exact
// multiple of the budget that remainder costs one more window, and
// elapsed/ideal then shows it (-no-usage spends every window in full).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/exchange/binance"
	"github.com/ratesem/ratesem/exchange/exchangetest"
	"github.com/ratesem/ratesem/httpclient"
)

// config is what one run does.
type config struct {
	Requests int           // klines requests, weight 2 each
	Workers  int           // goroutines
	Scale    float64       // a Binance minute lasts 1m/Scale
	Latency  time.Duration // server latency: uniform in [Latency/2, 3·Latency/2]
	Foreign  int           // weight another client on the same IP spends at the start of each window
	InMemory bool          // serve over in-memory pipes (tests in a synctest bubble)
	NoUsage  bool          // ignore the usage headers (to show what they are for)
	Out      io.Writer     // progress and summary; nil: none
}

// result is what one run saw.
type result struct {
	Requests     int
	Rejected     int           // the server's 429 and 418 answers to this client
	Elapsed      time.Duration // first request to last response
	Window       time.Duration // the scaled minute
	Ideal        time.Duration // the earliest the last request could finish under the rule and the workers' speed (see ideal)
	PerWindow    []int64       // REQUEST_WEIGHT per window, as the server counted it (all clients)
	OwnPerWindow []int64       // this client's part of it
	Violations   []exchangetest.Violation
	Limit        int64 // REQUEST_WEIGHT per window
}

// busiestUse is the binding limit's use: the mean share of the limit spent
// in the windows between the first and the last, which the run filled
// (the first and last are partial by construction).
func (r result) busiestUse() float64 {
	if len(r.PerWindow) < 3 {
		return 0
	}
	var sum int64
	for _, w := range r.PerWindow[1 : len(r.PerWindow)-1] {
		sum += w
	}
	return float64(sum) / float64(int64(len(r.PerWindow)-2)*r.Limit)
}

// weight is the REQUEST_WEIGHT of one klines request (limit 500).
const weight = 2

// ideal returns the earliest the last of cfg.Requests calls can finish
// after the start, as a perfect limiter would schedule them: cfg.Workers
// workers, every call taking exactly the mean latency cfg.Latency, each call
// starting as soon as a worker is free and the server's rule lets it. The
// rule is Binance's REQUEST_WEIGHT as the preset keeps it (a fixed window
// counted to completion): at most budget weight per window of length per
// aligned to the clock, and a call counts in every window its start..end
// touches, so a call in flight at a boundary also spends the next window's
// budget. phase is where in its window the run starts. Two effects make
// this more than total/budget windows: the first window is partial (its
// budget may be more than the workers can spend before it ends, and then
// the weight left over needs one more window), and the last window's
// weight takes the workers time to spend.
func ideal(cfg config, budget int64, per, phase time.Duration) time.Duration {
	if cfg.Requests <= 0 {
		return 0
	}
	workers := max(cfg.Workers, 1)
	lat := max(cfg.Latency, 0)
	if budget < weight || per <= 0 {
		return 0 // the rule admits nothing: no finish to aim at
	}
	free := make([]time.Duration, workers) // when each worker is next free, in start order
	spent := map[int64]int64{}             // weight counted per window
	windowOf := func(t time.Duration) int64 { return int64((phase + t) / per) }
	var start, finish time.Duration
	for i := range cfg.Requests {
		w := i % workers // workers are freed in the order they started
		start = max(start, free[w])
		for spent[windowOf(start)]+weight > budget {
			start = time.Duration(windowOf(start)+1)*per - phase
		}
		end := start + lat
		for k := windowOf(start); k <= windowOf(end); k++ {
			spent[k] += weight
		}
		free[w], finish = end, end
	}
	return finish
}

func run(ctx context.Context, cfg config) (result, error) {
	out := cfg.Out
	if out == nil {
		out = io.Discard
	}
	srv := exchangetest.NewBinance(exchangetest.BinanceConfig{
		Scale:    cfg.Scale,
		Latency:  exchangetest.UniformLatency(cfg.Latency/2, cfg.Latency*3/2),
		InMemory: cfg.InMemory,
	})
	defer srv.Close()
	table := binance.Spot(binance.WithTimeScale(cfg.Scale))
	if cfg.NoUsage {
		for i := range table.Rules {
			table.Rules[i].Usage = nil
		}
	}
	pool, err := clientpool.New(table)
	if err != nil {
		return result{}, err
	}
	lim, _ := pool.Limit(binance.RuleRequestWeight)
	client := &http.Client{Transport: httpclient.NewPool(pool, httpclient.WithBase(srv.Client().Transport))}

	var rejected atomic.Int64
	fetch := func(ctx context.Context, i int) error {
		q := url.Values{"symbol": {"BTCUSDT"}, "interval": {"1m"}, "limit": {"500"},
			"startTime": {strconv.Itoa(1_600_000_000_000 + i*500*60_000)}}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL()+"/api/v3/klines?"+q.Encode(), nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusTeapot {
			rejected.Add(1)
			fmt.Fprintf(out, "request %d: HTTP %d\n", i, resp.StatusCode)
		}
		return nil
	}

	// The foreign client: another process behind the same IP that spends
	// weight at the start of every window (exchangeInfo, weight 20, ten at
	// a time) without asking our pool. Our pool learns of it from the
	// X-MBX-USED-WEIGHT-1M header of its own responses.
	foreignCtx, stopForeign := context.WithCancel(ctx)
	defer stopForeign()
	foreignDone := make(chan struct{})
	go func() {
		defer close(foreignDone)
		if cfg.Foreign <= 0 {
			return
		}
		plain := srv.Client()
		for foreignCtx.Err() == nil {
			var fg errgroup.Group
			fg.SetLimit(10)
			for range cfg.Foreign / 20 {
				fg.Go(func() error {
					req, err := http.NewRequestWithContext(foreignCtx, http.MethodGet, srv.URL()+"/api/v3/exchangeInfo", nil)
					if err != nil {
						return err
					}
					if resp, err := plain.Do(req); err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
					return nil
				})
			}
			fg.Wait()
			next := time.Now().Truncate(lim.Per).Add(lim.Per)
			select {
			case <-time.After(time.Until(next)):
			case <-foreignCtx.Done():
			}
		}
	}()

	begin := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(cfg.Workers)
	for i := range cfg.Requests {
		g.Go(func() error { return fetch(gctx, i) })
	}
	err = g.Wait()
	elapsed := time.Since(begin)
	stopForeign()
	<-foreignDone
	if err != nil {
		return result{}, err
	}

	res := result{Requests: cfg.Requests, Rejected: int(rejected.Load()), Elapsed: elapsed, Window: lim.Per, Limit: lim.N}
	res.Violations = srv.Violations()
	// Per-window weight from the server's own log.
	byWindow := map[int64][2]int64{}
	for _, e := range srv.Log() {
		if e.Outcome != exchangetest.OutcomeAccepted {
			continue
		}
		for _, c := range e.Charges {
			if c.Key.Rule == exchangetest.BinanceRequestWeight {
				w := byWindow[e.At.UnixNano()/int64(lim.Per)]
				w[0] += c.Units
				if e.Path == "/api/v3/klines" {
					w[1] += c.Units
				}
				byWindow[e.At.UnixNano()/int64(lim.Per)] = w
			}
		}
	}
	keys := make([]int64, 0, len(byWindow))
	for k := range byWindow {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		res.PerWindow = append(res.PerWindow, byWindow[k][0])
		res.OwnPerWindow = append(res.OwnPerWindow, byWindow[k][1])
	}
	res.Ideal = ideal(cfg, lim.N-int64(cfg.Foreign), lim.Per, begin.Sub(begin.Truncate(lim.Per)))
	return res, nil
}

func main() {
	cfg := config{Out: os.Stdout}
	flag.IntVar(&cfg.Requests, "requests", 9000, "klines requests (weight 2 each)")
	flag.IntVar(&cfg.Workers, "workers", 48, "goroutines")
	flag.Float64Var(&cfg.Scale, "scale", 12, "time scale: a Binance minute lasts 1m/scale")
	flag.DurationVar(&cfg.Latency, "latency", 20*time.Millisecond, "mean server latency (uniform in [L/2, 3L/2])")
	flag.IntVar(&cfg.Foreign, "foreign", 0, "weight another client on the same IP spends at the start of each window")
	flag.BoolVar(&cfg.NoUsage, "no-usage", false, "ignore the X-MBX-USED-WEIGHT-1M header (with -foreign: rejections)")
	flag.Parse()

	res, err := run(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "binance-klines:", err)
		os.Exit(1)
	}
	fmt.Printf("summary (REQUEST_WEIGHT %d per %v, the scaled minute)\n", res.Limit, res.Window)
	fmt.Printf("  requests        %d klines, weight 2 each (%d weight)\n", res.Requests, 2*res.Requests)
	fmt.Printf("  rejections      %d   (HTTP 429 or 418)\n", res.Rejected)
	fmt.Printf("  elapsed         %v\n", res.Elapsed.Round(time.Millisecond))
	fmt.Printf("  ideal           %v   (a perfect limiter: %d workers, every call %v, each starting as soon as a worker\n", res.Ideal.Round(time.Millisecond), cfg.Workers, cfg.Latency)
	fmt.Printf("                  is free and %d weight per aligned %v window allow, a call counting in every window\n", res.Limit-int64(cfg.Foreign), res.Window)
	fmt.Printf("                  it touches; started at the same instant of the window as this run)\n")
	fmt.Printf("  elapsed/ideal   %.2f\n", float64(res.Elapsed)/float64(res.Ideal))
	fmt.Printf("  budget per window (server's count, all clients / ours):\n")
	for i, w := range res.PerWindow {
		fmt.Printf("    window %d   %5d / %5d of %d   %5.1f%%\n", i, w, res.OwnPerWindow[i], res.Limit, 100*float64(w)/float64(res.Limit))
	}
	fmt.Printf("  binding limit use  %.1f%%   (mean over the full windows)\n", 100*res.busiestUse())
	fmt.Printf("  server violations  %d\n", len(res.Violations))
	if res.Rejected > 0 || len(res.Violations) > 0 {
		os.Exit(1)
	}
}
