package httpclient_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/window"
)

// instTable: 10 per second per instrument (query instId), throttles pause
// the instrument's key; 100 per second for the account.
func instTable() clientpool.Table {
	return clientpool.Table{
		Rules: []clientpool.Rule{
			{Name: "inst", Limit: window.Limit{N: 10, Per: time.Second}, PauseOnThrottle: true,
				Key: func(r *http.Request) (string, bool) { return r.URL.Query().Get("instId"), true }},
			{Name: "account", Limit: window.Limit{N: 100, Per: time.Second}},
		},
		Default: []clientpool.Cost{{Rule: "inst"}, {Rule: "account"}},
	}
}

func mustPool(t *testing.T, table clientpool.Table) *clientpool.Pool {
	t.Helper()
	p, err := clientpool.New(table)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func reply(req *http.Request, status int, h http.Header) *http.Response {
	if h == nil {
		h = http.Header{}
	}
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader("{}")), Request: req}
}

func get(t *testing.T, c *http.Client, url string) *http.Response {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// A 429 for one instrument pauses only that instrument's key: another
// instrument goes at once, the throttled one waits its Retry-After, spread
// by at most a tenth plus 50 ms (internal/backoff.Spread).
func TestPoolPauseByKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		first := true
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.URL.Query().Get("instId") == "BTC" && first {
				first = false
				return reply(req, http.StatusTooManyRequests, http.Header{"Retry-After": {"3"}}), nil
			}
			return reply(req, http.StatusOK, nil), nil
		})
		c := &http.Client{Transport: httpclient.NewPool(mustPool(t, instTable()), httpclient.WithBase(base))}
		begin := time.Now()
		if resp := get(t, c, "http://x/o?instId=BTC"); resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("status %d, want the 429", resp.StatusCode)
		}
		get(t, c, "http://x/o?instId=ETH")
		if d := time.Since(begin); d != 0 {
			t.Fatalf("ETH waited %v under BTC's 429", d)
		}
		get(t, c, "http://x/o?instId=BTC")
		if d := time.Since(begin); d < 3*time.Second || d > 3*time.Second+350*time.Millisecond {
			t.Fatalf("BTC went again after %v, want its Retry-After of 3s plus at most 350ms of spread", d)
		}
	})
}

// A throttle without Retry-After (OKX's code 50011 with HTTP 200, detected
// by a ThrottledBody hook) pauses the key with the first step of the
// backoff, [100ms, 200ms], not for its rule's whole window.
func TestPoolThrottledHookWithoutRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := 0
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			n++
			if n == 1 {
				r := reply(req, http.StatusOK, nil)
				r.Header.Set("X-Code", "50011")
				return r, nil
			}
			return reply(req, http.StatusOK, nil), nil
		})
		hook := func(_ int, h http.Header, _ []byte) bool { return h.Get("X-Code") == "50011" }
		c := &http.Client{Transport: httpclient.NewPool(mustPool(t, instTable()), httpclient.WithBase(base), httpclient.WithThrottledBody(hook))}
		begin := time.Now()
		get(t, c, "http://x/o?instId=BTC")
		get(t, c, "http://x/o?instId=BTC")
		// The upper bound leaves room for a loaded machine: the step itself
		// is at most 200 ms.
		if d := time.Since(begin); d < 100*time.Millisecond || d > 350*time.Millisecond {
			t.Fatalf("the throttled key went again after %v, want the first backoff step in [100ms, 200ms] (+ up to 150ms of scheduling)", d)
		}
	})
}

// Usage headers shrink the local budget: a foreign client has spent 8 of
// the 10 units of this minute, so the third request waits for the next.
func TestPoolUsageHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		table := clientpool.Table{
			Rules: []clientpool.Rule{{
				Name: "weight", Limit: window.Limit{N: 10, Per: time.Minute},
				Window: func(l window.Limit) window.Policy { return window.NewFixedWindow(l) },
				Usage:  clientpool.BinanceUsage("X-MBX-USED-WEIGHT-1M"),
			}},
			Default: []clientpool.Cost{{Rule: "weight", Units: 1}},
		}
		var mu sync.Mutex
		used := 8 // the foreign client's spend in this minute
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			mu.Lock()
			defer mu.Unlock()
			used++
			return reply(req, http.StatusOK, http.Header{"X-Mbx-Used-Weight-1m": {strconv.Itoa(used)}}), nil
		})
		c := &http.Client{Transport: httpclient.NewPool(mustPool(t, table), httpclient.WithBase(base))}
		// synctest starts at midnight UTC: a fresh minute window.
		begin := time.Now()
		get(t, c, "http://x/a") // server: 9
		get(t, c, "http://x/a") // server: 10 — the minute is spent
		get(t, c, "http://x/a")
		if d := time.Since(begin); d != time.Minute {
			t.Fatalf("third request went after %v; the server's count says the minute was spent", d)
		}
	})
}

