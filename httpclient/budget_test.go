package httpclient_test

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/window"
)

// budgetServer is a base RoundTripper standing for a server: it answers
// 429 (Retry-After: 1) to the sends throttle picks and 200 to the others,
// and counts what it sees.
type budgetServer struct {
	// throttle picks, from the send's index (from 0) and the request,
	// the sends to throttle; nil throttles every one.
	throttle func(i int64, req *http.Request) bool

	sends, throttled, ok atomic.Int64

	mu     sync.Mutex
	perKey map[string]int // sends by the instId query parameter
}

func (s *budgetServer) RoundTrip(req *http.Request) (*http.Response, error) {
	i := s.sends.Add(1) - 1
	if k := req.URL.Query().Get("instId"); k != "" {
		s.mu.Lock()
		if s.perKey == nil {
			s.perKey = map[string]int{}
		}
		s.perKey[k]++
		s.mu.Unlock()
	}
	if s.throttle == nil || s.throttle(i, req) {
		s.throttled.Add(1)
		return &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"1"}},
			Body: io.NopCloser(strings.NewReader("slow down")), Request: req}, nil
	}
	s.ok.Add(1)
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("{}")), Request: req}, nil
}

// sendAll sends n GETs of url(i) through tr from g goroutines, each read
// and closed, and returns the number of responses with status 200.
func sendAll(t *testing.T, tr http.RoundTripper, n, g int, url func(i int) string) int {
	t.Helper()
	var next, ok atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, g)
	for range g {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				req, _ := http.NewRequest(http.MethodGet, url(i), nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					errs <- err
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return int(ok.Load())
}

func plainURL(int) string { return "http://api.test/x" }

// retriedCounter counts the Retried events of an observer.
type retriedCounter struct{ n atomic.Int64 }

func (c *retriedCounter) observe(e ratesem.Event) {
	if e.Kind == ratesem.Retried {
		c.n.Add(1)
	}
}

// ceilHalfMinus1 is the retries a budget of maxTokens allows in all when
// every response is throttled: a retry needs more than maxTokens/2 left
// after its throttle's token, so ceil(maxTokens/2) - 1 of them.
func ceilHalfMinus1(maxTokens int) int64 { return int64((maxTokens+1)/2 - 1) }

// A server that throttles every request sees at most ceil(maxTokens/2)-1
// retries in all from a Transport, over 1000 requests sent one by one or
// from 64 goroutines: the token is taken and the retry decided in one
// step: exactly the throttles that leave more than half allow a retry, in
// whatever order they come (WithMaxRetries(60) never stops one), so
// exactly ceil(maxTokens/2)-1 retries. Without the budget the server would
// see 60 retries per request. Each retry sent is one Retried event.
func TestRetryBudgetEveryRequestThrottled(t *testing.T) {
	for _, maxTokens := range []int{0, 10, 11, 3, 100} {
		for _, g := range []int{1, 64} {
			t.Run(fmt.Sprintf("maxTokens=%d/goroutines=%d", maxTokens, g), func(t *testing.T) {
				srv := &budgetServer{}
				var rc retriedCounter
				tr := httpclient.New(&fakeLimiter{}, httpclient.WithBase(srv), httpclient.WithMaxRetries(60),
					httpclient.WithRetryBudget(maxTokens, 0.1), httpclient.WithClock(instantClock{}), httpclient.WithObserver(rc.observe))
				const n = 1000
				if ok := sendAll(t, tr, n, g, plainURL); ok != 0 {
					t.Fatalf("%d responses 200 from a server that throttles all", ok)
				}
				m := maxTokens
				if m == 0 {
					m = 10 // the default
				}
				want := ceilHalfMinus1(m)
				retries := srv.sends.Load() - n
				if retries != want || retries > int64(math.Ceil(float64(m)/2)) {
					t.Errorf("%d retries reached the server over %d requests, want %d (ceil(%d/2)-1)", retries, n, want, m)
				}
				if got := rc.n.Load(); got != retries {
					t.Errorf("%d Retried events for %d retries sent", got, retries)
				}
			})
		}
	}
}

// A server that throttles a fraction f of the sends: retries stay below
// maxTokens/2 + tokenRatio × (responses not throttled), the bound of the
// A6 design, serially and from 64 goroutines; retries still happen where
// the server mostly answers. Without the budget, f = 0.5 alone gives
// about f+f²+f³ = 0.875 retries per request, seven times the bound.
func TestRetryBudgetFractionThrottled(t *testing.T) {
	for _, f := range []float64{0.1, 0.25, 0.5, 0.9} {
		for _, g := range []int{1, 64} {
			t.Run(fmt.Sprintf("f=%v/goroutines=%d", f, g), func(t *testing.T) {
				srv := &budgetServer{throttle: func(i int64, _ *http.Request) bool {
					return float64((i*7919)%1000)/1000 < f // spread over the sends, deterministic
				}}
				tr := httpclient.New(nil, httpclient.WithBase(srv), httpclient.WithMaxRetries(3),
					httpclient.WithClock(instantClock{}))
				const n = 2000
				sendAll(t, tr, n, g, plainURL)
				retries, ok := srv.sends.Load()-n, srv.ok.Load()
				// Thousandths: maxTokens/2 = 5000, tokenRatio = 100.
				if bound := 5000 + 100*ok; 1000*retries >= bound {
					t.Errorf("%d retries over %d requests (%d answered 200): not below 5 + 0.1 × %d", retries, n, ok, ok)
				}
				if f <= 0.25 && retries == 0 {
					t.Errorf("no retry at all with %.0f%% of the sends throttled", 100*f)
				}
				t.Logf("f=%.2f: %d retries / %d requests = %.3f (bound %.3f)", f, retries, n, float64(retries)/n, (5+0.1*float64(ok))/n)
			})
		}
	}
}

// budgetSteps drives a Transport through throttled and healthy requests,
// one at a time; each step returns the sends its requests took.
type budgetSteps struct {
	t    *testing.T
	srv  *budgetServer
	tr   http.RoundTripper
	fail atomic.Bool
}

func newBudgetSteps(t *testing.T, opts ...httpclient.Option) *budgetSteps {
	s := &budgetSteps{t: t}
	s.srv = &budgetServer{throttle: func(int64, *http.Request) bool { return s.fail.Load() }}
	opts = append([]httpclient.Option{httpclient.WithBase(s.srv), httpclient.WithMaxRetries(10), httpclient.WithClock(instantClock{})}, opts...)
	s.tr = httpclient.New(nil, opts...)
	return s
}

// run sends n requests with every send throttled or none, and returns the
// sends they took.
func (s *budgetSteps) run(n int, throttled bool) int64 {
	s.t.Helper()
	s.fail.Store(throttled)
	before := s.srv.sends.Load()
	sendAll(s.t, s.tr, n, 1, plainURL)
	return s.srv.sends.Load() - before
}

// Successes earn the budget back, a tokenRatio each, exactly: drained to
// 0, 60 successes bring 6 tokens, and a throttle then leaves 5, not above
// half: no retry; 11 more bring 6.1, and a throttle leaves 5.1: a retry.
func TestRetryBudgetEarnedBack(t *testing.T) {
	s := newBudgetSteps(t) // the default budget: 10 tokens, 0.1
	if sends := s.run(20, true); sends != 24 {
		t.Fatalf("20 throttled requests took %d sends, want 24 (4 retries)", sends)
	}
	s.run(60, false)
	if sends := s.run(1, true); sends != 1 {
		t.Fatalf("a throttle after 60 successes from an empty budget was retried (%d sends)", sends)
	}
	s.run(11, false)
	if sends := s.run(1, true); sends != 2 {
		t.Fatalf("a throttle with 6.1 tokens was sent %d times, want 2 (one retry)", sends)
	}
}

// Hostile or odd WithRetryBudget values are made sane as documented: 0 is
// the default; a negative maxTokens turns the budget off (today's retries);
// above 1000 is 1000; a ratio of 0, negative, NaN or -Inf is 0.1; +Inf or
// above maxTokens refills with one success; a tiny one is 0.001.
func TestRetryBudgetHostileValues(t *testing.T) {
	tokens := []struct {
		maxTokens int
		want      int64 // retries of 2 throttled requests (600 each at most)
	}{
		{0, 4}, {1, 0}, {2, 0}, {3, 1}, {1000, 499}, {1001, 499}, {math.MaxInt, 499},
		{-1, 1200}, {math.MinInt, 1200},
	}
	for _, tc := range tokens {
		srv := &budgetServer{}
		tr := httpclient.New(nil, httpclient.WithBase(srv), httpclient.WithMaxRetries(600),
			httpclient.WithRetryBudget(tc.maxTokens, 0.1), httpclient.WithClock(instantClock{}))
		sendAll(t, tr, 2, 1, plainURL)
		if got := srv.sends.Load() - 2; got != tc.want {
			t.Errorf("WithRetryBudget(%d, 0.1): %d retries, want %d", tc.maxTokens, got, tc.want)
		}
	}
	ratios := []struct {
		ratio     float64
		successes int   // after draining to 0
		want      int64 // sends of one throttled request then
	}{
		{math.NaN(), 60, 1}, {math.NaN(), 61, 2},
		{0, 60, 1}, {0, 61, 2}, {-3, 61, 2}, {math.Inf(-1), 61, 2},
		{math.Inf(1), 1, 5}, {1e300, 1, 5}, {10, 1, 5}, {9.999, 1, 5}, // full again (9.999): 4 retries
		{9, 1, 4},                  // 9 tokens: 3 retries
		{0.5, 12, 1}, {0.5, 13, 2}, // 6 then 6.5 tokens
		{0.0004, 6000, 1}, {1e-12, 6001, 2}, // 0.001: 6 then 6.001 tokens
		{0.1234, 48, 1}, {0.1234, 49, 2}, // 0.123: 5.904 after 48, 6.027 after 49
	}
	for _, tc := range ratios {
		s := newBudgetSteps(t, httpclient.WithRetryBudget(10, tc.ratio))
		s.run(20, true) // drained to 0
		s.run(tc.successes, false)
		if got := s.run(1, true); got != tc.want {
			t.Errorf("WithRetryBudget(10, %v): after %d successes a throttled request took %d sends, want %d", tc.ratio, tc.successes, got, tc.want)
		}
	}
}

// The budget off (WithRetryBudget(-1, ...)) restores the retries of
// WithMaxRetries alone; without WithMaxRetries the budget does nothing.
func TestRetryBudgetOff(t *testing.T) {
	srv := &budgetServer{}
	tr := httpclient.New(nil, httpclient.WithBase(srv), httpclient.WithMaxRetries(2),
		httpclient.WithRetryBudget(-1, 0.1), httpclient.WithClock(instantClock{}))
	sendAll(t, tr, 100, 4, plainURL)
	if got := srv.sends.Load(); got != 300 {
		t.Errorf("budget off: %d sends of 100 requests always throttled, want 300", got)
	}
	srv = &budgetServer{}
	tr = httpclient.New(nil, httpclient.WithBase(srv), httpclient.WithRetryBudget(100, 1), httpclient.WithClock(instantClock{}))
	sendAll(t, tr, 100, 4, plainURL)
	if got := srv.sends.Load(); got != 100 {
		t.Errorf("no WithMaxRetries: %d sends of 100 requests, want 100", got)
	}
}

// keyedTable has one rule keyed by the instId query parameter and,
// with shared, a second rule without a key that every request is charged
// too; /free is charged nothing.
func keyedTable(shared bool) clientpool.Table {
	tab := clientpool.Table{
		Rules: []clientpool.Rule{{Name: "inst", Limit: window.Limit{N: 1 << 30, Per: time.Second}, PauseOnThrottle: true,
			Key: func(r *http.Request) (string, bool) { return r.URL.Query().Get("instId"), true }}},
		Default:   []clientpool.Cost{{Rule: "inst"}},
		Endpoints: []clientpool.Endpoint{{Path: "/free"}},
	}
	if shared {
		tab.Rules = append(tab.Rules, clientpool.Rule{Name: "account", Limit: window.Limit{N: 1 << 30, Per: time.Second}})
		tab.Default = append(tab.Default, clientpool.Cost{Rule: "account"})
	}
	return tab
}

func instURL(k string) func(int) string {
	return func(int) string { return "http://api.test/o?instId=" + k }
}

// Under NewPool the budget is per (rule, key): a key the server throttles
// without end uses up its own budget, not another key's, nor that of the
// requests charged nothing (the Transport's own). A request charged under
// a shared rule too needs that rule's budget as well: a failing key spends
// it for all.
func TestRetryBudgetPerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &budgetServer{}
		tr := httpclient.NewPool(mustPool(t, keyedTable(false)), httpclient.WithBase(srv), httpclient.WithMaxRetries(3),
			httpclient.WithMaxRetryAfter(time.Millisecond))
		sendAll(t, tr, 200, 8, instURL("bad"))
		sendAll(t, tr, 50, 8, instURL("good"))
		sendAll(t, tr, 50, 8, func(int) string { return "http://api.test/free" })
		if got := srv.perKey["bad"] - 200; got != 4 {
			t.Errorf("the failing key got %d retries, want 4", got)
		}
		if got := srv.perKey["good"] - 50; got != 4 {
			t.Errorf("another key got %d retries after the failing key's, want its own 4", got)
		}
		if got := srv.sends.Load() - int64(srv.perKey["bad"]+srv.perKey["good"]) - 50; got != 4 {
			t.Errorf("the requests charged nothing got %d retries, want the Transport's own 4", got)
		}
		if keys, _, _ := httpclient.BudgetKeys(tr); keys != 2 {
			t.Errorf("%d key budgets kept, want 2", keys)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		srv := &budgetServer{}
		tr := httpclient.NewPool(mustPool(t, keyedTable(true)), httpclient.WithBase(srv), httpclient.WithMaxRetries(3),
			httpclient.WithMaxRetryAfter(time.Millisecond))
		sendAll(t, tr, 200, 8, instURL("bad"))
		sendAll(t, tr, 50, 8, instURL("good"))
		if got := srv.perKey["bad"] - 200; got != 4 {
			t.Errorf("the failing key got %d retries, want 4", got)
		}
		if got := srv.perKey["good"] - 50; got != 0 {
			t.Errorf("a key sharing the spent account rule got %d retries, want 0", got)
		}
	})
}

