package e2e_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/exchange/binance"
	"github.com/ratesem/ratesem/exchange/exchangetest"
)

// binanceWeight is the REQUEST_WEIGHT per minute of the server and the
// pool in these tests (Binance's is 6000): lower, so that a few hundred
// klines (weight 2) fill several windows.
const binanceWeight = 600

// binanceCase is one fan-out through a Pool of binance.Spot against a
// hostile Binance server, on real Binance windows and virtual time.
type binanceCase struct {
	hostile  exchangetest.Hostile
	orders   bool // POST /api/v3/order (ORDERS_10S binds) instead of GET /api/v3/klines
	requests int
	workers  int
	// usage, when set, replaces REQUEST_WEIGHT's Usage: a user who reads
	// the generic X-RateLimit-* or IETF headers.
	usage func(http.Header) (int64, bool)
	// windows is how many windows of the binding rule the run may take
	// beyond the ideal (a server that says "full" costs windows); each
	// spurious throttle may cost one cap on top, and each stall one stall.
	windows int
	// closeEarly: the caller closes each body without reading it.
	closeEarly bool
}

// runBinance runs c inside a synctest bubble and checks everything the
// package promises.
func runBinance(t *testing.T, c binanceCase) {
	synctest.Test(t, func(t *testing.T) {
		srv := exchangetest.NewBinance(exchangetest.BinanceConfig{
			InMemory: true, Latency: exchangetest.FixedLatency(20 * time.Millisecond),
			Limits:  map[string]int64{exchangetest.BinanceRequestWeight: binanceWeight},
			Hostile: c.hostile,
		})
		defer srv.Close()
		table := binance.Spot()
		for i := range table.Rules {
			if table.Rules[i].Name == binance.RuleRequestWeight {
				table.Rules[i].Limit.N = binanceWeight
				if c.usage != nil {
					table.Rules[i].Usage = c.usage
				}
			}
		}
		var p pauses
		pool, err := clientpool.New(table, clientpool.WithObserver(p.observer))
		if err != nil {
			t.Fatal(err)
		}
		stamp := &stampTransport{base: srv.Client().Transport}
		client := &http.Client{Transport: binanceTransport(pool, stamp)}

		mk := func(ctx context.Context, i int) (*http.Request, error) {
			if c.orders {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost,
					srv.URL()+"/api/v3/order?symbol=BTCUSDT&side=BUY&type=MARKET&newClientOrderId=e2e"+strconv.Itoa(i), nil)
				if err == nil {
					req.Header.Set(binance.HeaderAPIKey, "e2e-account")
				}
				return req, err
			}
			return http.NewRequestWithContext(ctx, http.MethodGet,
				srv.URL()+"/api/v3/klines?symbol=BTCUSDT&interval=1m&startTime="+strconv.Itoa(1_600_000_000_000+i*60_000), nil)
		}
		o := fanOut(client, c.requests, c.workers, c.closeEarly, mk, nil)
		log := srv.Log()

		// Ideal: the binding rule's windows the workload needs.
		win, need := time.Minute, (2*c.requests+binanceWeight-1)/binanceWeight
		if c.orders {
			win, need = 10*time.Second, (c.requests+99)/100
		}
		bound := time.Duration(need+c.windows+1)*win + time.Duration(hostileThrottles(log))*defaultCap
		if c.hostile.Stall > 0 {
			bound += time.Duration(exchangetest.Summarize(log).Hostile) * c.hostile.Stall
		}
		checkFinished(t, o, bound)
		checkPrompt(t, o)
		checkPauses(t, &p, defaultCap)
		checkServer(t, log, srv.Rules(), stamp.sends.Load())
		checkReleased(t, pool)
	})
}

// usageFor returns the Usage a user would configure to read a header set
// of exchangetest.AbsurdHeaders: Binance's own for the X-MBX sets (the
// preset's), the generic readers for the others.
func usageFor(set string) func(http.Header) (int64, bool) {
	switch {
	case strings.HasPrefix(set, "xrl-"):
		return clientpool.RateLimitUsage("X-RateLimit-", "")
	case strings.HasPrefix(set, "ietf-"):
		return clientpool.RateLimitUsage("RateLimit-", "")
	}
	return nil
}

// TestBinanceAbsurdUsageHeaders: 600 klines (weight 2, three windows of
// 600) from 48 goroutines while a quarter of the answers carry one set of
// absurd usage headers. A server's report can only tighten the client's
// accounting: the client never sends more than the rule allows (a used
// weight of MaxInt64 must read as "full until the window moves", never
// wrap to room), and nothing parks it beyond the cap.
func TestBinanceAbsurdUsageHeaders(t *testing.T) {
	for _, set := range exchangetest.AbsurdHeaders() {
		t.Run(set.Name, func(t *testing.T) {
			runBinance(t, binanceCase{
				hostile:  exchangetest.Hostile{Seed: 1, Fraction: 0.25, Header: set.Header},
				requests: 600, workers: 48, usage: usageFor(set.Name),
				windows: 600/48 + 2, // "full" after each burst: one burst a window
			})
		})
	}
}

