package exchangetest_test

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratesem/ratesem/exchange/exchangetest"
)

const klines = "/api/v3/klines?symbol=BTCUSDT&interval=1m"

func order(key string) call {
	return bsigned(http.MethodPost, "/api/v3/order?symbol=BTCUSDT&side=BUY&type=MARKET", key)
}

// TestHostileHeaders: every set of AbsurdHeaders reaches the client
// intact over a real HTTP connection (10 KB values and repeated lines
// included), on every answer, while the server still counts the truth.
func TestHostileHeaders(t *testing.T) {
	for _, set := range exchangetest.AbsurdHeaders() {
		t.Run(set.Name, func(t *testing.T) {
			s := newBinance(t, exchangetest.BinanceConfig{InMemory: true, Hostile: exchangetest.Hostile{Header: set.Header}}, nil)
			for range 3 {
				resp, err := s.Client().Get(s.URL() + klines)
				require.NoError(t, err)
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				require.Equal(t, http.StatusOK, resp.StatusCode)
				for k, vs := range set.Header {
					assert.Equal(t, vs, resp.Header.Values(k), k)
				}
			}
			assert.Equal(t, int64(6), s.Used(exchangetest.RuleKey{Rule: exchangetest.BinanceRequestWeight, IP: "127.0.0.1"}),
				"the server counts the real weight whatever it says")
			st := s.Stats()
			assert.Equal(t, 3, st.Accepted)
			assert.Equal(t, 3, st.Hostile)
		})
	}
}

// TestHostileHeaderRemoval: a key with no values removes the server's own
// header; EpochReset sends a Unix time.
func TestHostileHeaderRemoval(t *testing.T) {
	clk := newFakeClock(binanceMinute)
	s := newBinance(t, exchangetest.BinanceConfig{Hostile: exchangetest.Hostile{
		Header:     http.Header{"x-mbx-used-weight-1m": nil},
		EpochReset: 90 * time.Second,
	}}, clk)
	rec := bget(klines).serve(s.Handler())
	assert.Equal(t, 200, rec.Code)
	assert.Empty(t, rec.Header().Values(exchangetest.BinanceUsedWeightHeader))
	assert.Equal(t, strconv.FormatInt(binanceMinute.Unix()+90, 10), rec.Header().Get("X-RateLimit-Reset"))
}

// TestHostileFraction: the share of altered answers follows Fraction, and
// the same Seed alters the same answers in the same order.
func TestHostileFraction(t *testing.T) {
	pattern := func(seed uint64) []bool {
		s := newBinance(t, exchangetest.BinanceConfig{Hostile: exchangetest.Hostile{
			Seed: seed, Fraction: 0.25, Header: http.Header{"X-Hostile": {"1"}},
		}}, newFakeClock(binanceMinute))
		var out []bool
		for range 1000 {
			rec := bget(klines).serve(s.Handler())
			out = append(out, rec.Header().Get("X-Hostile") == "1")
		}
		for i, e := range s.Log() {
			require.Equal(t, out[i], e.Hostile, "entry %d", i)
		}
		return out
	}
	a, b, c := pattern(7), pattern(7), pattern(8)
	assert.Equal(t, a, b, "same seed, same answers altered")
	assert.NotEqual(t, a, c, "another seed, other answers")
	n := 0
	for _, v := range a {
		if v {
			n++
		}
	}
	assert.InDelta(t, 250, n, 50, "about a quarter altered")
}