// Per-key budgets are bounded in memory: 100k keys, each throttled on
// every send, keep at most 1024 budgets, and the keys beyond share one
// overflow budget: exactly 1025 × 4 retries in all, from 64 goroutines.
func TestRetryBudgetKeyOverflow(t *testing.T) {
	srv := &budgetServer{}
	tr := httpclient.NewPool(mustPool(t, keyedTable(false)), httpclient.WithBase(srv), httpclient.WithMaxRetries(10),
		httpclient.WithMaxRetryAfter(time.Microsecond))
	const n = 100_000
	sendAll(t, tr, n, 64, func(i int) string { return fmt.Sprintf("http://api.test/o?instId=k%d", i) })
	if got, want := srv.sends.Load()-n, int64(1025*4); got != want {
		t.Errorf("%d retries over %d keys, want %d (1024 keys and the overflow, 4 each)", got, n, want)
	}
	keys, _, overflow := httpclient.BudgetKeys(tr)
	if keys != 1024 || overflow != 0 {
		t.Errorf("%d key budgets and an overflow of %d thousandths, want 1024 and 0 (spent by the keys beyond)", keys, overflow)
	}
}

// A key given room again starts from the overflow's tokens: the failures
// it had in the overflow are not forgiven to make room.
func TestRetryBudgetOverflowNotForgiven(t *testing.T) {
	srv := &budgetServer{}
	srv.throttle = func(_ int64, req *http.Request) bool {
		return req.URL.Query().Get("instId") != "a" || req.URL.Query().Get("ok") == ""
	}
	tr := httpclient.NewPool(mustPool(t, keyedTable(false)), httpclient.WithBase(srv), httpclient.WithMaxRetries(10),
		httpclient.WithMaxRetryAfter(time.Microsecond))
	httpclient.SetBudgetMaxKeys(tr, 2)
	sendAll(t, tr, 1, 1, instURL("a"))  // a: 5 tokens, kept
	sendAll(t, tr, 1, 1, instURL("b"))  // b: 5 tokens, kept; the map is full
	sendAll(t, tr, 20, 1, instURL("c")) // c spends the overflow to 0
	if got := srv.perKey["c"] - 20; got != 4 {
		t.Fatalf("the overflow allowed %d retries, want 4", got)
	}
	sendAll(t, tr, 50, 1, func(int) string { return "http://api.test/o?instId=a&ok=1" }) // a back to full: dropped
	if keys, _, _ := httpclient.BudgetKeys(tr); keys != 1 {
		t.Fatalf("%d key budgets kept, want 1 (a dropped at full)", keys)
	}
	before := srv.perKey["c"]
	sendAll(t, tr, 1, 1, instURL("c"))
	if got := srv.perKey["c"] - before; got != 1 {
		t.Errorf("c, given room again, was sent %d times: its spent overflow budget was forgiven", got)
	}
}

