package httpclient_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratesem/ratesem/httpclient"
)

func TestTransport_implements(t *testing.T) {
	var _ http.RoundTripper = (*httpclient.Transport)(nil)
	var _ interface{ CloseIdleConnections() } = (*httpclient.Transport)(nil)
}

func TestSlotHeldUntilClose(t *testing.T) {
	lim := &fakeLimiter{}
	orig := newRecordingBody("hello, world")
	tr := httpclient.New(lim, httpclient.WithBase(respond(http.StatusOK, nil, orig)))

	resp, err := tr.RoundTrip(newRequest(t, http.MethodGet, "http://example.test/", nil))
	require.NoError(t, err)
	require.NotNil(t, resp)

	held, acq, rel, _ := lim.state()
	assert.Equal(t, int64(1), held, "held after RoundTrip")
	assert.Equal(t, 1, acq)
	assert.Equal(t, 0, rel, "released before the body was closed")

	// A partial read does not release.
	buf := make([]byte, 5)
	_, err = io.ReadFull(resp.Body, buf)
	require.NoError(t, err)
	assert.Equal(t, "hello", string(buf))
	held, _, rel, _ = lim.state()
	assert.Equal(t, int64(1), held, "held after partial read")
	assert.Equal(t, 0, rel)

	require.NoError(t, resp.Body.Close())
	held, _, rel, _ = lim.state()
	assert.Equal(t, int64(0), held, "held after Close")
	assert.Equal(t, 1, rel)
	assert.Equal(t, 1, orig.closes(), "original body closes")

	// A second Close does not release again (fakeLimiter would panic).
	_ = resp.Body.Close()
	_, _, rel, _ = lim.state()
	assert.Equal(t, 1, rel, "releases after second Close")
}

func TestSlotReleasedAtEOF(t *testing.T) {
	lim := &fakeLimiter{}
	orig := newRecordingBody("payload")
	tr := httpclient.New(lim, httpclient.WithBase(respond(http.StatusOK, nil, orig)))

	resp, err := tr.RoundTrip(newRequest(t, http.MethodGet, "http://example.test/", nil))
	require.NoError(t, err)

	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, "payload", string(b))

	held, _, rel, _ := lim.state()
	assert.Equal(t, int64(0), held, "held after reading to EOF")
	assert.Equal(t, 1, rel)
	assert.Equal(t, 0, orig.closes(), "EOF must not close the original body")

	// Reading again at EOF and closing after EOF release nothing more.
	n, err := resp.Body.Read(make([]byte, 1))
	assert.Equal(t, 0, n)
	assert.Equal(t, io.EOF, err)
	require.NoError(t, resp.Body.Close())
	_, _, rel, _ = lim.state()
	assert.Equal(t, 1, rel, "releases after EOF, EOF and Close")
	assert.Equal(t, 1, orig.closes(), "Close after EOF still closes the original body")
}

// TestConcurrentCloseAndRead races many Close and Read calls on one body;
// run with -race. fakeLimiter panics if the weight is released twice. The
// rounds are many because a check-then-set guard (instead of one
// compare-and-swap) double-releases only when two goroutines interleave in a
// window of a few instructions; 2000 rounds catch that in most runs.
func TestConcurrentCloseAndRead(t *testing.T) {
	for round := 0; round < 2000; round++ {
		lim := &fakeLimiter{}
		tr := httpclient.NewSelect(func(*http.Request) (httpclient.Limiter, int64) { return lim, 3 }, httpclient.WithBase(respond(http.StatusOK, nil, newRecordingBody(strings.Repeat("x", 64)))))
		resp, err := tr.RoundTrip(newRequest(t, http.MethodGet, "http://example.test/", nil))
		require.NoError(t, err)

		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := 0; i < 8; i++ {
			wg.Add(2)
			go func() {
				defer wg.Done()
				<-start
				_ = resp.Body.Close()
			}()
			go func() {
				defer wg.Done()
				<-start
				_, _ = io.Copy(io.Discard, resp.Body)
			}()
		}
		close(start)
		wg.Wait()

		held, acq, rel, _ := lim.state()
		require.Equal(t, int64(0), held, "round %d: held", round)
		require.Equal(t, 1, acq, "round %d: acquires", round)
		require.Equal(t, 1, rel, "round %d: releases", round)
	}
}

