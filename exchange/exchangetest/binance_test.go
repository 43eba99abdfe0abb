package exchangetest_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratesem/ratesem/exchange/exchangetest"
)

// binanceMinute is a full minute of UTC: the start of a REQUEST_WEIGHT window.
var binanceMinute = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

func newBinance(t *testing.T, cfg exchangetest.BinanceConfig, clk *fakeClock) *exchangetest.BinanceServer {
	t.Helper()
	if clk != nil {
		cfg.Clock = clk
	}
	s := exchangetest.NewBinance(cfg)
	t.Cleanup(s.Close)
	return s
}

func bget(target string) call { return call{method: http.MethodGet, target: target} }

func bsigned(method, target, key string) call {
	return call{method: method, target: target, header: map[string]string{"X-MBX-APIKEY": key}}
}

func newOrder(key string) call {
	c := bsigned(http.MethodPost, "/api/v3/order", key)
	c.body = "symbol=BTCUSDT&side=BUY&type=LIMIT&timeInForce=GTC&quantity=0.01&price=43000"
	return c
}

// symbolList returns a JSON array of n symbols, as the symbols parameter takes.
func symbolList(n int) string {
	syms := make([]string, n)
	for i := range syms {
		syms[i] = fmt.Sprintf(`"S%dUSDT"`, i)
	}
	return "[" + strings.Join(syms, ",") + "]"
}

func usedWeight(t *testing.T, h http.Header) int {
	t.Helper()
	v := h.Get("X-MBX-USED-WEIGHT-1M")
	require.NotEmpty(t, v, "every response carries X-MBX-USED-WEIGHT-1M")
	n, err := strconv.Atoi(v)
	require.NoError(t, err)
	return n
}

type binanceErr struct {
	Code int    `json:"code"`
	Msg  string `json:"msg"`
}

func decodeBinanceErr(t *testing.T, body string) binanceErr {
	t.Helper()
	var e binanceErr
	require.NoError(t, json.Unmarshal([]byte(body), &e), body)
	return e
}

func TestBinanceRules(t *testing.T) {
	s := newBinance(t, exchangetest.BinanceConfig{}, nil)
	doc := "https://developers.binance.com/docs/binance-spot-api-docs/rest-api/limits"
	assert.Equal(t, []exchangetest.Rule{
		{Name: exchangetest.BinanceRequestWeight, Limit: 6000, Per: time.Minute, Window: time.Minute, Fixed: true, KeyedBy: "IP", Doc: doc},
		{Name: exchangetest.BinanceRawRequests, Limit: 61000, Per: 5 * time.Minute, Window: 5 * time.Minute, Fixed: true, KeyedBy: "IP", Doc: doc},
		{Name: exchangetest.BinanceOrders10s, Limit: 100, Per: 10 * time.Second, Window: 10 * time.Second, Fixed: true, KeyedBy: "account", Doc: doc},
		{Name: exchangetest.BinanceOrders1d, Limit: 200000, Per: 24 * time.Hour, Window: 24 * time.Hour, Fixed: true, KeyedBy: "account", Doc: doc},
	}, s.Rules())

	scaled := newBinance(t, exchangetest.BinanceConfig{Scale: 20, Limits: map[string]int64{exchangetest.BinanceOrders10s: 7}}, nil)
	var windows []time.Duration
	for _, r := range scaled.Rules() {
		windows = append(windows, r.Window)
	}
	assert.Equal(t, []time.Duration{3 * time.Second, 15 * time.Second, 500 * time.Millisecond, 72 * time.Minute}, windows)
	r, ok := scaled.Rule(exchangetest.BinanceOrders10s)
	require.True(t, ok)
	assert.Equal(t, int64(7), r.Limit)

	for name, cfg := range map[string]exchangetest.BinanceConfig{
		"negative scale": {Scale: -20},
		"NaN scale":      {Scale: math.NaN()},
		"unknown rule":   {Limits: map[string]int64{"REQUEST_WEIGHT": 5}},
		"zero limit":     {Limits: map[string]int64{exchangetest.BinanceRawRequests: 0}},
	} {
		assert.Panics(t, func() { exchangetest.NewBinance(cfg).Close() }, name)
	}
}