// TestBinanceGitHubEpochReset: a GitHub-style X-RateLimit-Reset (a Unix
// time some seconds ahead, not a delay) on every answer, read through the
// generic X-RateLimit-* headers, never pauses beyond the cap.
func TestBinanceGitHubEpochReset(t *testing.T) {
	runBinance(t, binanceCase{
		hostile: exchangetest.Hostile{Seed: 2, EpochReset: 30 * time.Second,
			Header: http.Header{"X-RateLimit-Limit": {"5000"}, "X-RateLimit-Remaining": {"4999"}}},
		requests: 600, workers: 48, usage: clientpool.RateLimitUsage("X-RateLimit-", ""),
	})
}

// TestBinanceThrottleGarbageRetryAfter: 5% of the klines are answered 429
// -1003 with a Retry-After that is absent, zero, negative, text, beyond
// int64, 10 KB long, a year, or a date in 9999: every pause stays within
// the cap and the run ends.
func TestBinanceThrottleGarbageRetryAfter(t *testing.T) {
	runBinance(t, binanceCase{
		hostile:  exchangetest.Hostile{Seed: 3, Fraction: 0.05, Throttle: true, RetryAfter: exchangetest.AbsurdRetryAfters()},
		requests: 600, workers: 48,
	})
}

// TestBinanceOrdersThrottleWithoutRetryAfter: 400 orders (ORDERS_10S 100
// per 10 s binds) while 2% are answered 429 -1015 ("too many orders", the
// message naming the daily limit) with Retry-After absent, 0, -1 or
// "soon". The code names both ORDERS rules; the pause must be a bounded
// backoff, not the day of ORDERS_1D.
func TestBinanceOrdersThrottleWithoutRetryAfter(t *testing.T) {
	runBinance(t, binanceCase{
		hostile:  exchangetest.Hostile{Seed: 4, Fraction: 0.02, Throttle: true, RetryAfter: []string{"", "0", "-1", "soon"}},
		orders:   true,
		requests: 400, workers: 32,
	})
}

// TestBinanceStalledThrottles: 5% of the klines are answered 429 whose
// body stalls for 30 s after the headers (a few bytes sent). RoundTrip
// must return when the headers arrive, with the throttle taken into
// account and the permit released once, when the caller closes the body.
func TestBinanceStalledThrottles(t *testing.T) {
	runBinance(t, binanceCase{
		hostile:  exchangetest.Hostile{Seed: 5, Fraction: 0.05, Throttle: true, Stall: 30 * time.Second, StallAfter: 3},
		requests: 600, workers: 48,
	})
}

// TestBinanceStalledBodies: 10% of all answers (200s included) stall for
// 30 s after the headers.
func TestBinanceStalledBodies(t *testing.T) {
	runBinance(t, binanceCase{
		hostile:  exchangetest.Hostile{Seed: 6, Fraction: 0.1, Stall: 30 * time.Second},
		requests: 600, workers: 48,
	})
}

// TestBinanceEverythingAtOnce: absurd headers, garbage Retry-After,
// spurious throttles and stalls together on 20% of 2000 klines.
func TestBinanceEverythingAtOnce(t *testing.T) {
	h := exchangetest.AbsurdHeaders()[0].Header // X-MBX-USED-WEIGHT-1M: MaxInt64
	runBinance(t, binanceCase{
		hostile: exchangetest.Hostile{Seed: 7, Fraction: 0.2, Header: h, Throttle: true,
			RetryAfter: exchangetest.AbsurdRetryAfters(), Stall: 5 * time.Second, StallAfter: 1},
		requests: 2000, workers: 64, windows: 2000/64 + 2,
	})
}

// TestBinanceMaxIntOnEveryAnswer: every answer says the IP has used
// MaxInt64 of its weight (X-MBX-USED-WEIGHT-1M: 9223372036854775807), for
// 3000 klines from 64 goroutines. Each report must read as "full until the
// window moves": one burst of calls per window, never a wrap to unlimited.
func TestBinanceMaxIntOnEveryAnswer(t *testing.T) {
	runBinance(t, binanceCase{
		hostile:  exchangetest.Hostile{Header: http.Header{exchangetest.BinanceUsedWeightHeader: {"9223372036854775807"}}},
		requests: 3000, workers: 64, windows: 3000/64 + 2,
	})
}

// TestBinanceStalledForeverCallerCloses: 5% of the klines are answered 429
// whose body never comes; the caller closes each body unread. RoundTrip
// must return at the headers, the throttle still pause, and closing the
// body release the permit.
func TestBinanceStalledForeverCallerCloses(t *testing.T) {
	runBinance(t, binanceCase{
		hostile:  exchangetest.Hostile{Seed: 8, Fraction: 0.05, Throttle: true, Stall: -1},
		requests: 600, workers: 48, closeEarly: true,
	})
}