func TestWeightFromSelector(t *testing.T) {
	lim := &fakeLimiter{}
	var gotPath string
	tr := httpclient.NewSelect(func(req *http.Request) (httpclient.Limiter, int64) {
		gotPath = req.URL.Path
		return lim, 5
	}, httpclient.WithBase(respond(http.StatusOK, nil, newRecordingBody(""))))

	resp, err := tr.RoundTrip(newRequest(t, http.MethodGet, "http://example.test/api/v3/depth", nil))
	require.NoError(t, err)
	assert.Equal(t, "/api/v3/depth", gotPath)
	held, _, _, _ := lim.state()
	assert.Equal(t, int64(5), held)
	require.NoError(t, resp.Body.Close())

	lim.mu.Lock()
	defer lim.mu.Unlock()
	assert.Equal(t, []int64{5}, lim.acquires)
	assert.Equal(t, []int64{5}, lim.releases)
}

func TestNilLimiterNotLimited(t *testing.T) {
	tr := httpclient.New(nil, httpclient.WithBase(respond(http.StatusOK, nil, newRecordingBody("ok"))))
	resp, err := tr.RoundTrip(newRequest(t, http.MethodGet, "http://example.test/", nil))
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, "ok", string(b))
	require.NoError(t, resp.Body.Close())
}

func TestReleasedOnceOnBaseError(t *testing.T) {
	lim := &fakeLimiter{}
	errBase := errors.New("connection refused")
	var heldInBase int64
	tr := httpclient.New(lim, httpclient.WithBase(roundTripFunc(func(req *http.Request) (*http.Response, error) {
		heldInBase, _, _, _ = lim.state()
		return nil, errBase
	})))

	resp, err := tr.RoundTrip(newRequest(t, http.MethodGet, "http://example.test/", nil))
	assert.Nil(t, resp)
	require.ErrorIs(t, err, errBase)
	assert.Equal(t, int64(1), heldInBase, "weight must be held while Base runs")
	held, acq, rel, _ := lim.state()
	assert.Equal(t, int64(0), held)
	assert.Equal(t, 1, acq)
	assert.Equal(t, 1, rel)
}

// A faulty Base that returns both a response and an error: the caller gets
// only the error, the stray body is closed, and any weight released once.
// Checked with a limiter and without one (nil Limiter skips limiting but not
// the RoundTripper contract).
func TestBaseResponseAndError(t *testing.T) {
	for _, limited := range []bool{true, false} {
		t.Run(fmt.Sprintf("limited=%v", limited), func(t *testing.T) {
			lim := &fakeLimiter{}
			stray := newRecordingBody("stray")
			errBase := errors.New("boom")
			tr := httpclient.NewSelect(selectIf(limited, lim), httpclient.WithBase(roundTripFunc(func(req *http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: http.StatusOK, Body: stray, Header: http.Header{}}, errBase
			})))

			resp, err := tr.RoundTrip(newRequest(t, http.MethodGet, "http://example.test/", nil))
			assert.Nil(t, resp, "response returned together with an error")
			require.ErrorIs(t, err, errBase)
			assert.Equal(t, 1, stray.closes())
			held, acq, rel, _ := lim.state()
			assert.Equal(t, int64(0), held)
			assert.Equal(t, acq, rel, "releases")
		})
	}
}

// A faulty Base that returns nil, nil: the caller gets an error, never nil, nil.
func TestBaseNilNil(t *testing.T) {
	for _, limited := range []bool{true, false} {
		t.Run(fmt.Sprintf("limited=%v", limited), func(t *testing.T) {
			lim := &fakeLimiter{}
			tr := httpclient.NewSelect(selectIf(limited, lim), httpclient.WithBase(roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, nil })))

			resp, err := tr.RoundTrip(newRequest(t, http.MethodGet, "http://example.test/", nil))
			assert.Nil(t, resp)
			require.Error(t, err)
			assert.True(t, strings.HasPrefix(err.Error(), "ratesem: "), "error %q", err)
			held, acq, rel, _ := lim.state()
			assert.Equal(t, int64(0), held)
			assert.Equal(t, acq, rel, "releases")
		})
	}
}

