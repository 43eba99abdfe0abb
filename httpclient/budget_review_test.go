package httpclient_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/ratesem/ratesem/httpclient"
)

// mustPanic runs f and fails the test unless it panics.
func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s did not panic", what)
		}
	}()
	f()
}

// A WithThrottledBody hook that panics on the body of a throttled response
// RoundTrip drains before a retry (its check runs at 512 bytes, before
// io.EOF) must not leak the request's units: the drained response is
// RoundTrip's own, no caller can close it.
func TestRetryDrainPanicReleases(t *testing.T) {
	l := &fakeLimiter{}
	long := strings.Repeat("x", 2048) // the check runs at 512 bytes, before EOF
	rc := newRecordingBody(long)
	base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{}, Body: rc, Request: req}, nil
	})
	hook := func(status int, _ http.Header, body []byte) bool {
		if body != nil {
			panic("hook")
		}
		return status == http.StatusTooManyRequests
	}
	tr := httpclient.New(l, httpclient.WithBase(base), httpclient.WithMaxRetries(1),
		httpclient.WithThrottledBody(hook), httpclient.WithClock(instantClock{}))
	req, _ := http.NewRequest(http.MethodGet, "http://api.test/x", nil)
	mustPanic(t, "RoundTrip with a panicking hook", func() { tr.RoundTrip(req) })
	if held, _, _, _ := l.state(); held != 0 {
		t.Errorf("%d units held after the hook panicked on the drained body", held)
	}
	if rc.closes() == 0 {
		t.Error("the drained throttled response was never closed")
	}
}
