package httpclient_test

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/httpclient"
)

// A Rule's Usage that panics (it reads every response's headers, a
// throttled one's too) must not keep the throttle out of the retry budget:
// the throttle takes its token from the key's budget all the same.
func TestRetryBudgetSpentWhenUsagePanics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tab := keyedTable(false)
		tab.Rules[0].Usage = func(http.Header) (int64, bool) { panic("usage") }
		srv := &budgetServer{}
		tr := httpclient.NewPool(mustPool(t, tab), httpclient.WithBase(srv), httpclient.WithMaxRetries(3),
			httpclient.WithMaxRetryAfter(time.Millisecond))
		req, _ := http.NewRequest(http.MethodGet, "http://api.test/o?instId=k", nil)
		mustPanic(t, "RoundTrip with a panicking Usage", func() { tr.RoundTrip(req) })
		if keys, _, _ := httpclient.BudgetKeys(tr); keys != 1 {
			t.Errorf("%d key budgets after a throttle whose Usage panicked, want 1 (the key's, spent)", keys)
		}
	})
}

// A throttle both the headers and the body show spends once, not twice;
// a 200 whose body shows none earns once, at its body check, however the
// caller ends it (read to io.EOF, closed unread, read then closed, each
// twice); a throttle only the body shows spends once when read.
func TestRetryBudgetBodyCountsOnce(t *testing.T) {
	var status atomic.Int64
	status.Store(http.StatusTooManyRequests)
	base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: int(status.Load()), Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{"code":"50011"}` + strings.Repeat(" ", 600))), Request: req}, nil
	})
	hook := func(st int, _ http.Header, body []byte) bool {
		return st == http.StatusTooManyRequests || (st == 299 && strings.Contains(string(body), "50011"))
	}
	tr := httpclient.New(&fakeLimiter{}, httpclient.WithBase(base), httpclient.WithMaxRetries(1),
		httpclient.WithThrottledBody(hook), httpclient.WithClock(instantClock{}))
	tokens := func() int64 { _, tok, _ := httpclient.BudgetKeys(tr); return tok }
	one := func(end func(*http.Response)) {
		req, _ := http.NewRequest(http.MethodGet, "http://api.test/x", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		end(resp)
		end(resp) // twice: still once
	}
	readAll := func(r *http.Response) { io.Copy(io.Discard, r.Body) }
	closeIt := func(r *http.Response) { r.Body.Close() }
	both := func(r *http.Response) { io.Copy(io.Discard, r.Body); r.Body.Close() }
	for _, end := range []func(*http.Response){readAll, closeIt, both} {
		one(end) // a 429 whose body says 50011 too: 10 → 9, retried → 8; 7 → 6; 5, not retried
	}
	if got := tokens(); got != 5000 {
		t.Fatalf("3 throttled requests (5 throttles) with throttled bodies: %d thousandths, want 5000", got)
	}
	status.Store(http.StatusOK)
	for _, end := range []func(*http.Response){readAll, closeIt, both} {
		one(end)
	}
	if got := tokens(); got != 5300 {
		t.Errorf("3 responses 200: %d thousandths, want 5300", got)
	}
	// Only the body shows the throttle: read, it spends once; closed
	// unread, the hook judges the empty body the caller's reads went
	// through (WithThrottledBody), here not a throttle, so it counts as a
	// success, as it would without a hook.
	status.Store(299)
	for _, end := range []func(*http.Response){readAll, closeIt, both} {
		one(end)
	}
	if got := tokens(); got != 3400 {
		t.Errorf("3 throttles only the body shows, one closed unread: %d thousandths, want 3400", got)
	}
}