// TestHostileRetryAfter: a real 429 whose Retry-After was removed or
// replaced sets no ban deadline (the client was told nothing usable); an
// unaltered one still bans a client that comes back early.
func TestHostileRetryAfter(t *testing.T) {
	limits := map[string]int64{exchangetest.BinanceRequestWeight: 4}
	for _, ra := range []string{"", "soon", "-1", "0", "99999999999999999999999"} {
		t.Run("RetryAfter="+ra, func(t *testing.T) {
			clk := newFakeClock(binanceMinute)
			s := newBinance(t, exchangetest.BinanceConfig{Limits: limits, Hostile: exchangetest.Hostile{RetryAfter: []string{ra}}}, clk)
			h := s.Handler()
			for range 2 {
				bget(klines).serve(h)
			}
			rec := bget(klines).serve(h)
			require.Equal(t, http.StatusTooManyRequests, rec.Code)
			if ra == "" {
				assert.Empty(t, rec.Header().Values("Retry-After"))
			} else {
				assert.Equal(t, ra, rec.Header().Get("Retry-After"))
			}
			assert.Equal(t, http.StatusTooManyRequests, bget(klines).serve(h).Code, "no ban: the Retry-After was not the server's")
			_, bans := s.BannedUntil("127.0.0.1")
			assert.Zero(t, bans)
			log := s.Log()
			assert.Equal(t, exchangetest.BinanceRequestWeight, log[2].Rule, "a real rejection keeps its rule")
			assert.True(t, log[2].Hostile)
			assert.Zero(t, log[2].RetryAfter)
		})
	}
	t.Run("unaltered", func(t *testing.T) {
		s := newBinance(t, exchangetest.BinanceConfig{Limits: limits}, newFakeClock(binanceMinute))
		h := s.Handler()
		for range 3 {
			bget(klines).serve(h)
		}
		assert.Equal(t, exchangetest.StatusBanned, bget(klines).serve(h).Code)
	})
}

// TestHostileThrottleBinance: spurious 429s carry -1015 (orders, with the
// daily limit's message) or -1003 (weight), no Retry-After, count nothing,
// and are logged with HostileRule.
func TestHostileThrottleBinance(t *testing.T) {
	s := newBinance(t, exchangetest.BinanceConfig{Hostile: exchangetest.Hostile{Throttle: true}}, newFakeClock(binanceMinute))
	h := s.Handler()
	var body struct {
		Code int    `json:"code"`
		Msg  string `json:"msg"`
	}
	rec := order("k").serve(h)
	require.Equal(t, http.StatusTooManyRequests, rec.Code)
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	assert.Equal(t, -1015, body.Code)
	assert.Contains(t, body.Msg, "1 DAY")
	assert.Empty(t, rec.Header().Values("Retry-After"))
	assert.Equal(t, "0", rec.Header().Get(exchangetest.BinanceOrderCount1dHeader), "nothing counted")

	rec = bget(klines).serve(h)
	require.Equal(t, http.StatusTooManyRequests, rec.Code)
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	assert.Equal(t, -1003, body.Code)
	assert.Equal(t, "0", rec.Header().Get(exchangetest.BinanceUsedWeightHeader))

	for _, e := range s.Log() {
		assert.Equal(t, exchangetest.OutcomeRateLimited, e.Outcome)
		assert.Equal(t, exchangetest.HostileRule, e.Rule)
		assert.True(t, e.Hostile)
	}
	assert.Equal(t, 2, s.Stats().LimitedBy[exchangetest.HostileRule])
	_, bans := s.BannedUntil("127.0.0.1")
	assert.Zero(t, bans, "a spurious throttle without Retry-After bans nobody")

	// ThrottleCode -1003 on an order; invalid requests stay invalid.
	s2 := newBinance(t, exchangetest.BinanceConfig{Hostile: exchangetest.Hostile{Throttle: true, ThrottleCode: "-1003"}}, newFakeClock(binanceMinute))
	rec = order("k").serve(s2.Handler())
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	assert.Equal(t, -1003, body.Code)
	assert.Equal(t, http.StatusBadRequest, bget("/api/v3/klines").serve(s2.Handler()).Code)
}

// TestHostileThrottleOKX: spurious 50011 follows RateLimitStatus; 50061
// is always a 200.
func TestHostileThrottleOKX(t *testing.T) {
	cases := []struct {
		status int
		code   string
		want   int
	}{
		{0, "", http.StatusTooManyRequests},
		{http.StatusOK, "", http.StatusOK},
		{http.StatusOK, "50011", http.StatusOK},
		{0, "50061", http.StatusOK},
	}
	for _, c := range cases {
		s := newOKX(t, exchangetest.OKXConfig{RateLimitStatus: c.status, Hostile: exchangetest.Hostile{Throttle: true, ThrottleCode: c.code}}, newFakeClock(okxT0))
		rec := call{method: http.MethodPost, target: "/api/v5/trade/order", body: okxOrderBody("BTC-USDT"), header: uid("u")}.serve(s.Handler())
		assert.Equal(t, c.want, rec.Code)
		var b okxBodyT
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &b))
		want := c.code
		if want == "" {
			want = "50011"
		}
		assert.Equal(t, want, b.Code)
		e := s.Log()[0]
		assert.Equal(t, exchangetest.HostileRule, e.Rule)
		assert.Empty(t, s.Peak(), "nothing counted")
	}
	// RetryAfter on an OKX rejection adds the header.
	s := newOKX(t, exchangetest.OKXConfig{Hostile: exchangetest.Hostile{Throttle: true, RetryAfter: []string{"31536000"}}}, newFakeClock(okxT0))
	rec := call{method: http.MethodGet, target: "/api/v5/market/books?instId=BTC-USDT"}.serve(s.Handler())
	assert.Equal(t, "31536000", rec.Header().Get("Retry-After"))
	assert.Equal(t, 31536000, s.Log()[0].RetryAfter)
}

