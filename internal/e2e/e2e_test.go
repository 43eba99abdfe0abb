package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/exchange/exchangetest"
	"github.com/ratesem/ratesem/exchange/okx"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/internal/backoff"
	"github.com/ratesem/ratesem/semaphore"
)

// The transports, one helper per preset: the one place to adapt when
// httpclient's throttle hook changes (for example to a body-aware hook).

// binanceTransport is the Transport of a Pool built from binance.Spot.
func binanceTransport(pool *clientpool.Pool, base http.RoundTripper) *httpclient.Transport {
	return httpclient.NewPool(pool, httpclient.WithBase(base))
}

// okxTransport is the Transport of a Pool built from okx.Table: a throttle
// is HTTP 429, or code 50011 or 50061 in a 200.
func okxTransport(pool *clientpool.Pool, base http.RoundTripper) *httpclient.Transport {
	return httpclient.NewPool(pool, httpclient.WithBase(base), httpclient.WithThrottledBody(okx.IsRateLimited))
}

// plainTransport is the Transport of one RateSemaphore, weight 1 a request.
func plainTransport(sem *semaphore.RateSemaphore, base http.RoundTripper, opts ...httpclient.Option) *httpclient.Transport {
	return httpclient.New(sem, append([]httpclient.Option{httpclient.WithBase(base)}, opts...)...)
}

const (
	// defaultCap is the longest pause one throttle may cause when the
	// user sets no cap.
	defaultCap = backoff.DefaultMaxPause
	// promptRoundTrip is how long after the headers arrive RoundTrip may
	// return (virtual time): nothing in it may wait on a body, so on
	// virtual time it is 0; a little slack for a bounded peek.
	promptRoundTrip = 10 * time.Millisecond
	// reqTimeout is each call's context deadline: a call that has not
	// finished by then is stuck.
	reqTimeout = 2 * time.Hour
)

// headersKey is the context key of the *time.Time at which the headers of
// a request's response arrived (stampTransport).
type headersKey struct{}

// stampTransport sits below the rate-limiting Transport: it counts the
// requests sent and stamps the instant each response's headers arrived.
type stampTransport struct {
	base  http.RoundTripper
	sends atomic.Int64
}

// RoundTrip sends req through base and stamps the instant it returned.
func (s *stampTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := s.base.RoundTrip(req)
	s.sends.Add(1)
	if p, ok := req.Context().Value(headersKey{}).(*time.Time); ok {
		*p = time.Now()
	}
	return resp, err
}

// CloseIdleConnections closes the idle connections of base.
func (s *stampTransport) CloseIdleConnections() {
	if c, ok := s.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// pauses records the longest pause a limiter was given.
type pauses struct {
	mu   sync.Mutex
	n    int
	max  time.Duration
	what string
}

// note records a pause of d on what.
func (p *pauses) note(d time.Duration, what string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	if d > p.max {
		p.max, p.what = d, what
	}
}

// observer is a clientpool observer that notes every Paused event.
func (p *pauses) observer(e ratesem.Event) {
	if e.Kind == ratesem.Paused {
		p.note(time.Until(e.Until), e.Rule+"["+e.Key+"]")
	}
}

// outcome is what a fan-out saw.
type outcome struct {
	calls    int
	elapsed  time.Duration
	statuses map[int]int
	failed   int      // calls that returned an error (no response, or a body that failed)
	errs     []string // the first few errors
	slowRT   int      // calls whose RoundTrip returned later than promptRoundTrip after the headers
	maxRT    time.Duration
}

// fanOut makes n calls from workers goroutines through client; mk builds
// call i on ctx. Each call has its own deadline (reqTimeout), reads the
// whole body (or, with closeEarly, none of it) and closes it; after, if
// set, runs when a call's RoundTrip has returned a response, before its
// body is read.
func fanOut(client *http.Client, n, workers int, closeEarly bool, mk func(ctx context.Context, i int) (*http.Request, error), after func()) outcome {
	o := outcome{calls: n, statuses: map[int]int{}}
	var mu sync.Mutex
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		o.failed++
		if len(o.errs) < 3 {
			o.errs = append(o.errs, err.Error())
		}
	}
	next := atomic.Int64{}
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), reqTimeout)
				var headers time.Time
				req, err := mk(context.WithValue(ctx, headersKey{}, &headers), i)
				if err != nil {
					cancel()
					fail(err)
					continue
				}
				resp, err := client.Do(req)
				returned := time.Now()
				if err != nil {
					cancel()
					fail(err)
					continue
				}
				if after != nil {
					after()
				}
				if !closeEarly {
					_, err = io.Copy(io.Discard, resp.Body)
				}
				resp.Body.Close()
				cancel()
				mu.Lock()
				o.statuses[resp.StatusCode]++
				if d := returned.Sub(headers); d > promptRoundTrip {
					o.slowRT++
					o.maxRT = max(o.maxRT, d)
				}
				mu.Unlock()
				if err != nil {
					fail(fmt.Errorf("reading the body: %w", err))
				}
			}
		})
	}
	wg.Wait()
	o.elapsed = time.Since(start)
	return o
}

