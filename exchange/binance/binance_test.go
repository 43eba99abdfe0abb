package binance_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/exchange/binance"
	"github.com/ratesem/ratesem/internal/win"
	"github.com/ratesem/ratesem/window"
)

const (
	base = "https://api.binance.com"
	key  = "vmPUZE6mv9SD5VNHk4HlWFsOr6aKE2zvsw0MuIgwCIPy6utIco14y7Ju91duEh8A"
)

type ch = clientpool.Charge

func c(rule, key string, weight int64) ch { return ch{Rule: rule, Key: key, Weight: weight} }

// ip returns the charges of a request of REQUEST_WEIGHT w that no ORDERS rule
// counts.
func ip(w int64) []ch {
	return []ch{c(binance.RuleRequestWeight, "", w), c(binance.RuleRawRequests, "", 1)}
}

func newPool(t *testing.T, tb clientpool.Table) (*clientpool.Pool, *clock.Mock) {
	t.Helper()
	mock := clock.NewMock()
	p, err := clientpool.New(tb, clientpool.WithClock(mock))
	require.NoError(t, err)
	return p, mock
}

func get(target string) *http.Request {
	req := httptest.NewRequest(http.MethodGet, base+target, nil)
	req.Header.Set(binance.HeaderAPIKey, key)
	return req
}

func symbols(n int) string {
	s := make([]string, n)
	for i := range s {
		s[i] = `"S` + strings.Repeat("X", i%5) + `"`
	}
	return url.QueryEscape("[" + strings.Join(s, ",") + "]")
}