// selectIf returns a Selector that charges weight 1 on lim, or one that
// returns a nil Limiter when limited is false.
func selectIf(limited bool, lim httpclient.Limiter) httpclient.Selector {
	return func(*http.Request) (httpclient.Limiter, int64) {
		if !limited {
			return nil, 0
		}
		return lim, 1
	}
}

func TestNilBodyReleasedAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		body io.ReadCloser
	}{
		{"nil", nil},
		{"NoBody", http.NoBody},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := &fakeLimiter{}
			tr := httpclient.New(lim, httpclient.WithBase(respond(http.StatusNoContent, nil, tc.body)))
			unlimited := httpclient.New(nil, httpclient.WithBase(respond(http.StatusNoContent, nil, tc.body)))
			resp, err := unlimited.RoundTrip(newRequest(t, http.MethodGet, "http://example.test/", nil))
			require.NoError(t, err)
			assert.Equal(t, http.NoBody, resp.Body, "unlimited: Body must never be nil")

			resp, err = tr.RoundTrip(newRequest(t, http.MethodGet, "http://example.test/", nil))
			require.NoError(t, err)
			require.NotNil(t, resp.Body, "Body must never be nil")
			assert.Equal(t, http.NoBody, resp.Body)
			held, _, rel, _ := lim.state()
			assert.Equal(t, int64(0), held, "released at once")
			assert.Equal(t, 1, rel)

			require.NoError(t, resp.Body.Close())
			_, _, rel, _ = lim.state()
			assert.Equal(t, 1, rel, "Close of NoBody must not release again")
		})
	}
}

func TestAcquireErrorReturned(t *testing.T) {
	errLimiter := errors.New("limiter closed")
	lim := &fakeLimiter{acquireErr: errLimiter}
	called := false
	tr := httpclient.New(lim, httpclient.WithBase(roundTripFunc(func(*http.Request) (*http.Response, error) {
		called = true
		return nil, errors.New("unreachable")
	})))
	reqBody := newRecordingBody("order=1")

	resp, err := tr.RoundTrip(newRequest(t, http.MethodPost, "http://example.test/order", reqBody))
	assert.Nil(t, resp)
	require.ErrorIs(t, err, errLimiter)
	assert.False(t, called, "Base called although Acquire failed")
	assert.Equal(t, 1, reqBody.closes(), "request body closed on early return")
	_, acq, rel, _ := lim.state()
	assert.Equal(t, 0, acq)
	assert.Equal(t, 0, rel, "nothing to release after a failed Acquire")
}

// When the context ends the wait, the request body is closed, Base is not
// called, nothing is released and the error satisfies errors.Is with the
// context's error.
func TestContextEndsWait(t *testing.T) {
	base := roundTripFunc(func(*http.Request) (*http.Response, error) {
		t.Error("Base called although Acquire failed")
		return nil, errors.New("unreachable")
	})

	t.Run("Canceled", func(t *testing.T) {
		lim := &blockingLimiter{entered: make(chan struct{})}
		tr := httpclient.New(lim, httpclient.WithBase(base))
		ctx, cancel := context.WithCancel(context.Background())
		reqBody := newRecordingBody("x")
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://example.test/", reqBody)
		require.NoError(t, err)

		done := make(chan struct{})
		var resp *http.Response
		go func() {
			defer close(done)
			resp, err = tr.RoundTrip(req)
		}()
		<-lim.entered // RoundTrip is blocked in Acquire
		cancel()
		<-done

		assert.Nil(t, resp)
		require.ErrorIs(t, err, context.Canceled)
		assert.True(t, strings.HasPrefix(err.Error(), "ratesem: "), "error %q", err)
		assert.Equal(t, 1, reqBody.closes(), "request body closed on early return")
	})

	t.Run("DeadlineExceeded", func(t *testing.T) {
		tr := httpclient.New(&blockingLimiter{}, httpclient.WithBase(base))
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		reqBody := newRecordingBody("x")
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://example.test/", reqBody)
		require.NoError(t, err)

		resp, err := tr.RoundTrip(req)
		assert.Nil(t, resp)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 1, reqBody.closes())
	})

	t.Run("AlreadyCanceled", func(t *testing.T) {
		lim := &fakeLimiter{}
		tr := httpclient.New(lim, httpclient.WithBase(base))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		reqBody := newRecordingBody("x")
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://example.test/", reqBody)
		require.NoError(t, err)

		resp, err := tr.RoundTrip(req)
		assert.Nil(t, resp)
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, 1, reqBody.closes())
		_, acq, rel, _ := lim.state()
		assert.Equal(t, 0, acq)
		assert.Equal(t, 0, rel)
	})
}