// checkFinished: every call finished with a response, within bound.
func checkFinished(t *testing.T, o outcome, bound time.Duration) {
	t.Helper()
	if o.failed > 0 {
		t.Errorf("%d of %d calls failed (stuck until their %v deadline, or cut off), e.g. %q", o.failed, o.calls, reqTimeout, o.errs)
	}
	if o.elapsed > bound {
		t.Errorf("the run took %v, more than the bound %v", o.elapsed, bound)
	}
	t.Logf("%d calls in %v (virtual), statuses %v", o.calls, o.elapsed, o.statuses)
}

// checkPrompt: RoundTrip returned when the headers arrived.
func checkPrompt(t *testing.T, o outcome) {
	t.Helper()
	if o.slowRT > 0 {
		t.Errorf("%d RoundTrips returned more than %v after their headers arrived, the slowest %v after", o.slowRT, promptRoundTrip, o.maxRT)
	}
}

// checkPauses: no pause beyond the cap.
func checkPauses(t *testing.T, p *pauses, limit time.Duration) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.max > limit {
		t.Errorf("paused %s for %v, beyond the cap %v", p.what, p.max, limit)
	}
	t.Logf("%d pauses, the longest %v (%s)", p.n, p.max, p.what)
}

// checkServer: the server's own log shows no rule exceeded by what the
// client sent (rejected requests included), no rejection by a real rule
// and no ban, and one arrival per request sent.
func checkServer(t *testing.T, log []exchangetest.Entry, rules []exchangetest.Rule, sends int64) {
	t.Helper()
	if v := exchangetest.Violations(exchangetest.Offered(log), rules); len(v) > 0 {
		t.Errorf("the client sent more than the rules allow: %d counters over, the worst %v", len(v), worst(v))
	}
	if v := exchangetest.Violations(log, rules); len(v) > 0 {
		t.Errorf("the server let through more than its rules: %v", v)
	}
	st := exchangetest.Summarize(log)
	real := st.RateLimited - st.LimitedBy[exchangetest.HostileRule]
	if real > 0 || st.Banned > 0 {
		t.Errorf("the server rejected %d requests for their rate (by rule %v) and banned %d", real, st.LimitedBy, st.Banned)
	}
	if int64(len(log)) != sends {
		t.Errorf("the server logged %d arrivals, the client sent %d", len(log), sends)
	}
	t.Logf("server: %d requests, %d accepted, %d hostile answers, %d spurious throttles", st.Requests, st.Accepted, st.Hostile, st.LimitedBy[exchangetest.HostileRule])
}

// worst returns the violation with the highest peak over limit.
func worst(v []exchangetest.Violation) exchangetest.Violation {
	return slices.MaxFunc(v, func(a, b exchangetest.Violation) int {
		return int(min(max(a.Peak-a.Limit-(b.Peak-b.Limit), -1), 1))
	})
}

// checkReleased: the pool holds nothing once every body is closed.
func checkReleased(t *testing.T, pool *clientpool.Pool) {
	t.Helper()
	for _, k := range pool.Snapshot() {
		if k.InFlight != 0 {
			t.Errorf("%s[%s] still holds %d units after every call ended", k.Rule, k.Key, k.InFlight)
		}
	}
}

// hostileThrottles counts the spurious throttles in log: each may cost a
// pause of at most the cap.
func hostileThrottles(log []exchangetest.Entry) int {
	return exchangetest.Summarize(log).LimitedBy[exchangetest.HostileRule]
}
