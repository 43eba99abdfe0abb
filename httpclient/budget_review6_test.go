package httpclient_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ratesem/ratesem/httpclient"
)

// Only successes earn tokens back (A6: "every successful RPC"; issue 21:
// "retries spend tokens that successes earn back"): a server failing
// every request, with 503 (overloaded) or 500 to most and 429 to the
// rest, sees 4 retries in all, not one more per ten failures. A failure
// that is not a throttle neither takes nor gives (A6: only retryable
// failures count), and a response below 400 earns as before.
func TestRetryBudgetFailuresDoNotEarn(t *testing.T) {
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusInternalServerError, http.StatusNotFound} {
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			st := status
			if req.URL.Query().Get("t") != "" {
				st = http.StatusTooManyRequests
			}
			return &http.Response{StatusCode: st, Header: http.Header{"Retry-After": {"1"}}, Body: io.NopCloser(strings.NewReader("x")), Request: req}, nil
		})
		tr := httpclient.New(&fakeLimiter{}, httpclient.WithBase(base), httpclient.WithMaxRetries(3), httpclient.WithClock(instantClock{}))
		tokens := func() int64 { _, tok, _ := httpclient.BudgetKeys(tr); return tok }
		sendAll(t, tr, 100, 4, func(int) string { return "http://api.test/x" }) // the failures first: full stays full
		sendAll(t, tr, 20, 1, func(int) string { return "http://api.test/x?t=1" })
		sendAll(t, tr, 1000, 4, func(int) string { return "http://api.test/x" })
		if got := tokens(); got != 0 {
			t.Errorf("status %d: 1000 failures after the throttles left %d thousandths, want 0", status, got)
		}
	}
	srv := &budgetServer{throttle: func(int64, *http.Request) bool { return false }}
	tr := httpclient.New(&fakeLimiter{}, httpclient.WithBase(srv), httpclient.WithMaxRetries(3), httpclient.WithClock(instantClock{}))
	srv.throttle = func(int64, *http.Request) bool { return true }
	sendAll(t, tr, 20, 1, plainURL)
	srv.throttle = func(int64, *http.Request) bool { return false }
	sendAll(t, tr, 10, 1, plainURL)
	if _, tok, _ := httpclient.BudgetKeys(tr); tok != 1000 {
		t.Errorf("10 responses 200 after draining: %d thousandths, want 1000", tok)
	}
}