func TestNegativeWeight(t *testing.T) {
	lim := &fakeLimiter{}
	tr := httpclient.NewSelect(func(*http.Request) (httpclient.Limiter, int64) { return lim, -1 }, httpclient.WithBase(roundTripFunc(func(*http.Request) (*http.Response, error) {
		t.Error("Base called with a negative weight")
		return nil, errors.New("unreachable")
	})))
	reqBody := newRecordingBody("x")

	resp, err := tr.RoundTrip(newRequest(t, http.MethodPost, "http://user:secret@example.test/", reqBody))
	assert.Nil(t, resp)
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "ratesem: "), "error %q", err)
	assert.NotContains(t, err.Error(), "secret", "URL password leaked into the error")
	assert.Equal(t, 1, reqBody.closes())
	_, acq, rel, _ := lim.state()
	assert.Equal(t, 0, acq)
	assert.Equal(t, 0, rel)
}

// The zero Transport has no Selector: RoundTrip sends nothing (the default
// base would reach the network) and closes the request's body.
func TestNilSelect(t *testing.T) {
	tr := &httpclient.Transport{}
	reqBody := newRecordingBody("x")
	resp, err := tr.RoundTrip(newRequest(t, http.MethodPost, "http://example.test/", reqBody))
	assert.Nil(t, resp)
	require.Error(t, err)
	assert.Equal(t, 1, reqBody.closes())

	assert.PanicsWithValue(t, "ratesem: NewSelect with nil Selector", func() {
		httpclient.NewSelect(nil)
	})
}

// The caller's request must reach Base as is (same pointer, nothing changed)
// and be unchanged afterwards.
func TestRequestNotModified(t *testing.T) {
	lim := &fakeLimiter{}
	req := newRequest(t, http.MethodPost, "http://example.test/api/v5/trade/order?instId=BTC-USDT",
		strings.NewReader(`{"sz":"1"}`))
	req.Header.Set("OK-ACCESS-KEY", "key")
	req.Header.Add("X-Multi", "a")
	req.Header.Add("X-Multi", "b")

	wantMethod := req.Method
	wantURL := req.URL.String()
	wantHeader := req.Header.Clone()
	wantHost := req.Host
	wantCtx := req.Context()
	wantContentLength := req.ContentLength

	tr := httpclient.New(lim, httpclient.WithBase(roundTripFunc(func(got *http.Request) (*http.Response, error) {
		assert.Same(t, req, got, "Base must get the caller's request")
		assert.Equal(t, wantMethod, got.Method)
		assert.Equal(t, wantURL, got.URL.String())
		assert.Equal(t, wantHeader, got.Header)
		b, err := io.ReadAll(got.Body)
		assert.NoError(t, err)
		assert.Equal(t, `{"sz":"1"}`, string(b))
		return &http.Response{
			StatusCode: http.StatusTooManyRequests,
			Header:     http.Header{"Retry-After": {"1"}},
			Body:       newRecordingBody(""),
			Request:    got,
		}, nil
	})))

	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())

	assert.Equal(t, wantMethod, req.Method)
	assert.Equal(t, wantURL, req.URL.String())
	assert.Equal(t, wantHeader, req.Header)
	assert.Equal(t, wantHost, req.Host)
	assert.Equal(t, wantCtx, req.Context())
	assert.Equal(t, wantContentLength, req.ContentLength)
	assert.Same(t, req, resp.Request)
}

// fixedNow is the instant every Retry-After test measures from.
var fixedNow = time.Date(2025, time.March, 14, 15, 9, 26, 0, time.UTC)

