package httpclient_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/httpclient"
)

// An observer that panics on the Throttled event of a response whose
// headers show the throttle must not keep that throttle out of the retry
// budget: the response took a token (WithRetryBudget: every throttle does).
// The same at the body stage (a throttle only the body shows).
func TestRetryBudgetSpentWhenObserverPanics(t *testing.T) {
	panicky := func(e ratesem.Event) {
		if e.Kind == ratesem.Throttled {
			panic("observer")
		}
	}
	srv := &budgetServer{}
	tr := httpclient.New(&fakeLimiter{}, httpclient.WithBase(srv), httpclient.WithMaxRetries(3),
		httpclient.WithClock(instantClock{}), httpclient.WithObserver(panicky))
	for range 3 {
		req, _ := http.NewRequest(http.MethodGet, "http://api.test/x", nil)
		mustPanic(t, "RoundTrip with a panicking observer", func() { tr.RoundTrip(req) })
	}
	if _, tok, _ := httpclient.BudgetKeys(tr); tok != 7000 {
		t.Errorf("3 throttles whose observer panicked left %d thousandths, want 7000", tok)
	}

	base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{"code":"50011"}`)), Request: req}, nil
	})
	hook := func(_ int, _ http.Header, body []byte) bool { return strings.Contains(string(body), "50011") }
	tr = httpclient.New(&fakeLimiter{}, httpclient.WithBase(base), httpclient.WithMaxRetries(3),
		httpclient.WithThrottledBody(hook), httpclient.WithClock(instantClock{}), httpclient.WithObserver(panicky))
	req, _ := http.NewRequest(http.MethodGet, "http://api.test/x", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	mustPanic(t, "reading a body throttle with a panicking observer", func() { io.Copy(io.Discard, resp.Body) })
	resp.Body.Close()
	if _, tok, _ := httpclient.BudgetKeys(tr); tok != 9000 {
		t.Errorf("a body throttle whose observer panicked left %d thousandths, want 9000", tok)
	}
}