// TestHostileStall: the headers and the first StallAfter bytes arrive at
// once; the rest after Stall, or never when the request's context ends
// first; Close ends a stall that would last forever.
func TestHostileStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := exchangetest.NewOKX(exchangetest.OKXConfig{InMemory: true, Hostile: exchangetest.Hostile{Stall: 10 * time.Second, StallAfter: 5}})
		defer s.Close()
		start := time.Now()
		resp, err := s.Client().Get(s.URL() + "/api/v5/market/books?instId=BTC-USDT")
		require.NoError(t, err)
		assert.Zero(t, time.Since(start), "headers at once")
		head := make([]byte, 5)
		_, err = io.ReadFull(resp.Body, head)
		require.NoError(t, err)
		assert.Equal(t, `{"cod`, string(head))
		assert.Zero(t, time.Since(start), "the first bytes at once")
		rest, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, 10*time.Second, time.Since(start), "the rest after the stall")
		var b okxBodyT
		require.NoError(t, json.Unmarshal(append(head, rest...), &b))
		assert.Equal(t, "0", b.Code)
	})
	synctest.Test(t, func(t *testing.T) {
		s := exchangetest.NewBinance(exchangetest.BinanceConfig{InMemory: true, Hostile: exchangetest.Hostile{Stall: -1}})
		defer s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+klines, nil)
		start := time.Now()
		resp, err := s.Client().Do(req)
		require.NoError(t, err)
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Error(t, err, "the body never completes")
		assert.Equal(t, 3*time.Second, time.Since(start), "until the request's context ends")

		// A stall without end is cut by Close.
		resp, err = s.Client().Get(s.URL() + klines)
		require.NoError(t, err)
		done := make(chan error)
		go func() {
			_, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			done <- err
		}()
		time.Sleep(time.Hour)
		s.Close()
		assert.Error(t, <-done)
		assert.Equal(t, 2, s.Stats().Accepted)
	})
}

// TestHostileConfigPanics: bad knobs are caller bugs.
func TestHostileConfigPanics(t *testing.T) {
	for name, h := range map[string]exchangetest.Hostile{
		"fraction>1":   {Fraction: 1.5},
		"fraction<0":   {Fraction: -0.1},
		"fraction NaN": {Fraction: math.NaN()},
		"stallAfter":   {StallAfter: -1},
		"code":         {ThrottleCode: "50011"},
	} {
		assert.Panics(t, func() { exchangetest.NewBinance(exchangetest.BinanceConfig{Hostile: h}).Close() }, name)
	}
	assert.Panics(t, func() {
		exchangetest.NewOKX(exchangetest.OKXConfig{Hostile: exchangetest.Hostile{ThrottleCode: "-1015"}}).Close()
	})
}

// TestOffered: Offered counts what the server turned away, so a client
// that called too fast shows a violation although the server let through
// only its limit.
func TestOffered(t *testing.T) {
	s := newBinance(t, exchangetest.BinanceConfig{Limits: map[string]int64{exchangetest.BinanceRequestWeight: 10}}, newFakeClock(binanceMinute))
	for range 8 {
		bget(klines).serve(s.Handler())
	}
	log := s.Log()
	assert.Empty(t, exchangetest.Violations(log, s.Rules()))
	v := exchangetest.Violations(exchangetest.Offered(log), s.Rules())
	require.Len(t, v, 1)
	assert.Equal(t, int64(16), v[0].Peak)
	assert.True(t, strings.HasPrefix(v[0].String(), exchangetest.BinanceRequestWeight))
	assert.Equal(t, exchangetest.OutcomeRateLimited, log[5].Outcome, "the log itself is not modified")
}
