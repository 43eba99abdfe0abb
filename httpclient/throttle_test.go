package httpclient_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
)

// statusSeq answers the i-th request (from 0) with statuses[i] (the last
// one repeated), no Retry-After and a short body.
func statusSeq(statuses ...int) http.RoundTripper {
	var i atomic.Int64
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		k := min(int(i.Add(1)-1), len(statuses)-1)
		return &http.Response{StatusCode: statuses[k], Header: http.Header{}, Body: io.NopCloser(strings.NewReader("{}")), Request: req}, nil
	})
}

func roundTrip(t *testing.T, tr http.RoundTripper) {
	t.Helper()
	resp, err := tr.RoundTrip(newRequest(t, http.MethodGet, "http://example.test/", nil))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
}

// A 429 without Retry-After pauses the plain Transport's limiter with
// capped exponential backoff: 100..200 ms (equal jitter on 200 ms), then
// doubling for each throttle in a row, never above MaxRetryAfter; a
// response that is not throttled resets the streak. On the old code a 429
// without Retry-After did not pause at all.
func TestThrottleWithoutRetryAfterBacksOff(t *testing.T) {
	lim := &fakeLimiter{}
	const ms = time.Millisecond
	tr := httpclient.New(lim, httpclient.WithBase(statusSeq(429, 429, 429, 429, 429, 429, 200, 429)), httpclient.WithMaxRetryAfter(1*time.Second))
	for range 8 {
		roundTrip(t, tr)
	}
	_, _, rel, pauses := lim.state()
	assert.Equal(t, 8, rel)
	want := [][2]time.Duration{
		{100 * ms, 200 * ms}, {200 * ms, 400 * ms}, {400 * ms, 800 * ms},
		{500 * ms, 1000 * ms}, {500 * ms, 1000 * ms}, {500 * ms, 1000 * ms}, // capped at 1 s
		{100 * ms, 200 * ms}, // after the 200: a fresh streak
	}
	require.Len(t, pauses, len(want), "%v", pauses)
	for i, w := range want {
		assert.True(t, pauses[i] >= w[0] && pauses[i] <= w[1], "pause %d = %v, want %v..%v", i, pauses[i], w[0], w[1])
	}
}

// The calls in flight when a server starts rejecting are one wave: their
// 429s grow the streak once, so 50 concurrent rejections pause 100..200 ms,
// not 200 ms·2^49 (the cap).
func TestThrottleWaveCountsOnce(t *testing.T) {
	const n = 50
	lim := &fakeLimiter{}
	var arrived sync.WaitGroup
	arrived.Add(n)
	base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		arrived.Done()
		arrived.Wait() // all sent before any answer
		return &http.Response{StatusCode: 429, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
	})
	tr := httpclient.New(lim, httpclient.WithBase(base))
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { roundTrip(t, tr) })
	}
	wg.Wait()
	_, _, _, pauses := lim.state()
	require.Len(t, pauses, n)
	for _, p := range pauses {
		assert.LessOrEqual(t, p, 200*time.Millisecond)
	}
}

// Retries (MaxRetries) wait out the pause the throttle caused, never 0,
// even when the Selector gives no limiter; ctx ends the wait. On the old
// code a 429 without Retry-After was retried at once.
func TestRetryWaitsForBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, lim := range []httpclient.Limiter{&fakeLimiter{}, nil} {
			var sends []time.Time
			base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
				sends = append(sends, time.Now())
				return &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"soon"}}, Body: io.NopCloser(strings.NewReader("x")), Request: req}, nil
			})
			tr := httpclient.New(lim, httpclient.WithBase(base), httpclient.WithMaxRetries(3), httpclient.WithMaxRetryAfter(300*time.Millisecond))
			roundTrip(t, tr)
			require.Len(t, sends, 4)
			for i := 1; i < len(sends); i++ {
				gap := sends[i].Sub(sends[i-1])
				assert.True(t, gap >= 100*time.Millisecond && gap <= 300*time.Millisecond,
					"retry %d went %v after the throttle; want a backoff within the 300ms cap", i, gap)
			}
		}

		// A context that ends during the wait ends RoundTrip with its error.
		tr := httpclient.New(&fakeLimiter{}, httpclient.WithBase(statusSeq(429)), httpclient.WithMaxRetries(5), httpclient.WithMaxRetryAfter(time.Hour), httpclient.WithBackoffStart(time.Minute))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://example.test/", nil)
		begin := time.Now()
		resp, err := tr.RoundTrip(req)
		assert.Nil(t, resp)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, time.Second, time.Since(begin))
	})
}

// stallBody yields its prefix, then blocks until closed.
type stallBody struct {
	prefix *strings.Reader
	closed chan struct{}
	once   sync.Once
}

func newStallBody(prefix string) *stallBody {
	return &stallBody{prefix: strings.NewReader(prefix), closed: make(chan struct{})}
}

func (s *stallBody) Read(p []byte) (int, error) {
	if s.prefix.Len() > 0 {
		return s.prefix.Read(p)
	}
	<-s.closed
	return 0, errors.New("closed")
}