// TestBinanceWeights checks each endpoint's weight in the log and in
// X-MBX-USED-WEIGHT-1M.
func TestBinanceWeights(t *testing.T) {
	clk := newFakeClock(binanceMinute)
	s := newBinance(t, exchangetest.BinanceConfig{}, clk)
	h := s.Handler()
	total := 0
	for _, tc := range []struct {
		c      call
		weight int
	}{
		{bget("/api/v3/depth?symbol=BTCUSDT"), 5},
		{bget("/api/v3/depth?symbol=BTCUSDT&limit=1"), 5},
		{bget("/api/v3/depth?symbol=BTCUSDT&limit=100"), 5},
		{bget("/api/v3/depth?symbol=BTCUSDT&limit=101"), 25},
		{bget("/api/v3/depth?symbol=BTCUSDT&limit=500"), 25},
		{bget("/api/v3/depth?symbol=BTCUSDT&limit=501"), 50},
		{bget("/api/v3/depth?symbol=BTCUSDT&limit=1000"), 50},
		{bget("/api/v3/depth?symbol=BTCUSDT&limit=1001"), 250},
		{bget("/api/v3/depth?symbol=BTCUSDT&limit=5000"), 250},
		{bget("/api/v3/depth?symbol=BTCUSDT&limit=9000"), 250},
		{bget("/api/v3/klines?symbol=BTCUSDT&interval=1m"), 2},
		{bget("/api/v3/exchangeInfo"), 20},
		{bget("/api/v3/ticker/24hr?symbol=BTCUSDT"), 2},
		{bget("/api/v3/ticker/24hr"), 80},
		{bget("/api/v3/ticker/24hr?symbols=" + url.QueryEscape(symbolList(1))), 2},
		{bget("/api/v3/ticker/24hr?symbols=" + url.QueryEscape(symbolList(20))), 2},
		{bget("/api/v3/ticker/24hr?symbols=" + url.QueryEscape(symbolList(21))), 40},
		{bget("/api/v3/ticker/24hr?symbols=" + url.QueryEscape(symbolList(100))), 40},
		{bget("/api/v3/ticker/24hr?symbols=" + url.QueryEscape(symbolList(101))), 80},
		{bsigned(http.MethodGet, "/api/v3/account", "k"), 20},
		{bsigned(http.MethodGet, "/api/v3/order?symbol=BTCUSDT&orderId=1", "k"), 4},
		{bsigned(http.MethodGet, "/api/v3/openOrders?symbol=BTCUSDT", "k"), 6},
		{bsigned(http.MethodGet, "/api/v3/openOrders", "k"), 80},
		{newOrder("k"), 1},
	} {
		rec := tc.c.serve(h)
		require.Equal(t, 200, rec.Code, "%v: %s", tc.c, rec.Body)
		total += tc.weight
		assert.Equal(t, total, usedWeight(t, rec.Header()), "%v", tc.c)
		e := s.Log()[len(s.Log())-1]
		assert.Equal(t, exchangetest.Charge{Key: exchangetest.RuleKey{Rule: exchangetest.BinanceRequestWeight, IP: "127.0.0.1"}, Units: int64(tc.weight)}, e.Charges[0])
		assert.Equal(t, exchangetest.Charge{Key: exchangetest.RuleKey{Rule: exchangetest.BinanceRawRequests, IP: "127.0.0.1"}, Units: 1}, e.Charges[1])
	}
	last := s.Log()[len(s.Log())-1]
	require.Len(t, last.Charges, 4, "an order also counts in both ORDERS windows of the account")
	assert.Equal(t, exchangetest.RuleKey{Rule: exchangetest.BinanceOrders10s, APIKey: "k"}, last.Charges[2].Key)
	assert.Equal(t, exchangetest.RuleKey{Rule: exchangetest.BinanceOrders1d, APIKey: "k"}, last.Charges[3].Key)
	assert.Equal(t, int64(total), s.Used(exchangetest.RuleKey{Rule: exchangetest.BinanceRequestWeight, IP: "127.0.0.1"}))
	assert.Equal(t, int64(24), s.Used(exchangetest.RuleKey{Rule: exchangetest.BinanceRawRequests, IP: "127.0.0.1"}))
}