func TestClassify(t *testing.T) {
	pool, _ := newPool(t, binance.Spot())
	order, err := http.NewRequest(http.MethodPost, base+"/api/v3/order",
		bytes.NewReader([]byte("symbol=LTCBTC&side=BUY&type=LIMIT&timeInForce=GTC&quantity=1&price=0.1&recvWindow=5000&timestamp=1499827319559")))
	require.NoError(t, err)
	order.Header.Set(binance.HeaderAPIKey, key)
	noKey := httptest.NewRequest(http.MethodPost, base+"/api/v3/order?symbol=LTCBTC", nil)
	cancelReplace := httptest.NewRequest(http.MethodPost, base+"/api/v3/order/cancelReplace?symbol=LTCBTC", nil)
	cancelReplace.Header.Set(binance.HeaderAPIKey, key)
	post := func(path, body string) *http.Request {
		req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
		require.NoError(t, err)
		return req
	}

	cases := []struct {
		name string
		req  *http.Request
		want []ch
	}{
		{"depth default limit", get("/api/v3/depth?symbol=BTCUSDT"), ip(5)},
		{"depth 100", get("/api/v3/depth?symbol=BTCUSDT&limit=100"), ip(5)},
		{"depth 101", get("/api/v3/depth?symbol=BTCUSDT&limit=101"), ip(25)},
		{"depth 500", get("/api/v3/depth?symbol=BTCUSDT&limit=500"), ip(25)},
		{"depth 501", get("/api/v3/depth?symbol=BTCUSDT&limit=501"), ip(50)},
		{"depth 1000", get("/api/v3/depth?symbol=BTCUSDT&limit=1000"), ip(50)},
		{"depth 1001", get("/api/v3/depth?symbol=BTCUSDT&limit=1001"), ip(250)},
		{"depth 5000", get("/api/v3/depth?symbol=BTCUSDT&limit=5000"), ip(250)},
		{"depth 5001 (truncated to 5000)", get("/api/v3/depth?symbol=BTCUSDT&limit=5001"), ip(250)},
		{"depth 1", get("/api/v3/depth?symbol=BTCUSDT&limit=1"), ip(5)},
		{"depth limit not a number", get("/api/v3/depth?symbol=BTCUSDT&limit=ten"), ip(250)},
		{"depth limit 0", get("/api/v3/depth?symbol=BTCUSDT&limit=0"), ip(250)},
		{"klines", get("/api/v3/klines?symbol=BTCUSDT&interval=1m"), ip(2)},
		{"exchangeInfo", get("/api/v3/exchangeInfo"), ip(20)},
		{"account", get("/api/v3/account?timestamp=1&signature=x"), ip(20)},
		{"query order", get("/api/v3/order?symbol=LTCBTC&orderId=1&timestamp=1&signature=x"), ip(4)},
		{"ticker with symbol", get("/api/v3/ticker/24hr?symbol=BNBBTC"), ip(2)},
		{"ticker without symbol", get("/api/v3/ticker/24hr"), ip(80)},
		{"ticker 1 of symbols", get("/api/v3/ticker/24hr?symbols=" + symbols(1)), ip(2)},
		{"ticker 20 symbols", get("/api/v3/ticker/24hr?symbols=" + symbols(20)), ip(2)},
		{"ticker 21 symbols", get("/api/v3/ticker/24hr?symbols=" + symbols(21)), ip(40)},
		{"ticker 100 symbols", get("/api/v3/ticker/24hr?symbols=" + symbols(100)), ip(40)},
		{"ticker 101 symbols", get("/api/v3/ticker/24hr?symbols=" + symbols(101)), ip(80)},
		{"ticker symbols not JSON", get("/api/v3/ticker/24hr?symbols=BTCUSDT,BNBBTC"), ip(80)},
		{"open orders with symbol", get("/api/v3/openOrders?symbol=LTCBTC&timestamp=1&signature=x"), ip(6)},
		{"open orders without symbol", get("/api/v3/openOrders?timestamp=1&signature=x"), ip(80)},
		{"new order", order, []ch{c(binance.RuleRequestWeight, "", 1), c(binance.RuleRawRequests, "", 1),
			c(binance.RuleOrders10s, key, 1), c(binance.RuleOrders1d, key, 1)}},
		{"new order without API key", noKey, []ch{c(binance.RuleRequestWeight, "", 1), c(binance.RuleRawRequests, "", 1),
			c(binance.RuleOrders10s, "", 1), c(binance.RuleOrders1d, "", 1)}},
		{"unknown endpoint: the default", get("/api/v3/notAnEndpoint"), ip(1)},
		{"ping", get("/api/v3/ping"), ip(1)},
		{"time", get("/api/v3/time"), ip(1)},
		{"trades", get("/api/v3/trades?symbol=BTCUSDT"), ip(25)},
		{"historical trades", get("/api/v3/historicalTrades?symbol=BTCUSDT"), ip(25)},
		{"agg trades", get("/api/v3/aggTrades?symbol=BTCUSDT"), ip(4)},
		{"ui klines", get("/api/v3/uiKlines?symbol=BTCUSDT&interval=1m"), ip(2)},
		{"avg price", get("/api/v3/avgPrice?symbol=BTCUSDT"), ip(2)},
		{"price ticker with symbol", get("/api/v3/ticker/price?symbol=BTCUSDT"), ip(2)},
		{"price ticker without symbol", get("/api/v3/ticker/price"), ip(4)},
		{"price ticker with symbols", get("/api/v3/ticker/price?symbols=" + symbols(500)), ip(4)},
		{"book ticker with symbol", get("/api/v3/ticker/bookTicker?symbol=BTCUSDT"), ip(2)},
		{"book ticker without symbol", get("/api/v3/ticker/bookTicker"), ip(4)},
		{"rolling ticker with symbol", get("/api/v3/ticker?symbol=BTCUSDT&windowSize=1h"), ip(4)},
		{"rolling ticker 1 of symbols", get("/api/v3/ticker?symbols=" + symbols(1)), ip(4)},
		{"rolling ticker 10 symbols", get("/api/v3/ticker?symbols=" + symbols(10)), ip(40)},
		{"rolling ticker 50 symbols", get("/api/v3/ticker?symbols=" + symbols(50)), ip(200)},
		{"rolling ticker 51 symbols", get("/api/v3/ticker?symbols=" + symbols(51)), ip(200)},
		{"rolling ticker 10000 symbols", get("/api/v3/ticker?symbols=" + symbols(10000)), ip(200)},
		{"rolling ticker no symbol", get("/api/v3/ticker"), ip(200)},
		{"rolling ticker empty symbols", get("/api/v3/ticker?symbols=[]"), ip(200)},
		{"rolling ticker symbols not JSON", get("/api/v3/ticker?symbols=BTCUSDT,BNBBTC"), ip(200)},
		{"trading day ticker 3 symbols", get("/api/v3/ticker/tradingDay?symbols=" + symbols(3)), ip(12)},
		{"trading day ticker with symbol", get("/api/v3/ticker/tradingDay?symbol=BTCUSDT"), ip(4)},
		{"test order", httptest.NewRequest(http.MethodPost, base+"/api/v3/order/test?symbol=LTCBTC", nil), ip(1)},
		{"test order with commission rates", httptest.NewRequest(http.MethodPost, base+"/api/v3/order/test?computeCommissionRates=true", nil), ip(20)},
		{"test order with commission rates TRUE", httptest.NewRequest(http.MethodPost, base+"/api/v3/order/test?computeCommissionRates=TRUE", nil), ip(20)},
		{"test order without commission rates", httptest.NewRequest(http.MethodPost, base+"/api/v3/order/test?computeCommissionRates=false", nil), ip(1)},
		{"test order, form body", post("/api/v3/order/test", "symbol=LTCBTC&side=BUY"), ip(1)},
		{"test order, form body with commission rates", post("/api/v3/order/test", "symbol=LTCBTC&computeCommissionRates=true"), ip(20)},
		{"test order, body too large", post("/api/v3/order/test", strings.Repeat("a", 64<<10+1)), ip(20)},
		{"test order, body not a form", post("/api/v3/order/test", "%zz"), ip(20)},
		{"test order, body without GetBody", httptest.NewRequest(http.MethodPost, base+"/api/v3/order/test", io.MultiReader(strings.NewReader("symbol=LTCBTC"))), ip(20)},
		{"cancel order", httptest.NewRequest(http.MethodDelete, base+"/api/v3/order?symbol=LTCBTC&orderId=1", nil), ip(1)},
		{"cancel open orders", httptest.NewRequest(http.MethodDelete, base+"/api/v3/openOrders?symbol=LTCBTC", nil), ip(1)},
		{"cancel and replace", cancelReplace, []ch{c(binance.RuleRequestWeight, "", 1), c(binance.RuleRawRequests, "", 1),
			c(binance.RuleOrders10s, key, 1), c(binance.RuleOrders1d, key, 1)}},
		{"all orders", get("/api/v3/allOrders?symbol=LTCBTC"), ip(20)},
		{"order list", get("/api/v3/orderList?orderListId=1"), ip(4)},
		{"all order lists", get("/api/v3/allOrderList"), ip(20)},
		{"open order lists", get("/api/v3/openOrderList"), ip(6)},
		{"my trades", get("/api/v3/myTrades?symbol=LTCBTC"), ip(20)},
		{"my trades of an order", get("/api/v3/myTrades?symbol=LTCBTC&orderId=1"), ip(5)},
		{"unfilled order count", get("/api/v3/rateLimit/order"), ip(40)},
		{"commission rates", get("/api/v3/account/commission?symbol=LTCBTC"), ip(20)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pool.Classify(tc.req)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// Every endpoint of the table has a case in TestClassify: a table line added
// without a test fails here.
func TestEveryEndpointClassified(t *testing.T) {
	tested := map[string]bool{
		"GET /api/v3/depth": true, "GET /api/v3/klines": true, "GET /api/v3/exchangeInfo": true,
		"GET /api/v3/account": true, "GET /api/v3/order": true, "GET /api/v3/ticker/24hr": true,
		"GET /api/v3/openOrders": true, "POST /api/v3/order": true,
		"GET /api/v3/ping": true, "GET /api/v3/time": true, "GET /api/v3/trades": true,
		"GET /api/v3/historicalTrades": true, "GET /api/v3/aggTrades": true, "GET /api/v3/uiKlines": true,
		"GET /api/v3/avgPrice": true, "GET /api/v3/ticker/tradingDay": true, "GET /api/v3/ticker/price": true,
		"GET /api/v3/ticker/bookTicker": true, "GET /api/v3/ticker": true, "POST /api/v3/order/test": true,
		"DELETE /api/v3/order": true, "DELETE /api/v3/openOrders": true, "POST /api/v3/order/cancelReplace": true,
		"GET /api/v3/allOrders": true, "GET /api/v3/orderList": true, "GET /api/v3/allOrderList": true,
		"GET /api/v3/openOrderList": true, "GET /api/v3/myTrades": true, "GET /api/v3/rateLimit/order": true,
		"GET /api/v3/account/commission": true,
	}
	seen := map[string]bool{}
	for _, e := range binance.Spot().Endpoints {
		route := e.Method + " " + e.Path
		assert.False(t, seen[route], "endpoint %s listed twice", route)
		seen[route] = true
		assert.True(t, tested[route], "endpoint %s has no case in TestClassify", route)
	}
	assert.Len(t, seen, len(tested))
}

func TestTable(t *testing.T) {
	tb := binance.Spot()
	_, err := clientpool.New(tb)
	require.NoError(t, err, "clientpool.New rejects the table")

	want := map[string]window.Limit{
		binance.RuleRequestWeight: {N: 6000, Per: time.Minute},
		binance.RuleRawRequests:   {N: 61000, Per: 5 * time.Minute},
		binance.RuleOrders10s:     {N: 100, Per: 10 * time.Second},
		binance.RuleOrders1d:      {N: 200000, Per: 24 * time.Hour},
	}
	require.Len(t, tb.Rules, len(want))
	for _, r := range tb.Rules {
		assert.Equal(t, want[r.Name], r.Limit, r.Name)
		require.NotNil(t, r.Window, r.Name)
		assert.IsType(t, &win.FixedWindow{}, r.Window(r.Limit), r.Name)
		assert.True(t, strings.HasPrefix(r.Source, binance.DocsURL) && len(r.Source) > len(binance.DocsURL), "%s: Source %q", r.Name, r.Source)
		assert.Equal(t, r.Name == binance.RuleRequestWeight, r.PauseOnThrottle, r.Name)
		assert.Equal(t, r.Name != binance.RuleRawRequests, r.Usage != nil, "%s: usage header", r.Name)
	}
	for _, e := range tb.Endpoints {
		assert.True(t, strings.HasPrefix(e.Source, binance.DocsURL) && len(e.Source) > len(binance.DocsURL), "%s %s: Source %q", e.Method, e.Path, e.Source)
	}
	assert.Equal(t, []clientpool.Cost{{Rule: binance.RuleRequestWeight, Units: 1}, {Rule: binance.RuleRawRequests, Units: 1}}, tb.Default)

	// Each call returns a Table of its own.
	tb.Rules[0].Limit.N = 1
	assert.EqualValues(t, binance.LimitRequestWeight, binance.Spot().Rules[0].Limit.N)
}

// The usage headers reach the rules: the server's count becomes the pool's.
func TestUsageHeaders(t *testing.T) {
	pool, mock := newPool(t, binance.Spot())
	mock.Set(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	req, err := http.NewRequest(http.MethodPost, base+"/api/v3/order", nil)
	require.NoError(t, err)
	req.Header.Set(binance.HeaderAPIKey, key)
	charges, err := pool.Classify(req)
	require.NoError(t, err)
	ticket, err := pool.Acquire(t.Context(), charges...)
	require.NoError(t, err)
	ticket.Release()
	h := http.Header{}
	h.Set("X-MBX-USED-WEIGHT-1M", "1234")
	h.Set("X-MBX-ORDER-COUNT-10S", "7")
	h.Set("X-MBX-ORDER-COUNT-1D", "4321")
	ticket.ObserveHeaders(h)
	used := map[string]int64{}
	for _, s := range pool.Snapshot() {
		used[s.Rule+"["+s.Key+"]"] = s.Used
	}
	assert.Equal(t, map[string]int64{
		binance.RuleRequestWeight + "[]":        1234,
		binance.RuleRawRequests + "[]":          1,
		binance.RuleOrders10s + "[" + key + "]": 7,
		binance.RuleOrders1d + "[" + key + "]":  4321,
	}, used)
}

// A throttle pauses REQUEST_WEIGHT, which every request pays: for the
// Retry-After plus its spread (at most a tenth plus 50 ms), or for the first
// backoff step, [100ms, 200ms], when there is none (never its whole
// minute); nothing else.
func TestPauseOnThrottle(t *testing.T) {
	for _, retryAfter := range []time.Duration{2 * time.Second, 0} {
		pool, mock := newPool(t, binance.Spot())
		req, err := http.NewRequest(http.MethodPost, base+"/api/v3/order", nil)
		require.NoError(t, err)
		req.Header.Set(binance.HeaderAPIKey, key)
		charges, err := pool.Classify(req)
		require.NoError(t, err)
		ticket, err := pool.Acquire(t.Context(), charges...)
		require.NoError(t, err)
		pool.Throttled(clientpool.Throttle{Status: http.StatusTooManyRequests, RetryAfter: retryAfter}, ticket.Charges())
		ticket.Release()
		lo, hi := mock.Now().Add(100*time.Millisecond), mock.Now().Add(200*time.Millisecond)
		if retryAfter > 0 {
			lo, hi = mock.Now().Add(retryAfter), mock.Now().Add(retryAfter+retryAfter/10+50*time.Millisecond)
		}
		for _, s := range pool.Snapshot() {
			if s.Rule == binance.RuleRequestWeight {
				assert.True(t, !s.PausedUntil.Before(lo) && !s.PausedUntil.After(hi), "%s paused until %v, want in [%v, %v]", s.Rule, s.PausedUntil, lo, hi)
			} else {
				assert.True(t, s.PausedUntil.IsZero(), s.Rule)
			}
		}
	}
}

func TestWithTimeScale(t *testing.T) {
	tb := binance.Spot(binance.WithTimeScale(20))
	pool, _ := newPool(t, tb)
	want := map[string]time.Duration{
		binance.RuleRequestWeight: 3 * time.Second,
		binance.RuleRawRequests:   15 * time.Second,
		binance.RuleOrders10s:     500 * time.Millisecond,
		binance.RuleOrders1d:      72 * time.Minute,
	}
	for _, r := range tb.Rules {
		l, ok := pool.Limit(r.Name)
		require.True(t, ok)
		assert.Equal(t, want[r.Name], l.Per, r.Name)
		assert.Equal(t, want[r.Name], r.Limit.Per, r.Name)

		// The fixed window is aligned to multiples of the scaled window since
		// the Unix epoch: when full, it opens again at the next multiple.
		p := r.Window(r.Limit)
		now := time.Unix(1_700_000_000, 123_456_789)
		_, ok = p.Admit(now, r.Limit.N)
		require.True(t, ok, r.Name)
		p.Done(now, r.Limit.N) // the calls ended in this window
		next, ok := p.Admit(now, 1)
		require.False(t, ok, r.Name)
		since := time.Duration(now.UnixNano())
		assert.Equal(t, time.Unix(0, int64(since.Truncate(l.Per)+l.Per)), next, r.Name)
	}
	for _, bad := range []float64{0, -20, posInf(), nan()} {
		assert.Panics(t, func() { binance.WithTimeScale(bad) }, "%v", bad)
	}
	assert.Equal(t, time.Minute, binance.Spot(binance.WithTimeScale(1)).Rules[0].Limit.Per)
}

func posInf() float64 { z := 0.0; return 1 / z }
func nan() float64    { z := 0.0; return z / z }

// A -1015 throttle is about the account's order counts, not the IP, and
// pauses the shortest window that can explain it: ORDERS_10S, never
// ORDERS_1D (on the old code the daily key was paused for 24 h), whatever
// the message says and whatever the Retry-After.
func TestThrottleTargetsOrders(t *testing.T) {
	table := binance.Spot()
	cs := []clientpool.Charge{{Rule: binance.RuleRequestWeight, Weight: 1}, {Rule: binance.RuleRawRequests, Weight: 1},
		{Rule: binance.RuleOrders10s, Key: "k", Weight: 1}, {Rule: binance.RuleOrders1d, Key: "k", Weight: 1}}
	for _, body := range []string{
		`{"code":-1015,"msg":"Too many new orders."}`,
		`{"code":-1015,"msg":"Too many new orders; current limit is 100 orders per 10 SECOND."}`,
		`{"code":-1015,"msg":"Too many new orders; current limit is 200000 orders per 1 DAY."}`,
		`{"code":"-1015"}`,
	} {
		for _, ra := range []time.Duration{0, time.Second, 24 * time.Hour} {
			got := table.ThrottleTargets(clientpool.Throttle{Status: 429, Body: []byte(body), RetryAfter: ra}, cs)
			if len(got) != 1 || got[0].Rule != binance.RuleOrders10s || got[0].Key != "k" {
				t.Fatalf("%s, Retry-After %v: targets %v, want only ORDERS_10S[k]", body, ra, got)
			}
		}
	}
	if got := table.ThrottleTargets(clientpool.Throttle{Status: 429, Body: []byte(`{"code":-1003}`)}, cs); got != nil {
		t.Fatalf("a -1003 throttle picked %v; want nil (the IP's weight)", got)
	}
}
