package e2e_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/exchange/exchangetest"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/semaphore"
)

// plainCase is one fan-out of klines (weight 2 at the server, 1 request
// for the client) through httpclient.New over one RateSemaphore against a
// hostile Binance server, on virtual time.
type plainCase struct {
	hostile  exchangetest.Hostile
	requests int
	workers  int
	// semN is the client's limit, requests per minute; serverWeight the
	// server's REQUEST_WEIGHT per minute (2 a request).
	semN, serverWeight int64
	// maxRetryAfter is httpclient.WithMaxRetryAfter's cap (0: the default);
	// maxRetries is httpclient.WithMaxRetries's.
	maxRetryAfter time.Duration
	maxRetries    int
	// loose: the client's limit is above the server's (another client
	// spends from the same IP, or the limit is misconfigured), so real
	// 429s are expected; the test then checks that they come in bounded
	// bursts (the client pauses on each) instead of that there are none.
	loose bool
	// bound is the longest the run may take, before each spurious
	// throttle adds one cap and each stalled answer its stall.
	bound time.Duration
	// closeEarly: the caller closes each body without reading it.
	closeEarly bool
}

// burstWindow is the span in which a client that pauses on a throttle
// sees at most one wave of rejections (its calls in flight): the first
// pause after a throttle without Retry-After lasts at least 100 ms
// (internal/backoff: 200 ms with equal jitter); half of it leaves slack.
const burstWindow = 50 * time.Millisecond

// runPlain runs c inside a synctest bubble and checks everything the
// package promises.
func runPlain(t *testing.T, c plainCase) {
	synctest.Test(t, func(t *testing.T) {
		srv := exchangetest.NewBinance(exchangetest.BinanceConfig{
			InMemory: true, Latency: exchangetest.FixedLatency(20 * time.Millisecond),
			Limits:  map[string]int64{exchangetest.BinanceRequestWeight: c.serverWeight},
			Hostile: c.hostile,
		})
		defer srv.Close()
		sem := semaphore.New(c.semN, time.Minute)
		stamp := &stampTransport{base: srv.Client().Transport}
		tr := plainTransport(sem, stamp, httpclient.WithMaxRetryAfter(c.maxRetryAfter), httpclient.WithMaxRetries(c.maxRetries))
		client := &http.Client{Transport: tr}

		var p pauses
		after := func() { // the pause is set before RoundTrip returns
			if u := sem.Stats().PausedUntil; !u.IsZero() {
				p.note(time.Until(u), "semaphore")
			}
		}
		mk := func(ctx context.Context, i int) (*http.Request, error) {
			return http.NewRequestWithContext(ctx, http.MethodGet,
				srv.URL()+"/api/v3/klines?symbol=BTCUSDT&interval=1m&startTime="+strconv.Itoa(1_600_000_000_000+i*60_000), nil)
		}
		o := fanOut(client, c.requests, c.workers, c.closeEarly, mk, after)
		log := srv.Log()

		limit := defaultCap
		if c.maxRetryAfter > 0 {
			limit = c.maxRetryAfter
		}
		bound := c.bound + time.Duration(hostileThrottles(log))*limit
		if c.hostile.Stall > 0 {
			bound += time.Duration(exchangetest.Summarize(log).Hostile) * c.hostile.Stall
		}
		checkFinished(t, o, bound)
		checkPrompt(t, o)
		checkPauses(t, &p, limit)
		if c.loose {
			checkBursts(t, log, c.workers)
		} else {
			checkServer(t, log, srv.Rules(), stamp.sends.Load())
		}
		st := sem.Stats()
		if st.InFlight != 0 {
			t.Errorf("the semaphore still holds %d units after every call ended", st.InFlight)
		}
		if int64(st.Admitted) != stamp.sends.Load() {
			t.Errorf("the semaphore admitted %d calls, %d were sent", st.Admitted, stamp.sends.Load())
		}
	})
}