// TestBinanceFixedWindow: the weight limit is per minute of the clock; at
// the full minute the count restarts, although a sliding window would still
// hold everything.
func TestBinanceFixedWindow(t *testing.T) {
	clk := newFakeClock(binanceMinute.Add(30 * time.Second))
	s := newBinance(t, exchangetest.BinanceConfig{Limits: map[string]int64{exchangetest.BinanceRequestWeight: 10}}, clk)
	h := s.Handler()
	klines := bget("/api/v3/klines?symbol=BTCUSDT&interval=1m")
	for i := range 5 {
		rec := klines.serve(h)
		require.Equal(t, 200, rec.Code)
		assert.Equal(t, 2*(i+1), usedWeight(t, rec.Header()))
	}
	// Another IP has its own weight.
	other := klines
	other.ip = "10.0.0.2"
	assert.Equal(t, 200, other.serve(h).Code)

	clk.Set(binanceMinute.Add(30*time.Second + 200*time.Millisecond))
	rec := klines.serve(h)
	require.Equal(t, http.StatusTooManyRequests, rec.Code)
	assert.Equal(t, "30", rec.Header().Get("Retry-After"), "29.8 s to the full minute, rounded up")
	assert.Equal(t, 10, usedWeight(t, rec.Header()), "the rejected request is not counted")
	e := decodeBinanceErr(t, rec.Body.String())
	assert.Equal(t, -1003, e.Code)
	assert.Equal(t, "Too much request weight used; current limit is 10 request weight per 1 MINUTE. Please use WebSocket Streams for live updates to avoid polling the API.", e.Msg)
	le := s.Log()[6]
	assert.Equal(t, exchangetest.OutcomeRateLimited, le.Outcome)
	assert.Equal(t, exchangetest.BinanceRequestWeight, le.Rule)
	assert.Equal(t, 30, le.RetryAfter)
	assert.Equal(t, "-1003", le.Code)

	// The 429's Retry-After ends at 12:01:00.2, a new minute began at 12:01:00.
	// An IP that did not get the 429 may send at the full minute.
	clk.Set(binanceMinute.Add(time.Minute))
	rec = other.serve(h)
	assert.Equal(t, 200, rec.Code)
	assert.Equal(t, 2, usedWeight(t, rec.Header()))
	clk.Set(binanceMinute.Add(time.Minute + 200*time.Millisecond))
	for i := range 5 {
		rec := klines.serve(h)
		require.Equal(t, 200, rec.Code, "a fresh window, though the last 10 units arrived 30 s ago")
		assert.Equal(t, 2*(i+1), usedWeight(t, rec.Header()))
	}
	assert.Equal(t, 429, klines.serve(h).Code)
	assert.Equal(t, map[exchangetest.RuleKey]int64{
		{Rule: exchangetest.BinanceRequestWeight, IP: "127.0.0.1"}: 10,
		{Rule: exchangetest.BinanceRequestWeight, IP: "10.0.0.2"}:  2,
		{Rule: exchangetest.BinanceRawRequests, IP: "127.0.0.1"}:   10,
		{Rule: exchangetest.BinanceRawRequests, IP: "10.0.0.2"}:    2,
	}, s.Peak())
	assert.Empty(t, s.Violations())
	// Over any 60 s the server admitted 20 units: the known 2N of fixed windows.
	slide := s.Rules()[0]
	slide.Fixed = false
	assert.Equal(t, int64(20), exchangetest.PeakUsage(s.Log(), []exchangetest.Rule{slide})[exchangetest.RuleKey{Rule: exchangetest.BinanceRequestWeight, IP: "127.0.0.1"}])
}

