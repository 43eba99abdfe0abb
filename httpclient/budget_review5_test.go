package httpclient_test

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/ratesem/ratesem/httpclient"
)

// WithRetryBudget and WithMaxRetries in either order: the budget is built
// from the last WithRetryBudget once all options are applied; a later
// WithMaxRetries(0) turns retries, and the budget, off; the zero Transport
// has none.
func TestRetryBudgetOptionOrder(t *testing.T) {
	cases := []struct {
		name string
		opts []httpclient.Option
		want int64 // retries of 20 requests always throttled
	}{
		{"budget then retries", []httpclient.Option{httpclient.WithRetryBudget(3, 0.1), httpclient.WithMaxRetries(5)}, 1},
		{"retries then budget", []httpclient.Option{httpclient.WithMaxRetries(5), httpclient.WithRetryBudget(3, 0.1)}, 1},
		{"a later budget wins", []httpclient.Option{httpclient.WithRetryBudget(3, 0.1), httpclient.WithMaxRetries(5), httpclient.WithRetryBudget(-1, 0)}, 100},
		{"retries off later", []httpclient.Option{httpclient.WithMaxRetries(5), httpclient.WithRetryBudget(3, 0.1), httpclient.WithMaxRetries(0)}, 0},
	}
	for _, c := range cases {
		srv := &budgetServer{}
		tr := httpclient.New(nil, append([]httpclient.Option{httpclient.WithBase(srv), httpclient.WithClock(instantClock{})}, c.opts...)...)
		sendAll(t, tr, 20, 1, plainURL)
		if got := srv.sends.Load() - 20; got != c.want {
			t.Errorf("%s: %d retries, want %d", c.name, got, c.want)
		}
	}
	if keys, tok, _ := httpclient.BudgetKeys(&httpclient.Transport{}); keys != -1 || tok != -1 {
		t.Errorf("the zero Transport has a budget (%d keys, %d tokens)", keys, tok)
	}
}

// With a WithThrottledBody hook the body can still show a throttle, so a
// response whose headers do not earns only when its body check runs (512
// bytes read, io.EOF or Close): a response never read nor closed leaves
// the budget as it was. Without a hook, or without a limiter (no body
// check then), it earns when the headers arrive.
func TestRetryBudgetUnclosedResponses(t *testing.T) {
	for _, c := range []struct{ hook, limited bool }{{false, true}, {true, true}, {true, false}} {
		hook := c.hook
		t.Run(fmt.Sprintf("hook=%v/limited=%v", c.hook, c.limited), func(t *testing.T) {
			srv := &budgetServer{throttle: func(i int64, _ *http.Request) bool { return i < 3 }}
			opts := []httpclient.Option{httpclient.WithBase(srv), httpclient.WithMaxRetries(1), httpclient.WithClock(instantClock{})}
			if hook {
				opts = append(opts, httpclient.WithThrottledBody(func(status int, _ http.Header, body []byte) bool {
					return status == http.StatusTooManyRequests || strings.Contains(string(body), "50011")
				}))
			}
			var l httpclient.Limiter
			if c.limited {
				l = &fakeLimiter{}
			}
			tr := httpclient.New(l, opts...)
			sendAll(t, tr, 2, 1, plainURL) // 3 throttles (one a retry), 1 success: 7100
			tokens := func() int64 { _, tok, _ := httpclient.BudgetKeys(tr); return tok }
			if got := tokens(); got != 7100 {
				t.Fatalf("%d thousandths, want 7100", got)
			}
			var open []*http.Response
			for range 5 {
				req, _ := http.NewRequest(http.MethodGet, "http://api.test/x", nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				open = append(open, resp)
			}
			want := int64(7600)
			if hook && c.limited {
				want = 7100
			}
			if got := tokens(); got != want {
				t.Errorf("5 responses 200 not read nor closed: %d thousandths, want %d", got, want)
			}
			for _, resp := range open {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			if got := tokens(); got != 7600 {
				t.Errorf("5 responses 200 read and closed: %d thousandths, want 7600", got)
			}
		})
	}
}

// Only responses earn tokens back, never time (gRPC's retryThrottling has
// no clock either): a key's budget left below full stays below full, and
// keeps its place among the 1024, until that key's own responses earn it
// back. Once the places are taken by keys never heard from again, every
// new key shares the overflow budget.
func TestRetryBudgetStaleKeysKeepTheirPlace(t *testing.T) {
	srv := &budgetServer{throttle: func(_ int64, req *http.Request) bool {
		return strings.HasPrefix(req.URL.Query().Get("instId"), "gone")
	}}
	tr := httpclient.NewPool(mustPool(t, keyedTable(false)), httpclient.WithBase(srv), httpclient.WithMaxRetries(10),
		httpclient.WithClock(instantClock{}), httpclient.WithMaxRetryAfter(1))
	httpclient.SetBudgetMaxKeys(tr, 4)
	for i := range 4 {
		sendAll(t, tr, 1, 1, instURL(fmt.Sprintf("gone%d", i))) // 4 retries, 6 tokens left: kept
	}
	sendAll(t, tr, 1000, 8, func(i int) string { return fmt.Sprintf("http://api.test/o?instId=live%d", i%50) })
	if keys, _, _ := httpclient.BudgetKeys(tr); keys != 4 {
		t.Errorf("%d key budgets after 1000 successes of other keys, want the 4 stale ones", keys)
	}
	before := srv.sends.Load()
	sendAll(t, tr, 30, 1, instURL("goneX")) // a new failing key: the overflow's budget
	sendAll(t, tr, 1, 1, instURL("gone-new"))
	if got := srv.sends.Load() - before - 31; got != 4 {
		t.Errorf("two new failing keys got %d retries in all, want 4 (one shared overflow budget)", got)
	}
}

// The thousandths never overflow nor pass maxTokens: with maxTokens 1000
// (1,000,000 thousandths) and ratios up to +Inf, a budget drained to 0
// is full again after one success (999.9996 rounds to 1000: full), and
// 1000 more successes leave it exactly full; 999.999 leaves it 1 short.
func TestRetryBudgetHugeRatio(t *testing.T) {
	for _, c := range []struct {
		ratio float64
		want  int64
	}{{math.Inf(1), 1_000_000}, {1e308, 1_000_000}, {999.9996, 1_000_000}, {999.999, 999_999}, {1000, 1_000_000}} {
		s := newBudgetSteps(t, httpclient.WithRetryBudget(1000, c.ratio), httpclient.WithMaxRetries(1))
		s.run(1000, true) // 2000 throttles: drained to 0
		if _, tok, _ := httpclient.BudgetKeys(s.tr.(*httpclient.Transport)); tok != 0 {
			t.Fatalf("ratio %v: %d thousandths after draining, want 0", c.ratio, tok)
		}
		s.run(1, false)
		if _, tok, _ := httpclient.BudgetKeys(s.tr.(*httpclient.Transport)); tok != c.want {
			t.Errorf("ratio %v: %d thousandths after one success, want %d", c.ratio, tok, c.want)
		}
		s.run(1000, false)
		if _, tok, _ := httpclient.BudgetKeys(s.tr.(*httpclient.Transport)); tok != 1_000_000 {
			t.Errorf("ratio %v: %d thousandths after 1001 successes, want 1000000", c.ratio, tok)
		}
	}
}