// MaxRetries resends a throttled request with its body replayed after the
// pause, and the caller sees the final response; a body that cannot be
// replayed is not retried.
func TestPoolRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var bodies []string
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			b, _ := io.ReadAll(req.Body)
			bodies = append(bodies, string(b))
			if len(bodies) == 1 {
				return reply(req, http.StatusTooManyRequests, http.Header{"Retry-After": {"2"}}), nil
			}
			return reply(req, http.StatusOK, nil), nil
		})
		tr := httpclient.NewPool(mustPool(t, instTable()), httpclient.WithBase(base), httpclient.WithMaxRetries(2))
		c := &http.Client{Transport: tr}
		begin := time.Now()
		resp, err := c.Post("http://x/o?instId=BTC", "application/json", bytes.NewReader([]byte(`{"px":"1"}`)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || len(bodies) != 2 || bodies[1] != `{"px":"1"}` {
			t.Fatalf("status %d after %d sends with bodies %q; want 200 after 2 identical", resp.StatusCode, len(bodies), bodies)
		}
		if d := time.Since(begin); d < 2*time.Second || d > 2500*time.Millisecond {
			t.Fatalf("the retry went after %v, want the Retry-After of 2s plus at most 250ms of jitter (+ up to 250ms of scheduling)", d)
		}

		bodies = nil
		req, _ := http.NewRequest(http.MethodPost, "http://x/o?instId=ETH", io.NopCloser(strings.NewReader("x")))
		req.GetBody = nil // cannot be replayed
		resp, err = c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || len(bodies) != 1 {
			t.Fatalf("an unreplayable body was sent %d times (status %d)", len(bodies), resp.StatusCode)
		}
	})
}

// A request the table cannot classify is not sent; its body is closed and
// the error returned.
func TestPoolClassifyError(t *testing.T) {
	table := clientpool.Table{
		Rules: []clientpool.Rule{{Name: "r", Limit: window.Limit{N: 1, Per: time.Second}}},
		Endpoints: []clientpool.Endpoint{{Path: "/bad", Charges: func(*http.Request) ([]clientpool.Charge, error) {
			return nil, errors.New("cannot read the order")
		}}},
	}
	sent := false
	base := roundTripFunc(func(req *http.Request) (*http.Response, error) { sent = true; return reply(req, 200, nil), nil })
	body := &closeSpy{Reader: strings.NewReader("x")}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://x/bad", body)
	_, err := httpclient.NewPool(mustPool(t, table), httpclient.WithBase(base)).RoundTrip(req)
	if err == nil || !strings.Contains(err.Error(), "cannot read the order") || sent || !body.closed {
		t.Fatalf("err %v, sent %v, body closed %v; want the error, not sent, closed", err, sent, body.closed)
	}
}

type closeSpy struct {
	io.Reader
	closed bool
}

func (c *closeSpy) Close() error { c.closed = true; return nil }

// A Table's ThrottleTargets picks the rule a throttle is about: here a
// header names the account rule, so the account pauses and the
// instrument's own rule (marked PauseOnThrottle) does not.
func TestPoolThrottleTargets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		table := instTable()
		table.ThrottleTargets = func(th clientpool.Throttle, cs []clientpool.Charge) []clientpool.Charge {
			if th.Header.Get("X-Limit") != "account" {
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
		first := true
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if first {
				first = false
				return reply(req, http.StatusTooManyRequests, http.Header{"Retry-After": {"4"}, "X-Limit": {"account"}}), nil
			}
			return reply(req, http.StatusOK, nil), nil
		})
		c := &http.Client{Transport: httpclient.NewPool(pool, httpclient.WithBase(base))}
		get(t, c, "http://x/o?instId=BTC")
		for _, ks := range pool.Snapshot() {
			if paused := !ks.PausedUntil.IsZero(); paused != (ks.Rule == "account") {
				t.Fatalf("%s[%s] paused = %v; only the account should be", ks.Rule, ks.Key, paused)
			}
		}
	})
}
