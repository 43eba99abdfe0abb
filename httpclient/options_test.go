package httpclient_test

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/httpclient"
)

// TestOptions checks each option against the default: every case fails if
// its option were ignored (or the default changed). The throttles are
// answered by a counting base, on synctest's virtual clock.
func TestOptions(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	type result struct {
		sends  int64
		pauses []time.Duration
		events []ratesem.Event
	}
	// run sends one GET through a Transport over a base answering status
	// with header h, built with opts (the base and the observer prepended).
	run := func(t *testing.T, status int, h http.Header, opts ...httpclient.Option) result {
		var r result
		var sends atomic.Int64
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			sends.Add(1)
			return &http.Response{StatusCode: status, Header: h.Clone(), Body: io.NopCloser(strings.NewReader("{}")), Request: req}, nil
		})
		lim := &fakeLimiter{}
		all := append([]httpclient.Option{httpclient.WithBase(base), httpclient.WithObserver(func(e ratesem.Event) { r.events = append(r.events, e) })}, opts...)
		tr := httpclient.New(lim, all...)
		roundTrip(t, tr)
		r.sends = sends.Load()
		_, _, _, r.pauses = lim.state()
		return r
	}
	retryAfter := func(v string) http.Header { return http.Header{"Retry-After": {v}} }
	// between bounds a pause: a Retry-After d gives d plus up to d/10 + 50
	// ms of jitter, one at or above the cap a value in [cap·9/10, cap].
	between := func(t *testing.T, what string, d, lo, hi time.Duration) {
		t.Helper()
		if d < lo || d > hi {
			t.Errorf("%s: %v, want in [%v, %v]", what, d, lo, hi)
		}
	}

	t.Run("WithBase", func(t *testing.T) {
		var used atomic.Bool
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			used.Store(true)
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
		})
		roundTrip(t, httpclient.New(nil, httpclient.WithBase(base)))
		if !used.Load() {
			t.Error("the base given was not used")
		}
		// A nil base is the default, http.DefaultTransport (not called here:
		// the zero Transport refuses before sending).
		if tr := httpclient.New(nil, httpclient.WithBase(nil)); tr == nil {
			t.Error("nil Transport")
		}
	})
	t.Run("WithMaxRetries", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			if r := run(t, 429, retryAfter("1")); r.sends != 1 {
				t.Errorf("default: %d sends of a throttled request, want 1 (no retry)", r.sends)
			}
			r := run(t, 429, retryAfter("1"), httpclient.WithMaxRetries(2))
			if r.sends != 3 {
				t.Errorf("WithMaxRetries(2): %d sends, want 3", r.sends)
			}
			var retried int
			for _, e := range r.events {
				if e.Kind == ratesem.Retried {
					retried++
				}
			}
			if retried != 2 {
				t.Errorf("WithMaxRetries(2): %d Retried events, want 2", retried)
			}
			if r := run(t, 429, retryAfter("1"), httpclient.WithMaxRetries(-3)); r.sends != 1 {
				t.Errorf("WithMaxRetries(-3): %d sends, want 1", r.sends)
			}
		})
	})
	t.Run("WithMaxRetryAfter", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := run(t, 429, retryAfter("86400"))
			between(t, "default cap of a day's Retry-After", r.pauses[0], httpclient.DefaultMaxRetryAfter*9/10, httpclient.DefaultMaxRetryAfter)
			r = run(t, 429, retryAfter("86400"), httpclient.WithMaxRetryAfter(time.Second))
			between(t, "WithMaxRetryAfter(1s)", r.pauses[0], 900*time.Millisecond, time.Second)
			r = run(t, 429, retryAfter("86400"), httpclient.WithMaxRetryAfter(-time.Second))
			between(t, "WithMaxRetryAfter(-1s): the default", r.pauses[0], httpclient.DefaultMaxRetryAfter*9/10, httpclient.DefaultMaxRetryAfter)
		})
	})
	t.Run("WithBackoffStart", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := run(t, 429, nil)
			between(t, "default first backoff", r.pauses[0], 100*time.Millisecond, 300*time.Millisecond)
			r = run(t, 429, nil, httpclient.WithBackoffStart(10*time.Second))
			between(t, "WithBackoffStart(10s)", r.pauses[0], 5*time.Second, 15*time.Second)
			r = run(t, 429, nil, httpclient.WithBackoffStart(-10*time.Second))
			between(t, "WithBackoffStart(-10s): the default", r.pauses[0], 100*time.Millisecond, 300*time.Millisecond)
			r = run(t, 429, nil, httpclient.WithBackoffStart(0))
			between(t, "WithBackoffStart(0): the default", r.pauses[0], 100*time.Millisecond, 300*time.Millisecond)
		})
	})
	t.Run("WithThrottledBody", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			if r := run(t, 200, nil); len(r.pauses) != 0 {
				t.Errorf("default: a 200 paused %v", r.pauses)
			}
			r := run(t, 200, nil, httpclient.WithThrottledBody(func(status int, _ http.Header, body []byte) bool {
				return body != nil && string(body) == "{}"
			}))
			if len(r.pauses) != 1 {
				t.Errorf("a hook that reads the body as a throttle: pauses %v, want one", r.pauses)
			}
			if r := run(t, 429, nil, httpclient.WithThrottledBody(func(int, http.Header, []byte) bool { return false })); len(r.pauses) != 0 {
				t.Errorf("a hook that says never: a 429 paused %v", r.pauses)
			}
		})
	})
	t.Run("WithClock", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			date := t0.Add(40 * time.Second).Format(http.TimeFormat)
			r := run(t, 429, retryAfter(date), httpclient.WithClock(fixedClock{t0}))
			between(t, "an HTTP-date 40 s after the clock's now", r.pauses[0], 40*time.Second, 44050*time.Millisecond)
			// On the real (here: synctest's) clock that date is long past:
			// no usable Retry-After, so the backoff applies.
			r = run(t, 429, retryAfter(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).Format(http.TimeFormat)))
			between(t, "a past HTTP-date on the default clock", r.pauses[0], 100*time.Millisecond, 300*time.Millisecond)
			// A nil clock is the default.
			r = run(t, 429, retryAfter(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).Format(http.TimeFormat)), httpclient.WithClock(nil))
			between(t, "a past HTTP-date with WithClock(nil)", r.pauses[0], 100*time.Millisecond, 300*time.Millisecond)
		})
		// The sleep before a retry runs on the clock's After: a clock whose
		// timers fire at once retries a 60 s Retry-After without waiting;
		// the default clock waits at least the 60 s.
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			r := run(t, 429, retryAfter("60"), httpclient.WithMaxRetries(1), httpclient.WithClock(instantClock{}))
			if r.sends != 2 {
				t.Errorf("instant clock: %d sends, want 2", r.sends)
			}
			if d := time.Since(start); d != 0 {
				t.Errorf("instant clock: the retry waited %v of real time, want 0", d)
			}
			start = time.Now()
			run(t, 429, retryAfter("60"), httpclient.WithMaxRetries(1))
			if d := time.Since(start); d < time.Minute {
				t.Errorf("default clock: the retry waited %v, want at least 1m", d)
			}
		})
	})
	t.Run("WithObserver", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var kinds []ratesem.EventKind
			tr := httpclient.New(&fakeLimiter{}, httpclient.WithBase(roundTripFunc(func(req *http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: 429, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
			})), httpclient.WithObserver(func(e ratesem.Event) { kinds = append(kinds, e.Kind) }))
			roundTrip(t, tr)
			if len(kinds) != 2 || kinds[0] != ratesem.Admitted || kinds[1] != ratesem.Throttled {
				t.Errorf("events %v, want Admitted then Throttled", kinds)
			}
			// A later nil observer replaces it: no event, no panic.
			kinds = nil
			roundTrip(t, httpclient.New(&fakeLimiter{}, httpclient.WithObserver(func(e ratesem.Event) { kinds = append(kinds, e.Kind) }), httpclient.WithObserver(nil),
				httpclient.WithBase(roundTripFunc(func(req *http.Request) (*http.Response, error) {
					return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
				}))))
			if len(kinds) != 0 {
				t.Errorf("WithObserver(nil) after an observer: events %v, want none", kinds)
			}
		})
	})
	t.Run("extremes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// A backoff start beyond the cap is the cap (with jitter).
			r := run(t, 429, nil, httpclient.WithBackoffStart(time.Duration(math.MaxInt64)), httpclient.WithMaxRetryAfter(time.Minute))
			between(t, "WithBackoffStart(MaxInt64) under a 1 min cap", r.pauses[0], 30*time.Second, time.Minute)
			// A cap of MaxInt64 lets a day's Retry-After through, no wrap.
			r = run(t, 429, retryAfter("86400"), httpclient.WithMaxRetryAfter(time.Duration(math.MaxInt64)))
			between(t, "a day's Retry-After under a MaxInt64 cap", r.pauses[0], 24*time.Hour, 24*time.Hour+24*time.Hour/10+50*time.Millisecond)
		})
		synctest.Test(t, func(t *testing.T) {
			// Endless retries of an endless throttle end with the context
			// (the retry budget off: it would stop them after 4).
			var sends atomic.Int64
			base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
				sends.Add(1)
				return &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"1"}}, Body: http.NoBody, Request: req}, nil
			})
			tr := httpclient.New(&fakeLimiter{}, httpclient.WithBase(base), httpclient.WithMaxRetries(math.MaxInt), httpclient.WithRetryBudget(-1, 0))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://example.test/", nil)
			resp, err := tr.RoundTrip(req)
			if err == nil || !errors.Is(err, context.DeadlineExceeded) || resp != nil {
				t.Fatalf("RoundTrip = (%v, %v), want a nil response and the context's error", resp, err)
			}
			// A pause of 1 s to 1.15 s per retry: at most 10 sends in 10 s.
			if n := sends.Load(); n < 8 || n > 11 {
				t.Errorf("%d sends in 10 s of 1 s Retry-Afters", n)
			}
		})
	})
	t.Run("order and nil", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := run(t, 429, retryAfter("1"), nil, httpclient.WithMaxRetries(5), httpclient.WithMaxRetries(1))
			if r.sends != 2 {
				t.Errorf("WithMaxRetries(5) then (1): %d sends, want 2 (the later wins)", r.sends)
			}
		})
	})
}

// instantClock is a ratesem.Clock whose timers fire at once.
type instantClock struct{}

func (instantClock) Now() time.Time { return time.Now() }
func (instantClock) After(time.Duration) <-chan time.Time {
	c := make(chan time.Time, 1)
	c <- time.Now()
	return c
}