// A usable Retry-After pauses for at least its delay (capped) plus a little
// jitter, never above the cap; a 429 or 418 without one (absent, 0, past,
// negative, garbage) pauses with backoff: the first throttle of a streak
// for 100..200 ms (internal/backoff's equal jitter of 200 ms). Other
// statuses do not pause.
func TestRetryAfterPauses(t *testing.T) {
	future := fixedNow.Add(90 * time.Second)
	const s = time.Second
	backoffLo, backoffHi := 100*time.Millisecond, 200*time.Millisecond
	maxD := httpclient.DefaultMaxRetryAfter
	tests := []struct {
		name       string
		status     int
		retryAfter []string // header values, nil for none
		max        time.Duration
		lo, hi     time.Duration // the one pause expected; 0, 0 for none
	}{
		{"429 seconds", http.StatusTooManyRequests, []string{"3"}, 0, 3 * s, 3*s + 350*time.Millisecond},
		{"418 seconds", http.StatusTeapot, []string{"120"}, 0, 120 * s, 132*s + 50*time.Millisecond},
		{"429 HTTP-date", http.StatusTooManyRequests, []string{future.Format(http.TimeFormat)}, 0, 90 * s, 99*s + 50*time.Millisecond},
		{"429 first value wins", http.StatusTooManyRequests, []string{"4", "60"}, 0, 4 * s, 4*s + 450*time.Millisecond},
		{"429 zero", http.StatusTooManyRequests, []string{"0"}, 0, backoffLo, backoffHi},
		{"429 past date", http.StatusTooManyRequests, []string{fixedNow.Add(-time.Hour).Format(http.TimeFormat)}, 0, backoffLo, backoffHi},
		{"429 invalid", http.StatusTooManyRequests, []string{"soon"}, 0, backoffLo, backoffHi},
		{"429 negative", http.StatusTooManyRequests, []string{"-5"}, 0, backoffLo, backoffHi},
		{"429 no header", http.StatusTooManyRequests, nil, 0, backoffLo, backoffHi},
		{"418 no header", http.StatusTeapot, nil, 0, backoffLo, backoffHi},
		{"429 no header, tiny cap", http.StatusTooManyRequests, nil, 10 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond},
		{"429 huge capped by default", http.StatusTooManyRequests, []string{"99999999999999999999"}, 0, maxD * 9 / 10, maxD},
		{"429 huge capped by MaxRetryAfter", http.StatusTooManyRequests, []string{"99999999999999999999"}, 30 * s, 27 * s, 30 * s},
		{"429 above MaxRetryAfter", http.StatusTooManyRequests, []string{"31"}, 30 * s, 27 * s, 30 * s},
		{"429 at MaxRetryAfter", http.StatusTooManyRequests, []string{"30"}, 30 * s, 27 * s, 30 * s},
		{"429 far date capped", http.StatusTooManyRequests, []string{fixedNow.AddDate(1, 0, 0).Format(http.TimeFormat)}, 0, maxD * 9 / 10, maxD},
		{"200 ignored", http.StatusOK, []string{"3"}, 0, 0, 0},
		{"503 ignored", http.StatusServiceUnavailable, []string{"3"}, 0, 0, 0},
		{"500 ignored", http.StatusInternalServerError, []string{"3"}, 0, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lim := &fakeLimiter{}
			h := http.Header{}
			for _, v := range tc.retryAfter {
				h.Add("Retry-After", v)
			}
			wantHeader := h.Clone()
			const body = `{"code":"50011","msg":"Too Many Requests"}`
			tr := httpclient.New(lim, httpclient.WithBase(respond(tc.status, h, newRecordingBody(body))), httpclient.WithMaxRetryAfter(tc.max), httpclient.WithClock(fixedClock{fixedNow}))

			resp, err := tr.RoundTrip(newRequest(t, http.MethodGet, "http://example.test/", nil))
			require.NoError(t, err, "status codes are not errors")

			_, _, _, pauses := lim.state()
			if tc.hi == 0 {
				assert.Empty(t, pauses)
			} else if assert.Len(t, pauses, 1) {
				assert.GreaterOrEqual(t, pauses[0], tc.lo)
				assert.LessOrEqual(t, pauses[0], tc.hi)
			}

			// The response comes back unchanged.
			assert.Equal(t, tc.status, resp.StatusCode)
			assert.Equal(t, wantHeader, resp.Header)
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, body, string(b))
			require.NoError(t, resp.Body.Close())
			held, _, rel, _ := lim.state()
			assert.Equal(t, int64(0), held)
			assert.Equal(t, 1, rel)
		})
	}
}