// A request charged twice under one rule and key spends that budget once
// per throttle: 4 retries, not 2.
func TestRetryBudgetDuplicateCharges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tab := keyedTable(false)
		tab.Endpoints = append(tab.Endpoints, clientpool.Endpoint{Path: "/dup", Charges: func(*http.Request) ([]clientpool.Charge, error) {
			return []clientpool.Charge{{Rule: "inst", Key: "k", Weight: 1}, {Rule: "inst", Key: "k", Weight: 1}}, nil
		}})
		srv := &budgetServer{}
		tr := httpclient.NewPool(mustPool(t, tab), httpclient.WithBase(srv), httpclient.WithMaxRetries(10),
			httpclient.WithMaxRetryAfter(time.Millisecond))
		sendAll(t, tr, 20, 4, func(int) string { return "http://api.test/dup" })
		if got := srv.sends.Load() - 20; got != 4 {
			t.Errorf("%d retries of requests charged twice under one key, want 4", got)
		}
	})
}

// BenchmarkRetryBudget measures a RoundTrip answered 200 at once, with the
// retry budget on (the default with WithMaxRetries) and off, from
// GOMAXPROCS goroutines: the budget's cost is one lock and one addition
// per response.
func BenchmarkRetryBudget(b *testing.B) {
	for _, c := range []struct {
		name string
		opt  httpclient.Option
	}{{"on", nil}, {"off", httpclient.WithRetryBudget(-1, 0)}} {
		b.Run(c.name, func(b *testing.B) {
			srv := &budgetServer{throttle: func(int64, *http.Request) bool { return false }}
			tr := httpclient.New(nil, httpclient.WithBase(srv), httpclient.WithMaxRetries(1), c.opt)
			b.RunParallel(func(pb *testing.PB) {
				req, _ := http.NewRequest(http.MethodGet, "http://api.test/x", nil)
				for pb.Next() {
					resp, err := tr.RoundTrip(req)
					if err != nil {
						b.Fatal(err)
					}
					resp.Body.Close()
				}
			})
		})
	}
}

