package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/exchange/exchangetest"
	"github.com/ratesem/ratesem/exchange/okx"
)

// okxInstruments are the instruments the orders go to, round-robin.
var okxInstruments = []string{"BTC-USDT", "ETH-USDT", "SOL-USDT", "XRP-USDT", "DOGE-USDT"}

// okxCase is one fan-out of orders through a Pool of okx.Table against a
// hostile OKX v5 server that answers rejections with code 50011 in an
// HTTP 200, on OKX's real 2 s windows and virtual time.
type okxCase struct {
	hostile  exchangetest.Hostile
	requests int // single orders, POST /api/v5/trade/order
	workers  int
	windows  int // windows the run may take beyond the ideal
	// closeEarly: the caller closes each body without reading it.
	closeEarly bool
}

// runOKX runs c inside a synctest bubble and checks everything the package
// promises.
func runOKX(t *testing.T, c okxCase) {
	synctest.Test(t, func(t *testing.T) {
		srv := exchangetest.NewOKX(exchangetest.OKXConfig{
			InMemory: true, Latency: exchangetest.FixedLatency(10 * time.Millisecond),
			RateLimitStatus: http.StatusOK, SubAccountCode50061: true,
			Hostile: c.hostile,
		})
		defer srv.Close()
		var p pauses
		pool, err := clientpool.New(okx.Table(), clientpool.WithObserver(p.observer))
		if err != nil {
			t.Fatal(err)
		}
		stamp := &stampTransport{base: srv.Client().Transport}
		client := &http.Client{Transport: okxTransport(pool, stamp)}

		mk := func(ctx context.Context, i int) (*http.Request, error) {
			body := fmt.Sprintf(`{"instId":%q,"tdMode":"cash","side":"buy","ordType":"limit","px":"1","sz":"1","clOrdId":"e2e%d"}`,
				okxInstruments[i%len(okxInstruments)], i)
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL()+"/api/v5/trade/order", bytes.NewReader([]byte(body)))
			if err == nil {
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(okx.HeaderAPIKey, "e2e-uid")
			}
			return req, err
		}
		o := fanOut(client, c.requests, c.workers, c.closeEarly, mk, nil)
		log := srv.Log()

		perInst := (c.requests + len(okxInstruments) - 1) / len(okxInstruments)
		var place int
		for _, r := range okx.Table().Rules {
			if r.Name == okx.RulePlaceOrder {
				place = int(r.Limit.N)
			}
		}
		need := (perInst + place - 1) / place
		bound := time.Duration(need+c.windows+2)*okx.Per + time.Duration(hostileThrottles(log))*defaultCap
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

// TestOKXSpurious50011: 600 orders over 5 instruments from 48 goroutines
// while 5% of them are answered code 50011 in an HTTP 200 with a garbage
// or absent Retry-After.
func TestOKXSpurious50011(t *testing.T) {
	runOKX(t, okxCase{
		hostile:  exchangetest.Hostile{Seed: 11, Fraction: 0.05, Throttle: true, RetryAfter: exchangetest.AbsurdRetryAfters()},
		requests: 600, workers: 48,
	})
}

// TestOKXSpurious50061: as TestOKXSpurious50011 with the sub-account code
// 50061 (always an HTTP 200).
func TestOKXSpurious50061(t *testing.T) {
	runOKX(t, okxCase{
		hostile:  exchangetest.Hostile{Seed: 12, Fraction: 0.05, Throttle: true, ThrottleCode: "50061"},
		requests: 600, workers: 48,
	})
}

// TestOKXStalledBodies: 10% of the answers (accepted orders, HTTP 200)
// stall for 30 s after the headers and 8 bytes of body. Telling a 50011 in
// a 200 from an accepted order needs the body, but RoundTrip must not wait
// for it: it returns when the headers arrive.
func TestOKXStalledBodies(t *testing.T) {
	runOKX(t, okxCase{
		hostile:  exchangetest.Hostile{Seed: 13, Fraction: 0.1, Stall: 30 * time.Second, StallAfter: 8},
		requests: 600, workers: 48,
	})
}

// TestOKXStalledThrottles: 5% of the orders are answered 50011 in a 200
// whose body stalls for 30 s right after the code ({"code":"50011" sent,
// the rest stalled): the throttle must still pause the instrument, and
// RoundTrip return at the headers.
func TestOKXStalledThrottles(t *testing.T) {
	runOKX(t, okxCase{
		hostile:  exchangetest.Hostile{Seed: 14, Fraction: 0.05, Throttle: true, Stall: 30 * time.Second, StallAfter: len(`{"code":"50011"`)},
		requests: 600, workers: 48,
	})
}

// TestOKXAbsurdHeaders: every set of absurd usage headers on a quarter of
// the answers; the OKX preset reads none, so nothing may change.
func TestOKXAbsurdHeaders(t *testing.T) {
	for _, set := range exchangetest.AbsurdHeaders() {
		t.Run(set.Name, func(t *testing.T) {
			runOKX(t, okxCase{
				hostile:  exchangetest.Hostile{Seed: 15, Fraction: 0.25, Header: set.Header, EpochReset: time.Hour},
				requests: 300, workers: 32,
			})
		})
	}
}

// TestOKXStalledForeverCallerCloses: 10% of the answers send their headers
// and never their body; the caller closes each body unread. RoundTrip must
// return at the headers (not when the call's deadline ends the stall), and
// closing the body must release the permit.
func TestOKXStalledForeverCallerCloses(t *testing.T) {
	runOKX(t, okxCase{
		hostile:  exchangetest.Hostile{Seed: 16, Fraction: 0.1, Stall: -1},
		requests: 600, workers: 48, closeEarly: true,
	})
}