// The pause must be requested while the request's weight is still held, so
// no other request can start between the 429 and the pause. Checked on the
// no-body path, where the release happens inside RoundTrip.
func TestPauseBeforeRelease(t *testing.T) {
	lim := &orderLimiter{}
	tr := httpclient.New(lim, httpclient.WithBase(respond(http.StatusTooManyRequests, http.Header{"Retry-After": {"2"}}, nil)))
	resp, err := tr.RoundTrip(newRequest(t, http.MethodGet, "http://example.test/", nil))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Len(t, lim.events, 3)
	assert.Equal(t, "acquire 1", lim.events[0])
	assert.True(t, strings.HasPrefix(lim.events[1], "pause 2."), lim.events[1]) // 2 s and jitter
	assert.Equal(t, "release 1", lim.events[2])
}

type orderLimiter struct {
	mu     sync.Mutex
	events []string
}

func (o *orderLimiter) log(s string) { o.mu.Lock(); o.events = append(o.events, s); o.mu.Unlock() }
func (o *orderLimiter) Acquire(_ context.Context, n int64) error {
	o.log("acquire " + strconv.FormatInt(n, 10))
	return nil
}
func (o *orderLimiter) Release(n int64)          { o.log("release " + strconv.FormatInt(n, 10)) }
func (o *orderLimiter) PauseFor(d time.Duration) { o.log("pause " + d.String()) }

// A body that is also an io.Writer (a 101 Switching Protocols connection)
// must stay an io.ReadWriteCloser through the wrapper; a plain body must not
// gain a Write method.
func TestSwitchingProtocolsBodyWritable(t *testing.T) {
	lim := &fakeLimiter{}
	conn := &rwcBody{recordingBody: newRecordingBody("from server")}
	tr := httpclient.New(lim, httpclient.WithBase(respond(http.StatusSwitchingProtocols, http.Header{"Upgrade": {"websocket"}}, conn)))

	resp, err := tr.RoundTrip(newRequest(t, http.MethodGet, "http://example.test/ws", nil))
	require.NoError(t, err)
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	require.True(t, ok, "Body %T is not an io.ReadWriteCloser", resp.Body)

	_, err = rwc.Write([]byte("from client"))
	require.NoError(t, err)
	assert.Equal(t, "from client", conn.written.String())
	held, _, _, _ := lim.state()
	assert.Equal(t, int64(1), held, "held while the connection is open")

	require.NoError(t, rwc.Close())
	held, _, rel, _ := lim.state()
	assert.Equal(t, int64(0), held)
	assert.Equal(t, 1, rel)
	assert.Equal(t, 1, conn.closes())

	// Plain bodies are not writable through the wrapper.
	tr = httpclient.New(lim, httpclient.WithBase(respond(http.StatusOK, nil, newRecordingBody(""))))
	resp, err = tr.RoundTrip(newRequest(t, http.MethodGet, "http://example.test/", nil))
	require.NoError(t, err)
	_, ok = resp.Body.(io.Writer)
	assert.False(t, ok, "plain body %T became an io.Writer", resp.Body)
	require.NoError(t, resp.Body.Close())
}

type rwcBody struct {
	*recordingBody
	written strings.Builder
}

func (b *rwcBody) Write(p []byte) (int, error) { return b.written.Write(p) }

// If Base panics, the weight must not be lost for good.
func TestBasePanicReleases(t *testing.T) {
	lim := &fakeLimiter{}
	tr := httpclient.New(lim, httpclient.WithBase(roundTripFunc(func(*http.Request) (*http.Response, error) { panic("base exploded") })))
	assert.PanicsWithValue(t, "base exploded", func() {
		_, _ = tr.RoundTrip(newRequest(t, http.MethodGet, "http://example.test/", nil))
	})
	held, _, rel, _ := lim.state()
	assert.Equal(t, int64(0), held)
	assert.Equal(t, 1, rel)
}

type closeIdleBase struct {
	http.RoundTripper
	mu    sync.Mutex
	calls int
}

func (c *closeIdleBase) CloseIdleConnections() { c.mu.Lock(); c.calls++; c.mu.Unlock() }