func (s *stallBody) Close() error { s.once.Do(func() { close(s.closed) }); return nil }

// okxLike is a ThrottledBody hook in OKX's manner: code 50011 in a 200.
func okxLike(status int, _ http.Header, body []byte) bool {
	return status == 429 || (status == 200 && bytes.Contains(body, []byte(`"code":"50011"`)))
}

// RoundTrip returns when the headers arrive even when a ThrottledBody hook
// is set and the body stalls: the hook sees only what the caller's reads
// went through, and the pause it calls for comes before the release, at
// the first of PeekSize bytes, EOF and Close. (On the old code the
// Throttled hook read the body inside RoundTrip: okx.IsRateLimited held
// RoundTrip for as long as the body stalled.)
func TestBodyThrottleDetectedAsCallerReads(t *testing.T) {
	run := func(name string, f func(t *testing.T)) {
		t.Run(name, func(t *testing.T) { synctest.Test(t, f) })
	}
	{
		run("closed after part of the body", func(t *testing.T) {
			lim := &orderLimiter{}
			body := newStallBody(`{"code":"50011","msg":"Rate limit reached"}`)
			tr := httpclient.New(lim, httpclient.WithBase(respond(200, nil, body)), httpclient.WithThrottledBody(okxLike))
			begin := time.Now()
			resp, err := tr.RoundTrip(newRequest(t, http.MethodGet, "http://example.test/", nil))
			require.NoError(t, err)
			assert.Zero(t, time.Since(begin), "RoundTrip waited for the body")
			assert.Equal(t, []string{"acquire 1"}, lim.events)
			buf := make([]byte, 64)
			n, err := resp.Body.Read(buf)
			require.NoError(t, err)
			assert.Equal(t, 43, n)
			assert.Equal(t, []string{"acquire 1"}, lim.events, "under PeekSize, no EOF, no Close: no decision yet")
			require.NoError(t, resp.Body.Close())
			require.Len(t, lim.events, 3)
			assert.True(t, strings.HasPrefix(lim.events[1], "pause "), lim.events)
			assert.Equal(t, "release 1", lim.events[2])
		})
		run("PeekSize bytes decide before EOF", func(t *testing.T) {
			lim := &orderLimiter{}
			body := newStallBody(`{"code":"50011","data":"` + strings.Repeat("x", httpclient.PeekSize) + `"}`)
			tr := httpclient.New(lim, httpclient.WithBase(respond(200, nil, body)), httpclient.WithThrottledBody(okxLike))
			resp, err := tr.RoundTrip(newRequest(t, http.MethodGet, "http://example.test/", nil))
			require.NoError(t, err)
			_, err = io.ReadFull(resp.Body, make([]byte, httpclient.PeekSize+10))
			require.NoError(t, err)
			require.Len(t, lim.events, 2, "paused at PeekSize bytes, units still held")
			assert.True(t, strings.HasPrefix(lim.events[1], "pause "), lim.events)
			require.NoError(t, resp.Body.Close())
			assert.Equal(t, "release 1", lim.events[2])
		})
		run("closed unread: the empty prefix says nothing", func(t *testing.T) {
			lim := &orderLimiter{}
			tr := httpclient.New(lim, httpclient.WithBase(respond(200, nil, newStallBody(`{"code":"50011"}`))), httpclient.WithThrottledBody(okxLike))
			resp, err := tr.RoundTrip(newRequest(t, http.MethodGet, "http://example.test/", nil))
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			assert.Equal(t, []string{"acquire 1", "release 1"}, lim.events)
		})
		run("read to EOF", func(t *testing.T) {
			lim := &orderLimiter{}
			tr := httpclient.New(lim, httpclient.WithBase(respond(200, nil, io.NopCloser(strings.NewReader(`{"code":"50011"}`)))), httpclient.WithThrottledBody(okxLike))
			resp, err := tr.RoundTrip(newRequest(t, http.MethodGet, "http://example.test/", nil))
			require.NoError(t, err)
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, `{"code":"50011"}`, string(b), "the caller reads the whole body")
			require.Len(t, lim.events, 3)
			assert.Equal(t, "release 1", lim.events[2])
			require.NoError(t, resp.Body.Close())
			assert.Len(t, lim.events, 3, "released once")
		})
	}
}

// The hook never gets more than PeekSize bytes, and gets nil at the headers.
func TestThrottledBodyHookArguments(t *testing.T) {
	var mu sync.Mutex
	var got [][]byte
	tr := httpclient.New(&fakeLimiter{}, httpclient.WithBase(respond(200, http.Header{"X-A": {"1"}}, io.NopCloser(strings.NewReader(strings.Repeat("y", 1<<20))))), httpclient.WithThrottledBody(func(status int, h http.Header, body []byte) bool {
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, 200, status)
		assert.Equal(t, "1", h.Get("X-A"))
		got = append(got, body)
		return false
	}))
	roundTrip(t, tr)
	require.Len(t, got, 2)
	assert.Nil(t, got[0])
	assert.Len(t, got[1], httpclient.PeekSize)
}

