package httpclient_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/semaphore"
	"github.com/ratesem/ratesem/window"
)

// caught runs f and returns what it panicked with (nil: no panic).
func caught(f func()) (r any) {
	defer func() { r = recover() }()
	f()
	return nil
}

// Every user callback on the path of a request through NewPool may panic
// without leaking units: the rule's Key and Weight (before anything is
// held), Learn, Usage and Settle (while the call holds its charges), the
// table's ThrottleTargets, the WithThrottledBody hook and the observers of
// the Transport and of the Pool. The panic reaches the caller (of
// RoundTrip, or of the body's Read or Close), and afterwards nothing is in
// flight: a limit of 1 in flight admits the next request at once.
func TestPoolCallbackPanicsLeakNothing(t *testing.T) {
	type hooks struct {
		key, weight, learn, usage, settle, targets, throttledBody, observer, poolObserver bool
	}
	for _, tc := range []struct {
		name string
		h    hooks
	}{
		{"Key", hooks{key: true}},
		{"Weight", hooks{weight: true}},
		{"Learn", hooks{learn: true}},
		{"Usage", hooks{usage: true}},
		{"Settle", hooks{settle: true}},
		{"ThrottleTargets", hooks{targets: true}},
		{"WithThrottledBody", hooks{throttledBody: true}},
		{"Transport observer", hooks{observer: true}},
		{"Pool observer", hooks{poolObserver: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			armed := false
			boom := func(on bool) {
				if armed && on {
					panic(tc.name)
				}
			}
			rule := clientpool.Rule{
				Name:             "r",
				Limit:            window.Limit{N: 1000, Per: time.Millisecond},
				MaxUnitsInFlight: 1,
				Key:              func(*http.Request) (string, bool) { boom(tc.h.key); return "k", true },
				Weight:           func(*http.Request) int64 { boom(tc.h.weight); return 1 },
				Learn: func(http.Header, time.Time) (clientpool.Learned, bool) {
					boom(tc.h.learn)
					return clientpool.Learned{}, false
				},
				Usage:  func(http.Header) (int64, bool) { boom(tc.h.usage); return 0, false },
				Settle: func(http.Header, []byte) (int64, bool) { boom(tc.h.settle); return 0, false },
			}
			table := clientpool.Table{
				Rules:   []clientpool.Rule{rule},
				Default: []clientpool.Cost{{Rule: "r"}},
				ThrottleTargets: func(_ clientpool.Throttle, cs []clientpool.Charge) []clientpool.Charge {
					boom(tc.h.targets)
					return nil
				},
			}
			p, err := clientpool.New(table, clientpool.WithObserver(func(e ratesem.Event) {
				boom(tc.h.poolObserver && e.Kind == ratesem.Admitted)
			}))
			if err != nil {
				t.Fatal(err)
			}
			status := http.StatusOK
			if tc.h.targets {
				status = http.StatusTooManyRequests
			}
			base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: status, Header: http.Header{"Retry-After": {"0"}},
					Body: io.NopCloser(strings.NewReader("a reply")), Request: req}, nil
			})
			tr := httpclient.NewPool(p, httpclient.WithBase(base),
				httpclient.WithThrottledBody(func(status int, h http.Header, body []byte) bool {
					boom(tc.h.throttledBody && body != nil)
					return httpclient.DefaultThrottledBody(status, h, body)
				}),
				httpclient.WithObserver(func(e ratesem.Event) { boom(tc.h.observer && e.Kind == ratesem.Admitted) }))
			send := func() {
				req, _ := http.NewRequest("GET", "http://api.test/x", nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				_, _ = io.ReadAll(resp.Body)
			}
			armed = true
			if caught(send) == nil {
				t.Fatalf("%s panicked nowhere", tc.name)
			}
			armed = false
			for _, k := range p.Snapshot() {
				if k.InFlight != 0 {
					t.Fatalf("after a panic in %s: %d units in flight on %q", tc.name, k.InFlight, k.Key)
				}
			}
			send() // not held up by a leaked unit (MaxUnitsInFlight 1)
		})
	}
}

// The Transport's own observer panicking on Admitted leaks nothing on a
// plain Limiter either, and neither does one panicking on Retried (the
// throttled response it reports on is closed first).
func TestTransportObserverPanicsLeakNothing(t *testing.T) {
	for _, kind := range []ratesem.EventKind{ratesem.Admitted, ratesem.Retried} {
		t.Run(kind.String(), func(t *testing.T) {
			s := semaphore.New(1, 0)
			calls := 0
			base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
				calls++
				st := http.StatusOK
				if calls == 1 {
					st = http.StatusTooManyRequests
				}
				return &http.Response{StatusCode: st, Header: http.Header{"Retry-After": {"1"}},
					Body: io.NopCloser(strings.NewReader("x")), Request: req}, nil
			})
			tr := httpclient.New(s, httpclient.WithBase(base), httpclient.WithMaxRetries(1),
				httpclient.WithMaxRetryAfter(time.Millisecond),
				httpclient.WithObserver(func(e ratesem.Event) {
					if e.Kind == kind {
						panic(kind.String())
					}
				}))
			req, _ := http.NewRequest("GET", "http://api.test/x", nil)
			if caught(func() { _, _ = tr.RoundTrip(req) }) == nil {
				t.Fatal("no panic")
			}
			if st := s.Stats(); st.InFlight != 0 {
				t.Fatalf("%d units in flight after the observer's panic", st.InFlight)
			}
		})
	}
}