// A base error (no response) neither spends nor earns; a throttle only the
// body shows spends a token (and is never retried); a response not
// throttled, read through a body hook, earns.
func TestRetryBudgetBaseErrorsAndBodies(t *testing.T) {
	var fail atomic.Bool
	base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if fail.Load() {
			return nil, errors.New("connection refused")
		}
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{"code":"50011"}`)), Request: req}, nil
	})
	var bodyThrottles atomic.Bool
	hook := func(status int, _ http.Header, body []byte) bool {
		return status == http.StatusTooManyRequests || (body != nil && bodyThrottles.Load() && strings.Contains(string(body), "50011"))
	}
	tr := httpclient.New(&fakeLimiter{}, httpclient.WithBase(base), httpclient.WithMaxRetries(3),
		httpclient.WithThrottledBody(hook), httpclient.WithClock(instantClock{}))
	tokens := func() int64 { _, tok, _ := httpclient.BudgetKeys(tr); return tok }
	bodyThrottles.Store(true)
	sendAll(t, tr, 3, 1, plainURL)
	if got := tokens(); got != 7000 {
		t.Fatalf("3 throttles only the body showed left %d thousandths, want 7000", got)
	}
	fail.Store(true)
	for range 5 {
		req, _ := http.NewRequest(http.MethodGet, "http://api.test/x", nil)
		if _, err := tr.RoundTrip(req); err == nil {
			t.Fatal("no error from a failing base")
		}
	}
	if got := tokens(); got != 7000 {
		t.Fatalf("base errors moved the budget to %d thousandths, want 7000", got)
	}
	fail.Store(false)
	bodyThrottles.Store(false)
	sendAll(t, tr, 2, 1, plainURL)
	if got := tokens(); got != 7200 {
		t.Fatalf("2 responses not throttled left %d thousandths, want 7200", got)
	}
}