func TestCloseIdleConnectionsForwarded(t *testing.T) {
	base := &closeIdleBase{RoundTripper: respond(http.StatusOK, nil, nil)}
	tr := httpclient.New(&fakeLimiter{}, httpclient.WithBase(base))
	tr.CloseIdleConnections()
	assert.Equal(t, 1, base.calls)

	// Through http.Client, as users call it.
	(&http.Client{Transport: tr}).CloseIdleConnections()
	assert.Equal(t, 2, base.calls)

	// A Base without the method is fine.
	httpclient.New(&fakeLimiter{}, httpclient.WithBase(respond(http.StatusOK, nil, nil))).CloseIdleConnections()
}

// Against a real server: a 429 with Retry-After pauses the limiter and comes
// back to the caller as a normal response, through http.Client.
func TestRealServer429(t *testing.T) {
	var hits sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Store(r.URL.Path, r.Header.Get("X-Test"))
		if r.URL.Path == "/limited" {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, "slow down")
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()

	lim := &fakeLimiter{}
	base := &http.Transport{}
	client := &http.Client{Transport: httpclient.New(lim, httpclient.WithBase(base))}
	defer client.CloseIdleConnections() // reaches base through Transport

	get := func(path string) (int, string, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("X-Test", path)
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, resp.Header.Get("Retry-After"), string(b)
	}

	status, ra, body := get("/limited")
	assert.Equal(t, http.StatusTooManyRequests, status)
	assert.Equal(t, "7", ra)
	assert.Equal(t, "slow down", body)
	_, _, _, pauses := lim.state()
	if assert.Len(t, pauses, 1) { // 7 s plus at most 750 ms of jitter
		assert.GreaterOrEqual(t, pauses[0], 7*time.Second)
		assert.LessOrEqual(t, pauses[0], 7750*time.Millisecond)
	}

	status, _, body = get("/fine")
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "ok", body)

	held, acq, rel, pauses := lim.state()
	assert.Equal(t, int64(0), held)
	assert.Equal(t, 2, acq)
	assert.Equal(t, 2, rel)
	assert.Len(t, pauses, 1, "200 must not pause")
	v, _ := hits.Load("/limited")
	assert.Equal(t, "/limited", v, "header reached the server")
}

// capLimiter admits at most capacity units at once (a channel semaphore).
type capLimiter struct{ slots chan struct{} }

func (c *capLimiter) Acquire(ctx context.Context, n int64) error {
	for i := int64(0); i < n; i++ {
		select {
		case c.slots <- struct{}{}:
		case <-ctx.Done():
			for ; i > 0; i-- {
				<-c.slots
			}
			return ctx.Err()
		}
	}
	return nil
}

func (c *capLimiter) Release(n int64) {
	for i := int64(0); i < n; i++ {
		select {
		case <-c.slots:
		default:
			panic("capLimiter: over-release")
		}
	}
}

func (*capLimiter) PauseFor(time.Duration) {}

// Many goroutines through one Transport against a real server: the server
// never sees more than the limiter's capacity in flight, counting each
// exchange until its body has been sent, and every slot comes back.
func TestConcurrentRequestsRespectCap(t *testing.T) {
	const capacity, workers, perWorker = 3, 12, 10
	var (
		mu          sync.Mutex
		inFlight    int
		maxInFlight int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inFlight++
		maxInFlight = max(maxInFlight, inFlight)
		mu.Unlock()
		// Headers first, then the body: the client's RoundTrip returns
		// before this handler finishes.
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, strings.Repeat("b", 1<<10))
		mu.Lock()
		inFlight--
		mu.Unlock()
	}))
	defer srv.Close()

	lim := &capLimiter{slots: make(chan struct{}, capacity)}
	client := &http.Client{Transport: httpclient.New(lim, httpclient.WithBase(&http.Transport{}))}
	defer client.CloseIdleConnections()

	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWorker; i++ {
				resp, err := client.Get(srv.URL)
				if !assert.NoError(t, err) {
					return
				}
				_, err = io.Copy(io.Discard, resp.Body)
				assert.NoError(t, err)
				assert.NoError(t, resp.Body.Close())
			}
		}()
	}
	wg.Wait()

	assert.LessOrEqual(t, maxInFlight, capacity)
	assert.Len(t, lim.slots, 0, "slots still held after all bodies closed")
}

// fixedClock is a ratesem.Clock stopped at t; After is the real timer.
type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time                         { return c.t }
func (c fixedClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
