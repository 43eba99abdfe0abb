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
	Ideal        time.Duration // the earliest the last request could finish under the rule
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
	client := &http.Client{Transport: httpclient.NewPool(pool, srv.Client().Transport, nil)}

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
	res.Ideal = ideal(int64(cfg.Requests)*2, lim.N-int64(cfg.Foreign), lim.Per,
		begin.Truncate(lim.Per).Add(lim.Per).Sub(begin), cfg.Workers, cfg.Latency)
	return res, nil
}

// ideal is the earliest the last of total weight units can finish, from
// the start of the run, under both bounds a client cannot beat: the
// server's rule (budget units per fixed window of length per, aligned to
// the clock, the first window ending rest after the start) and the
// workers' own speed (workers calls of 2 units in flight, each taking one
// mean latency: 2·workers/latency units per second). A window holds at
// most min(budget, what the workers can send before it ends); the last
// request ends one latency after it starts. 18000 units at 6000 per window
// fill exactly three windows only if the run starts early enough in the
// first window for the workers to spend all of it; otherwise a fourth
// window is needed.
func ideal(total, budget int64, per, rest time.Duration, workers int, latency time.Duration) time.Duration {
	if total <= 0 || budget <= 0 || workers <= 0 || latency <= 0 {
		return 0
	}
	rate := float64(2*workers) / latency.Seconds() // units per second
	t, end := time.Duration(0), rest
	for left := total; ; {
		room := min(budget, int64(rate*(end-t).Seconds()))
		if left <= room {
			// The last request starts once left units went out from t.
			return t + time.Duration(float64(left-2)/rate*float64(time.Second)) + latency
		}
		left -= max(room, 0)
		t, end = end, end+per
	}
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
	fmt.Printf("  ideal           %v   (the earliest finish that both the rule, %d units per window left by the foreign client, and %d workers at a mean latency of %v allow)\n",
		res.Ideal.Round(time.Millisecond), res.Limit-int64(cfg.Foreign), cfg.Workers, cfg.Latency)
	fmt.Printf("  efficiency      %.1f%%   (ideal / elapsed)\n", 100*res.Ideal.Seconds()/res.Elapsed.Seconds())
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