// TestBinanceScaledAlignment: with Scale 20 the minute lasts 3 s and the
// windows start at multiples of 3 s since the Unix epoch.
func TestBinanceScaledAlignment(t *testing.T) {
	b := time.Unix(1_700_000_001, 0) // 3 · 566666667 s
	clk := newFakeClock(b.Add(-time.Second))
	s := newBinance(t, exchangetest.BinanceConfig{Scale: 20, Limits: map[string]int64{exchangetest.BinanceRequestWeight: 40}}, clk)
	h := s.Handler()
	info := bget("/api/v3/exchangeInfo")
	assert.Equal(t, 200, info.serve(h).Code)
	assert.Equal(t, 200, info.serve(h).Code)
	rec := info.serve(h)
	require.Equal(t, 429, rec.Code)
	assert.Equal(t, "1", rec.Header().Get("Retry-After"), "1 s of real time to the scaled boundary")

	clk.Set(b.Add(-1))
	rec = bget("/api/v3/klines?symbol=BTCUSDT&interval=1m").serve(h)
	assert.Equal(t, 418, rec.Code, "sent before the Retry-After passed: banned")
	until, bans := s.BannedUntil("127.0.0.1")
	assert.Equal(t, 1, bans)
	assert.Equal(t, b.Add(-1).Add(6*time.Second), until, "2 min / 20")
	assert.Equal(t, "6", rec.Header().Get("Retry-After"))

	// Another IP sees the boundary exactly.
	c2 := info
	c2.ip = "10.0.0.2"
	assert.Equal(t, 200, c2.serve(h).Code)
	assert.Equal(t, 200, c2.serve(h).Code)
	assert.Equal(t, 429, c2.serve(h).Code)
	c3 := info
	c3.ip = "10.0.0.3"
	assert.Equal(t, 200, c3.serve(h).Code)
	clk.Set(b)
	assert.Equal(t, 200, c3.serve(h).Code)
	rec = c3.serve(h)
	assert.Equal(t, 40, usedWeight(t, rec.Header()), "a new window at the multiple of 3 s")
	assert.Equal(t, 200, rec.Code)

	// The exchangeInfo answer lists the configured limits.
	var infoBody struct {
		Timezone   string `json:"timezone"`
		RateLimits []struct {
			RateLimitType string `json:"rateLimitType"`
			Interval      string `json:"interval"`
			IntervalNum   int    `json:"intervalNum"`
			Limit         int64  `json:"limit"`
		} `json:"rateLimits"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &infoBody))
	assert.Equal(t, "UTC", infoBody.Timezone)
	require.Len(t, infoBody.RateLimits, 4)
	assert.Equal(t, "REQUEST_WEIGHT", infoBody.RateLimits[0].RateLimitType)
	assert.Equal(t, int64(40), infoBody.RateLimits[0].Limit)
	assert.Equal(t, "DAY", infoBody.RateLimits[3].Interval)
	assert.Equal(t, int64(200000), infoBody.RateLimits[3].Limit)
}

// TestBinanceBan walks through the ban rules at exact instants.
func TestBinanceBan(t *testing.T) {
	clk := newFakeClock(binanceMinute)
	s := newBinance(t, exchangetest.BinanceConfig{Limits: map[string]int64{exchangetest.BinanceRequestWeight: 20}}, clk)
	h := s.Handler()
	info := bget("/api/v3/exchangeInfo")
	at := func(d time.Duration) { clk.Set(binanceMinute.Add(d)) }

	require.Equal(t, 200, info.serve(h).Code)
	at(10 * time.Second)
	rec := info.serve(h)
	require.Equal(t, 429, rec.Code)
	require.Equal(t, "50", rec.Header().Get("Retry-After"))

	// Waiting out the Retry-After exactly is fine.
	at(60 * time.Second)
	require.Equal(t, 200, info.serve(h).Code)
	rec = info.serve(h)
	require.Equal(t, 429, rec.Code)
	require.Equal(t, "60", rec.Header().Get("Retry-After"))

	// One nanosecond early, with any request: the IP is banned for 2 minutes.
	at(2*time.Minute - 1)
	rec = bget("/api/v3/nope").serve(h)
	require.Equal(t, 418, rec.Code)
	assert.Equal(t, "120", rec.Header().Get("Retry-After"))
	assert.NotEmpty(t, rec.Header().Get("X-MBX-USED-WEIGHT-1M"))
	e := decodeBinanceErr(t, rec.Body.String())
	assert.Equal(t, -1003, e.Code)
	banEnd := binanceMinute.Add(4*time.Minute - 1)
	assert.Equal(t, fmt.Sprintf("Way too much request weight used; IP banned until %d. Please use WebSocket Streams for live updates to avoid bans.", banEnd.UnixMilli()), e.Msg)
	until, bans := s.BannedUntil("127.0.0.1")
	assert.Equal(t, banEnd, until)
	assert.Equal(t, 1, bans)

	// During the ban every request from the IP is 418 and does not extend it;
	// other IPs are not affected.
	at(3 * time.Minute)
	rec = bsigned(http.MethodGet, "/api/v3/account", "k").serve(h)
	assert.Equal(t, 418, rec.Code)
	assert.Equal(t, "60", rec.Header().Get("Retry-After"))
	other := info
	other.ip = "10.0.0.2"
	assert.Equal(t, 200, other.serve(h).Code)
	clk.Set(banEnd.Add(-1))
	rec = info.serve(h)
	assert.Equal(t, 418, rec.Code)
	assert.Equal(t, "1", rec.Header().Get("Retry-After"))
	until, bans = s.BannedUntil("127.0.0.1")
	assert.Equal(t, banEnd, until)
	assert.Equal(t, 1, bans)
	clk.Set(banEnd)
	assert.Equal(t, 200, info.serve(h).Code, "the ban is over")

	st := s.Stats()
	assert.Equal(t, 3, st.Status418)
	assert.Equal(t, 3, st.Banned)
	assert.Equal(t, 2, st.Status429)
	assert.Equal(t, map[string]int{exchangetest.BinanceRequestWeight: 2}, st.LimitedBy)
	for _, e := range s.Log() {
		if e.Outcome == exchangetest.OutcomeBanned {
			assert.Equal(t, 418, e.Status)
			assert.NotZero(t, e.RetryAfter)
		}
	}
	assert.Empty(t, s.Violations())
}

// TestBinanceBanDoubles: each ban of an IP lasts twice the previous one,
// from 2 minutes up to 3 days, divided by the scale.
func TestBinanceBanDoubles(t *testing.T) {
	for _, scale := range []float64{1, 20} {
		t.Run(fmt.Sprint("scale ", scale), func(t *testing.T) {
			now := binanceMinute
			clk := newFakeClock(now)
			s := newBinance(t, exchangetest.BinanceConfig{Scale: scale, Limits: map[string]int64{exchangetest.BinanceRequestWeight: 2}}, clk)
			h := s.Handler()
			klines := bget("/api/v3/klines?symbol=BTCUSDT&interval=1m")
			want := 2 * time.Minute
			for n := 1; n <= 14; n++ {
				require.Equal(t, 200, klines.serve(h).Code, "ban %d", n)
				rec := klines.serve(h)
				require.Equal(t, 429, rec.Code)
				ra, _ := strconv.Atoi(rec.Header().Get("Retry-After"))
				require.GreaterOrEqual(t, ra, 1)
				rec = klines.serve(h) // at once: the Retry-After has not passed
				require.Equal(t, 418, rec.Code)
				d := time.Duration(float64(want) / scale)
				until, bans := s.BannedUntil("127.0.0.1")
				require.Equal(t, n, bans)
				require.Equal(t, now.Add(d), until, "ban %d", n)
				require.Equal(t, strconv.Itoa(int((d+time.Second-1)/time.Second)), rec.Header().Get("Retry-After"))
				now = until
				clk.Set(now)
				want = min(2*want, 72*time.Hour)
			}
			assert.Equal(t, 72*time.Hour, want, "the cap was reached")
		})
	}
}

// TestBinanceOrders: the ORDERS limits count per account (API key), answer
// -1015, and carry the order-count headers.
func TestBinanceOrders(t *testing.T) {
	clk := newFakeClock(binanceMinute.Add(3 * time.Second))
	s := newBinance(t, exchangetest.BinanceConfig{Limits: map[string]int64{exchangetest.BinanceOrders10s: 3, exchangetest.BinanceOrders1d: 5}}, clk)
	h := s.Handler()
	for i := 1; i <= 3; i++ {
		rec := newOrder("k1").serve(h)
		require.Equal(t, 200, rec.Code, rec.Body.String())
		assert.Equal(t, strconv.Itoa(i), rec.Header().Get("X-MBX-ORDER-COUNT-10S"))
		assert.Equal(t, strconv.Itoa(i), rec.Header().Get("X-MBX-ORDER-COUNT-1D"))
		var o struct {
			Symbol      string `json:"symbol"`
			OrderID     int64  `json:"orderId"`
			OrderListID int64  `json:"orderListId"`
		}
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &o))
		assert.Equal(t, "BTCUSDT", o.Symbol)
		assert.Equal(t, int64(1000+i), o.OrderID)
		assert.Equal(t, int64(-1), o.OrderListID)
	}
	// The same account from another IP: rejected (the limit is per account).
	o := newOrder("k1")
	o.ip = "10.0.0.2"
	rec := o.serve(h)
	require.Equal(t, 429, rec.Code)
	e := decodeBinanceErr(t, rec.Body.String())
	assert.Equal(t, -1015, e.Code)
	assert.Equal(t, "Too many new orders; current limit is 3 orders per 10 SECOND.", e.Msg)
	assert.Equal(t, "7", rec.Header().Get("Retry-After"), "to 12:00:10")
	assert.Equal(t, "3", rec.Header().Get("X-MBX-ORDER-COUNT-10S"))
	assert.Equal(t, "0", rec.Header().Get("X-MBX-USED-WEIGHT-1M"), "nothing counted for 10.0.0.2")
	// Another account is independent; non-order requests are not limited by ORDERS.
	assert.Equal(t, 200, newOrder("k2").serve(h).Code)
	assert.Equal(t, 200, bsigned(http.MethodGet, "/api/v3/openOrders?symbol=BTCUSDT", "k1").serve(h).Code)

	clk.Set(binanceMinute.Add(10 * time.Second))
	for i := 4; i <= 5; i++ {
		rec := o.serve(h)
		require.Equal(t, 200, rec.Code)
		assert.Equal(t, strconv.Itoa(i-3), rec.Header().Get("X-MBX-ORDER-COUNT-10S"))
		assert.Equal(t, strconv.Itoa(i), rec.Header().Get("X-MBX-ORDER-COUNT-1D"))
	}
	rec = newOrder("k1").serve(h)
	require.Equal(t, 429, rec.Code)
	assert.Equal(t, "Too many new orders; current limit is 5 orders per 1 DAY.", decodeBinanceErr(t, rec.Body.String()).Msg)
	assert.Equal(t, strconv.Itoa(int((12*time.Hour - 10*time.Second).Seconds())), rec.Header().Get("Retry-After"), "to midnight UTC")
	assert.Equal(t, exchangetest.BinanceOrders1d, s.Log()[len(s.Log())-1].Rule)

	st := s.Stats()
	assert.Equal(t, map[string]int{exchangetest.BinanceOrders10s: 1, exchangetest.BinanceOrders1d: 1}, st.LimitedBy)
	peak := s.Peak()
	assert.Equal(t, int64(3), peak[exchangetest.RuleKey{Rule: exchangetest.BinanceOrders10s, APIKey: "k1"}])
	assert.Equal(t, int64(5), peak[exchangetest.RuleKey{Rule: exchangetest.BinanceOrders1d, APIKey: "k1"}])
	assert.Empty(t, s.Violations())
}

func TestBinanceRawRequests(t *testing.T) {
	clk := newFakeClock(binanceMinute)
	s := newBinance(t, exchangetest.BinanceConfig{Limits: map[string]int64{exchangetest.BinanceRawRequests: 3}}, clk)
	h := s.Handler()
	for range 3 {
		require.Equal(t, 200, bget("/api/v3/ticker/24hr?symbol=BTCUSDT").serve(h).Code)
	}
	rec := bget("/api/v3/ticker/24hr?symbol=BTCUSDT").serve(h)
	require.Equal(t, 429, rec.Code)
	assert.Equal(t, "300", rec.Header().Get("Retry-After"), "12:00 starts a 5-minute window")
	assert.Equal(t, -1003, decodeBinanceErr(t, rec.Body.String()).Code)
	assert.Equal(t, exchangetest.BinanceRawRequests, s.Log()[3].Rule)
	assert.Equal(t, 6, usedWeight(t, rec.Header()))
}

func TestBinanceInvalid(t *testing.T) {
	clk := newFakeClock(binanceMinute)
	s := newBinance(t, exchangetest.BinanceConfig{}, clk)
	h := s.Handler()
	for _, tc := range []struct {
		c      call
		status int
		code   int
	}{
		{bget("/api/v3/nope"), 404, 0},
		{call{method: http.MethodDelete, target: "/api/v3/depth?symbol=BTCUSDT"}, 405, 0},
		{bget("/api/v3/depth"), 400, -1102},
		{bget("/api/v3/depth?symbol=BTCUSDT&limit=abc"), 400, -1100},
		{bget("/api/v3/depth?symbol=BTCUSDT&limit=0"), 400, -1100},
		{bget("/api/v3/klines?symbol=BTCUSDT"), 400, -1102},
		{bget("/api/v3/ticker/24hr?symbol=BTCUSDT&symbols=" + url.QueryEscape(symbolList(2))), 400, -1128},
		{bget("/api/v3/ticker/24hr?symbols=BTCUSDT"), 400, -1100},
		{bget("/api/v3/ticker/24hr?symbols=%5B%5D"), 400, -1100},
		{bget("/api/v3/account"), 401, -2014},
		{call{method: http.MethodPost, target: "/api/v3/order", body: "symbol=BTCUSDT&side=BUY&type=MARKET"}, 401, -2014},
		{bsigned(http.MethodGet, "/api/v3/order?symbol=BTCUSDT", "k"), 400, -1102},
		{bsigned(http.MethodPost, "/api/v3/order?symbol=BTCUSDT", "k"), 400, -1102},
	} {
		rec := tc.c.serve(h)
		assert.Equal(t, tc.status, rec.Code, "%v: %s", tc.c, rec.Body)
		assert.Equal(t, 0, usedWeight(t, rec.Header()))
		if tc.code != 0 {
			assert.Equal(t, tc.code, decodeBinanceErr(t, rec.Body.String()).Code, "%v", tc.c)
		}
	}
	st := s.Stats()
	assert.Equal(t, st.Requests, st.Invalid)
	assert.Empty(t, s.Peak())
	// Parameters may come in a form body as well as the query string.
	c := newOrder("k")
	c.target += "?newClientOrderId=mine"
	rec := c.serve(h)
	require.Equal(t, 200, rec.Code, rec.Body.String())
	assert.Contains(t, rec.Body.String(), `"clientOrderId":"mine"`)
}

func TestBinanceBodies(t *testing.T) {
	clk := newFakeClock(binanceMinute)
	s := newBinance(t, exchangetest.BinanceConfig{}, clk)
	h := s.Handler()
	body := func(c call, v any) {
		t.Helper()
		rec := c.serve(h)
		require.Equal(t, 200, rec.Code, rec.Body.String())
		assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), v), rec.Body.String())
	}
	var depth struct {
		LastUpdateID int64      `json:"lastUpdateId"`
		Bids         [][]string `json:"bids"`
		Asks         [][]string `json:"asks"`
	}
	body(bget("/api/v3/depth?symbol=BTCUSDT"), &depth)
	assert.NotZero(t, depth.LastUpdateID)
	assert.NotEmpty(t, depth.Bids)
	assert.NotEmpty(t, depth.Asks)

	var klines [][]any
	body(bget("/api/v3/klines?symbol=BTCUSDT&interval=1m"), &klines)
	require.Len(t, klines, 2)
	for _, k := range klines {
		require.Len(t, k, 12)
		assert.IsType(t, float64(0), k[0], "open time is a number")
		assert.IsType(t, "", k[1], "prices are strings")
	}
	assert.Equal(t, float64(binanceMinute.UnixMilli()), klines[1][0])

	var one map[string]any
	body(bget("/api/v3/ticker/24hr?symbol=ETHUSDT"), &one)
	assert.Equal(t, "ETHUSDT", one["symbol"])
	var all []map[string]any
	body(bget("/api/v3/ticker/24hr"), &all)
	assert.Len(t, all, 2)
	body(bget("/api/v3/ticker/24hr?symbols="+url.QueryEscape(`["BNBUSDT","SOLUSDT","XRPUSDT"]`)), &all)
	require.Len(t, all, 3)
	assert.Equal(t, "XRPUSDT", all[2]["symbol"])

	var acct struct {
		Balances []struct{ Asset, Free string } `json:"balances"`
	}
	body(bsigned(http.MethodGet, "/api/v3/account", "k"), &acct)
	assert.NotEmpty(t, acct.Balances)
	var order map[string]any
	body(bsigned(http.MethodGet, "/api/v3/order?symbol=BTCUSDT&orderId=42", "k"), &order)
	assert.Equal(t, float64(42), order["orderId"])
	assert.Equal(t, "NEW", order["status"])
	var open []any
	body(bsigned(http.MethodGet, "/api/v3/openOrders", "k"), &open)
	assert.Empty(t, open)
}

// TestBinanceSynctest: a client that honours Retry-After is never banned;
// one that does not is, and then gets 418 until the ban ends. Virtual time
// makes a scaled minute of 3 s instant.
func TestBinanceSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := exchangetest.NewBinance(exchangetest.BinanceConfig{
			Scale: 20, InMemory: true, Latency: exchangetest.FixedLatency(time.Millisecond),
			Limits: map[string]int64{exchangetest.BinanceRequestWeight: 100},
		})
		defer s.Close()
		get := func(c *http.Client) (int, http.Header) {
			resp, err := c.Get(s.URL() + "/api/v3/exchangeInfo")
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode, resp.Header
		}
		var wg sync.WaitGroup
		polite, rude := s.ClientFrom("10.0.0.1"), s.ClientFrom("10.0.0.2")
		wg.Go(func() { // 3 windows' worth of weight, backing off on 429
			for done := 0; done < 15; {
				status, h := get(polite)
				switch status {
				case 200:
					done++
				case 429:
					ra, _ := strconv.Atoi(h.Get("Retry-After"))
					time.Sleep(time.Duration(ra) * time.Second)
				default:
					t.Errorf("polite client got %d", status)
					return
				}
			}
		})
		var rudeStatuses []int
		wg.Go(func() { // 8 at once, then 2 more right after the 429
			for range 8 {
				status, _ := get(rude)
				rudeStatuses = append(rudeStatuses, status)
			}
		})
		wg.Wait()
		assert.Equal(t, []int{200, 200, 200, 200, 200, 429, 418, 418}, rudeStatuses)
		until, bans := s.BannedUntil("10.0.0.2")
		assert.Equal(t, 1, bans)
		time.Sleep(time.Until(until))
		status, _ := get(rude)
		assert.Equal(t, 200, status, "the ban (6 s at scale 20) is over")
		_, bans = s.BannedUntil("10.0.0.1")
		assert.Zero(t, bans)
		assert.Empty(t, s.Violations())
		st := s.Stats()
		assert.Equal(t, 15+5+1, st.Accepted)
		assert.Equal(t, 2, st.Banned)
	})
}

// TestBinanceUnderLoadRealTime hammers a scaled server over TCP from two
// IPs (needs 127.0.0.2 on loopback; skipped otherwise) with clients that do
// not back off. Timing is up to the scheduler, so it checks what must hold
// whatever the timing: no rule exceeded in any fixed window, headers and
// counts consistent, bans only after a 429.
func TestBinanceUnderLoadRealTime(t *testing.T) {
	s := newBinance(t, exchangetest.BinanceConfig{
		Scale:  1200, // a minute lasts 50 ms
		Limits: map[string]int64{exchangetest.BinanceRequestWeight: 60, exchangetest.BinanceOrders10s: 4},
	}, nil)
	ips := []string{"127.0.0.1", "127.0.0.2"}
	resp, err := s.ClientFrom("127.0.0.2").Get(s.URL() + "/api/v3/exchangeInfo")
	if err != nil {
		t.Skipf("cannot send from 127.0.0.2: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, "127.0.0.2", s.Log()[0].IP, "ClientFrom binds the local address on TCP")
	var wg sync.WaitGroup
	var mu sync.Mutex
	maxHeader := 0
	for g := range 8 {
		wg.Go(func() {
			c := s.ClientFrom(ips[g%2])
			for i := range 25 {
				var req *http.Request
				if i%3 == 0 {
					req, _ = http.NewRequest(http.MethodPost, s.URL()+"/api/v3/order",
						strings.NewReader(url.Values{"symbol": {"BTCUSDT"}, "side": {"BUY"}, "type": {"MARKET"}}.Encode()))
					req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				} else {
					req, _ = http.NewRequest(http.MethodGet, s.URL()+"/api/v3/depth?symbol=BTCUSDT", nil)
				}
				req.Header.Set("X-MBX-APIKEY", "k")
				resp, err := c.Do(req)
				if !assert.NoError(t, err) {
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				n, _ := strconv.Atoi(resp.Header.Get("X-MBX-USED-WEIGHT-1M"))
				mu.Lock()
				maxHeader = max(maxHeader, n)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, maxHeader, 60)
	assert.Empty(t, s.Violations())
	peak := s.Peak()
	for _, ip := range ips {
		assert.LessOrEqual(t, peak[exchangetest.RuleKey{Rule: exchangetest.BinanceRequestWeight, IP: ip}], int64(60))
	}
	assert.LessOrEqual(t, peak[exchangetest.RuleKey{Rule: exchangetest.BinanceOrders10s, APIKey: "k"}], int64(4))
	st := s.Stats()
	assert.Equal(t, 1+8*25, st.Requests)
	assert.Equal(t, st.Requests, st.Accepted+st.RateLimited+st.Banned, "no invalid request was sent")
	assert.Equal(t, st.Status429, st.RateLimited)
	assert.Equal(t, st.Status418, st.Banned)
	// These clients do not back off, so after its first 429 an IP is banned
	// for a while; every 418 must come after a 429 to the same IP.
	first429 := map[string]time.Time{}
	for _, e := range s.Log() {
		switch e.Outcome {
		case exchangetest.OutcomeRateLimited:
			if _, ok := first429[e.IP]; !ok {
				first429[e.IP] = e.At
			}
		case exchangetest.OutcomeBanned:
			_, ok := first429[e.IP]
			assert.True(t, ok, "418 to %s before any 429", e.IP)
		}
	}
	t.Logf("%d requests: %d accepted, %d 429, %d 418", st.Requests, st.Accepted, st.Status429, st.Status418)
}

func ExampleNewBinance() {
	// A fixed clock puts every request in the same minute window.
	at := time.Date(2024, 5, 1, 12, 0, 30, 0, time.UTC)
	s := exchangetest.NewBinance(exchangetest.BinanceConfig{
		Clock:  newFakeClock(at),
		Limits: map[string]int64{exchangetest.BinanceRequestWeight: 100}, // instead of 6000
	})
	defer s.Close()

	for i := 1; i <= 7; i++ { // exchangeInfo weighs 20
		resp, err := s.Client().Get(s.URL() + "/api/v3/exchangeInfo")
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(i, resp.StatusCode, "used", resp.Header.Get("X-MBX-USED-WEIGHT-1M"))
		if resp.StatusCode != http.StatusOK {
			fmt.Println("  retry-after", resp.Header.Get("Retry-After"), string(body))
		}
	}
	st := s.Stats()
	fmt.Println("429:", st.Status429, "418:", st.Status418, "violations:", len(s.Violations()))
	// Output:
	// 1 200 used 20
	// 2 200 used 40
	// 3 200 used 60
	// 4 200 used 80
	// 5 200 used 100
	// 6 429 used 100
	//   retry-after 30 {"code":-1003,"msg":"Too much request weight used; current limit is 100 request weight per 1 MINUTE. Please use WebSocket Streams for live updates to avoid polling the API."}
	// 7 418 used 100
	//   retry-after 120 {"code":-1003,"msg":"Way too much request weight used; IP banned until 1714564950000. Please use WebSocket Streams for live updates to avoid bans."}
	// 429: 1 418: 1 violations: 0
}