// Read and Close racing on a watched body release exactly once, after the
// check; a panicking hook still releases.
func TestWatchedBodyReleasedOnce(t *testing.T) {
	for range 50 {
		lim := &fakeLimiter{}
		tr := httpclient.New(lim, httpclient.WithBase(respond(200, nil, io.NopCloser(strings.NewReader(strings.Repeat("z", 3000))))), httpclient.WithThrottledBody(func(int, http.Header, []byte) bool { return true }))
		resp, err := tr.RoundTrip(newRequest(t, http.MethodGet, "http://example.test/", nil))
		require.NoError(t, err)
		var wg sync.WaitGroup
		wg.Go(func() { _, _ = io.Copy(io.Discard, resp.Body) })
		wg.Go(func() { _ = resp.Body.Close() })
		wg.Wait()
		_ = resp.Body.Close()
		held, _, rel, pauses := lim.state()
		assert.Equal(t, int64(0), held)
		assert.Equal(t, 1, rel)
		assert.Len(t, pauses, 1)
	}

	lim := &fakeLimiter{}
	tr := httpclient.New(lim, httpclient.WithBase(respond(200, nil, io.NopCloser(strings.NewReader("x")))), httpclient.WithThrottledBody(func(_ int, _ http.Header, body []byte) bool {
		if body != nil {
			panic("hook")
		}
		return false
	}))
	resp, err := tr.RoundTrip(newRequest(t, http.MethodGet, "http://example.test/", nil))
	require.NoError(t, err)
	assert.Panics(t, func() { _ = resp.Body.Close() })
	held, _, rel, _ := lim.state()
	assert.Equal(t, int64(0), held)
	assert.Equal(t, 1, rel)
}

// Through NewPool, a 429 pauses the marked rule's key as soon as the
// headers arrive (Throttle.Body nil), and the body, once read, lets
// ThrottleTargets pause the key it names too, before the release.
func TestPoolBodyRefinesTargets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		table := instTable()
		var seen []string
		table.ThrottleTargets = func(th clientpool.Throttle, cs []clientpool.Charge) []clientpool.Charge {
			seen = append(seen, fmt.Sprintf("%d %q", th.Status, th.Body))
			if !bytes.Contains(th.Body, []byte("account")) {
				return nil
			}
			for _, c := range cs {
				if c.Rule == "account" {
					return []clientpool.Charge{c}
				}
			}
			return nil
		}
		pool := mustPool(t, table)
		body := newStallBody(`{"code":"account"}`)
		tr := httpclient.NewPool(pool, httpclient.WithBase(respond(429, http.Header{"Retry-After": {"4"}}, body)))
		req := newRequest(t, http.MethodGet, "http://x/o?instId=BTC", nil)
		begin := time.Now()
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		assert.Zero(t, time.Since(begin))
		paused := func() map[string]bool {
			m := map[string]bool{}
			for _, ks := range pool.Snapshot() {
				m[ks.Rule] = !ks.PausedUntil.IsZero()
			}
			return m
		}
		assert.Equal(t, map[string]bool{"inst": true, "account": false}, paused(), "at the headers")
		_, _ = resp.Body.Read(make([]byte, 100))
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, map[string]bool{"inst": true, "account": true}, paused(), "after the body")
		assert.Equal(t, []string{`429 ""`, `429 "{\"code\":\"account\"}"`}, seen)
	})
}

// handlerLimiter records the ThrottleHandler calls it gets.
type handlerLimiter struct {
	fakeLimiter
	calls []string
}

func (h *handlerLimiter) Throttled(resp *http.Response, body []byte, ra time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, fmt.Sprintf("%d %v %q held=%d ra=%v", resp.StatusCode, body == nil, body, h.held, ra))
}

// A ThrottleHandler is told at the headers (body nil, Retry-After capped)
// and again with the body's first bytes when there are some, every time
// while the units are held; a body closed unread is not reported twice.
func TestThrottleHandlerCalls(t *testing.T) {
	for _, read := range []bool{true, false} {
		h := &handlerLimiter{}
		tr := httpclient.New(h, httpclient.WithBase(respond(429, http.Header{"Retry-After": {"99999"}}, io.NopCloser(strings.NewReader(`{"code":-1015}`)))))
		resp, err := tr.RoundTrip(newRequest(t, http.MethodGet, "http://example.test/", nil))
		require.NoError(t, err)
		if read {
			_, _ = io.ReadAll(resp.Body)
		}
		require.NoError(t, resp.Body.Close())
		want := []string{`429 true "" held=1 ra=5m0s`} // capped at DefaultMaxRetryAfter
		if read {
			want = append(want, `429 false "{\"code\":-1015}" held=1 ra=5m0s`)
		}
		assert.Equal(t, want, h.calls, "read=%v", read)
		_, _, rel, pauses := h.state()
		assert.Equal(t, 1, rel)
		assert.Empty(t, pauses, "a handler gets no PauseFor")
	}
}