// checkBursts: the server's real rejections come in waves of at most
// workers (the calls in flight when the first was answered) per
// burstWindow: a client that pauses on each throttle does not hammer.
func checkBursts(t *testing.T, log []exchangetest.Entry, workers int) {
	t.Helper()
	var at []time.Time
	for _, e := range log {
		if (e.Outcome == exchangetest.OutcomeRateLimited && e.Rule != exchangetest.HostileRule) || e.Outcome == exchangetest.OutcomeBanned {
			at = append(at, e.At)
		}
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	most, when := 0, time.Time{}
	for i, j := 0, 0; j < len(at); j++ {
		for at[j].Sub(at[i]) >= burstWindow {
			i++
		}
		if j-i+1 > most {
			most, when = j-i+1, at[j]
		}
	}
	if most > workers {
		t.Errorf("%d rejections within %v (ending %v after the first), more than the %d calls that can be in flight: the client did not pause",
			most, burstWindow, when.Sub(at[0]), workers)
	}
	t.Logf("%d rejections in all, at most %d within %v", len(at), most, burstWindow)
}

// TestPlainThrottleGarbageRetryAfter: 600 klines from 48 goroutines while
// 5% are answered 429 -1003 with an absent or absurd Retry-After.
func TestPlainThrottleGarbageRetryAfter(t *testing.T) {
	runPlain(t, plainCase{
		hostile:  exchangetest.Hostile{Seed: 21, Fraction: 0.05, Throttle: true, RetryAfter: exchangetest.AbsurdRetryAfters()},
		requests: 600, workers: 48, semN: 300, serverWeight: 600,
		bound: 3 * time.Minute,
	})
}

// TestPlainSmallCap: as TestPlainThrottleGarbageRetryAfter with the cap
// set to 10 s (httpclient.WithMaxRetryAfter): no pause longer, jitter included.
func TestPlainSmallCap(t *testing.T) {
	runPlain(t, plainCase{
		hostile:  exchangetest.Hostile{Seed: 22, Fraction: 0.05, Throttle: true, RetryAfter: exchangetest.AbsurdRetryAfters()},
		requests: 600, workers: 48, semN: 300, serverWeight: 600, maxRetryAfter: 10 * time.Second,
		bound: 3 * time.Minute,
	})
}

// TestPlainStalledBodies: 10% of the answers (429s and 200s) stall for
// 30 s after the headers; RoundTrip returns at the headers and the permit
// is released once, when the body is closed.
func TestPlainStalledBodies(t *testing.T) {
	runPlain(t, plainCase{
		hostile:  exchangetest.Hostile{Seed: 23, Fraction: 0.1, Throttle: true, Stall: 30 * time.Second, StallAfter: 2},
		requests: 600, workers: 48, semN: 300, serverWeight: 600,
		bound: 3 * time.Minute,
	})
}

// TestPlainThrottleWithoutRetryAfterPauses: the client's limit (300 a
// minute) is above the server's (100 klines a minute), and the server's
// 429s come without Retry-After. 200 calls from 50 goroutines, each
// retried up to 3 times (MaxRetries): the Transport must pause on a 429
// without Retry-After too, and back off before each retry, so rejections
// come in waves of at most the calls in flight, not as a flood.
func TestPlainThrottleWithoutRetryAfterPauses(t *testing.T) {
	runPlain(t, plainCase{
		hostile:  exchangetest.Hostile{Seed: 24, RetryAfter: []string{""}},
		requests: 200, workers: 50, semN: 300, serverWeight: 200, maxRetries: 3, loose: true,
		bound: time.Hour,
	})
}

// TestPlainStalledForeverCallerCloses: 10% of the answers (429s and 200s)
// never send their body; the caller closes each body unread, which must
// release the permit at once.
func TestPlainStalledForeverCallerCloses(t *testing.T) {
	runPlain(t, plainCase{
		hostile:  exchangetest.Hostile{Seed: 25, Fraction: 0.1, Throttle: true, Stall: -1},
		requests: 600, workers: 48, semN: 300, serverWeight: 600, closeEarly: true,
		bound: 3 * time.Minute,
	})
}
