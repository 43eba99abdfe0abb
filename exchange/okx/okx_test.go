package okx_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/exchange/okx"
)

const (
	base = "https://www.okx.com"
	key  = "key-1"
)

func newPool(t *testing.T, tb clientpool.Table) *clientpool.Pool {
	t.Helper()
	p, err := clientpool.New(tb, clientpool.WithClock(clock.NewMock()))
	require.NoError(t, err)
	return p
}

// get builds a GET request as a server would see it, with the API key header
// when uid is not empty.
func get(target, uid string) *http.Request {
	req := httptest.NewRequest(http.MethodGet, base+target, nil)
	if uid != "" {
		req.Header.Set(okx.HeaderAPIKey, uid)
	}
	return req
}

// post builds a client POST request with a replayable body (GetBody set).
func post(t *testing.T, path, uid, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+path, bytes.NewReader([]byte(body)))
	require.NoError(t, err)
	require.NotNil(t, req.GetBody)
	if uid != "" {
		req.Header.Set(okx.HeaderAPIKey, uid)
	}
	return req
}

type ch = clientpool.Charge

func c(rule, key string, weight int64) ch { return ch{Rule: rule, Key: key, Weight: weight} }

func TestClassify(t *testing.T) {
	pool := newPool(t, okx.Table())
	const (
		batchTwo = `[{"instId":"BTC-USDT","side":"buy"},{"instId":"ETH-USDT","side":"buy"},{"instId":"BTC-USDT","side":"sell"}]`
		option   = "BTC-USD-250328-100000-C"
	)
	cases := []struct {
		name string
		req  *http.Request
		want []ch
	}{
		{"instruments", get("/api/v5/public/instruments?instType=SPOT", ""), []ch{c(okx.RuleInstruments, "SPOT", 1)}},
		{"instruments other type", get("/api/v5/public/instruments?instType=SWAP", key), []ch{c(okx.RuleInstruments, "SWAP", 1)}},
		{"tickers", get("/api/v5/market/tickers?instType=SPOT", ""), []ch{c(okx.RuleTickers, "", 1)}},
		{"books", get("/api/v5/market/books?instId=BTC-USDT", ""), []ch{c(okx.RuleBooks, "", 1)}},
		{"candles", get("/api/v5/market/candles?instId=BTC-USDT", ""), []ch{c(okx.RuleCandles, "", 1)}},
		{"history candles", get("/api/v5/market/history-candles?instId=BTC-USDT", ""), []ch{c(okx.RuleHistoryCandles, "", 1)}},
		{"funding rate", get("/api/v5/public/funding-rate?instId=BTC-USDT-SWAP", ""), []ch{c(okx.RuleFundingRate, "BTC-USDT-SWAP", 1)}},
		{"funding rate history", get("/api/v5/public/funding-rate-history?instId=ETH-USDT-SWAP", ""), []ch{c(okx.RuleFundingRateHistory, "ETH-USDT-SWAP", 1)}},
		{"mark price", get("/api/v5/public/mark-price?instType=SWAP&instId=BTC-USDT-SWAP", ""), []ch{c(okx.RuleMarkPrice, "BTC-USDT-SWAP", 1)}},
		{"place order", post(t, "/api/v5/trade/order", key, `{"instId":"BTC-USDT","tdMode":"cash","side":"buy","ordType":"limit","px":"2.15","sz":"2"}`),
			[]ch{c(okx.RulePlaceOrder, key+"|BTC-USDT", 1), c(okx.RuleSubAccountOrders, key, 1)}},
		{"place option order", post(t, "/api/v5/trade/order", key, `{"instId":"`+option+`"}`),
			[]ch{c(okx.RulePlaceOrder, key+"|BTC-USD", 1), c(okx.RuleSubAccountOrders, key, 1)}},
		{"place order without key", post(t, "/api/v5/trade/order", "", `{"instId":"BTC-USDT"}`),
			[]ch{c(okx.RulePlaceOrder, "|BTC-USDT", 1), c(okx.RuleSubAccountOrders, "", 1)}},
		{"cancel order", post(t, "/api/v5/trade/cancel-order", key, `{"ordId":"590908157585625111","instId":"BTC-USD-190927"}`),
			[]ch{c(okx.RuleCancelOrder, key+"|BTC-USD-190927", 1)}},
		{"amend order", post(t, "/api/v5/trade/amend-order", key, `{"ordId":"590909145319051111","newSz":"2","instId":"BTC-USDT"}`),
			[]ch{c(okx.RuleAmendOrder, key+"|BTC-USDT", 1), c(okx.RuleSubAccountOrders, key, 1)}},
		{"batch over two instruments", post(t, "/api/v5/trade/batch-orders", key, batchTwo),
			[]ch{c(okx.RuleBatchOrders, key+"|BTC-USDT", 2), c(okx.RuleBatchOrders, key+"|ETH-USDT", 1), c(okx.RuleSubAccountOrders, key, 3)}},
		{"batch of one order", post(t, "/api/v5/trade/batch-orders", key, `[{"instId":"BTC-USDT"}]`),
			[]ch{c(okx.RulePlaceOrder, key+"|BTC-USDT", 1), c(okx.RuleSubAccountOrders, key, 1)}},
		{"empty batch", post(t, "/api/v5/trade/batch-orders", key, `[]`), nil},
		{"order details", get("/api/v5/trade/order?ordId=1753197687182819328&instId=BTC-USDT", key),
			[]ch{c(okx.RuleOrderDetails, key+"|BTC-USDT", 1)}},
		{"orders pending", get("/api/v5/trade/orders-pending?instType=SPOT", key), []ch{c(okx.RuleOrdersPending, key, 1)}},
		{"balance", get("/api/v5/account/balance?ccy=BTC", key), []ch{c(okx.RuleBalance, key, 1)}},
		{"positions", get("/api/v5/account/positions", key), []ch{c(okx.RulePositions, key, 1)}},
		{"unknown endpoint", get("/api/v5/public/time", ""), []ch{}},
		{"GET of a POST endpoint", get("/api/v5/trade/cancel-order", key), []ch{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pool.Classify(tc.req)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// Every endpoint of the table is covered by TestClassify: a table line added
// without a test fails here.
func TestEveryEndpointClassified(t *testing.T) {
	tested := map[string]bool{
		"GET /api/v5/public/instruments": true, "GET /api/v5/market/tickers": true,
		"GET /api/v5/market/books": true, "GET /api/v5/market/candles": true,
		"GET /api/v5/market/history-candles": true, "GET /api/v5/public/funding-rate": true,
		"GET /api/v5/public/funding-rate-history": true, "GET /api/v5/public/mark-price": true,
		"POST /api/v5/trade/order": true, "POST /api/v5/trade/cancel-order": true,
		"POST /api/v5/trade/amend-order": true, "POST /api/v5/trade/batch-orders": true,
		"GET /api/v5/trade/order": true, "GET /api/v5/trade/orders-pending": true,
		"GET /api/v5/account/balance": true, "GET /api/v5/account/positions": true,
	}
	tb := okx.Table()
	seen := map[string]bool{}
	for _, e := range tb.Endpoints {
		route := e.Method + " " + e.Path
		assert.False(t, seen[route], "endpoint %s listed twice", route)
		seen[route] = true
		assert.True(t, tested[route], "endpoint %s has no case in TestClassify", route)
	}
	assert.Len(t, seen, len(tested))
}

func TestTable(t *testing.T) {
	tb := okx.Table()
	_, err := clientpool.New(tb)
	require.NoError(t, err, "clientpool.New rejects the table")
	names := map[string]bool{}
	for _, r := range tb.Rules {
		names[r.Name] = true
		assert.Equal(t, okx.Per, r.Limit.Per, r.Name)
		assert.Equal(t, 2*time.Second, r.Limit.Per, r.Name)
		assert.Nil(t, r.Window, "%s: OKX rules use the completion window", r.Name)
		assert.True(t, strings.HasPrefix(r.Source, okx.DocsURL+"#") && len(r.Source) > len(okx.DocsURL)+1, "%s: Source %q", r.Name, r.Source)
	}
	assert.Len(t, names, 17)
	for _, e := range tb.Endpoints {
		assert.True(t, strings.HasPrefix(e.Source, okx.DocsURL+"#") && len(e.Source) > len(okx.DocsURL)+1, "%s %s: Source %q", e.Method, e.Path, e.Source)
		assert.True(t, (e.Costs == nil) != (e.Charges == nil), "%s %s: Costs or Charges", e.Method, e.Path)
	}
	assert.Nil(t, tb.Default, "endpoints outside the table are not limited")

	limits := map[string]int64{
		okx.RuleInstruments: 20, okx.RuleTickers: 20, okx.RuleBooks: 40, okx.RuleCandles: 40,
		okx.RuleHistoryCandles: 20, okx.RuleFundingRate: 10, okx.RuleFundingRateHistory: 10,
		okx.RuleMarkPrice: 10, okx.RulePlaceOrder: 60, okx.RuleCancelOrder: 60, okx.RuleAmendOrder: 60,
		okx.RuleBatchOrders: 300, okx.RuleOrderDetails: 60, okx.RuleOrdersPending: 60,
		okx.RuleBalance: 10, okx.RulePositions: 10, okx.RuleSubAccountOrders: 1000,
	}
	for _, r := range tb.Rules {
		assert.Equal(t, limits[r.Name], r.Limit.N, r.Name)
	}

	// Each call returns a Table of its own.
	tb.Rules[0].Limit.N = 1
	assert.EqualValues(t, okx.LimitInstruments, okx.Table().Rules[0].Limit.N)
}

func TestPauseOnThrottle(t *testing.T) {
	paused := map[string]bool{
		okx.RuleInstruments: true, okx.RuleFundingRate: true, okx.RuleFundingRateHistory: true,
		okx.RuleMarkPrice: true, okx.RulePlaceOrder: true, okx.RuleCancelOrder: true,
		okx.RuleAmendOrder: true, okx.RuleBatchOrders: true, okx.RuleOrderDetails: true,
	}
	for _, r := range okx.Table().Rules {
		assert.Equal(t, paused[r.Name], r.PauseOnThrottle, r.Name)
	}

	// A throttled order pauses its instrument, not the sub-account.
	mock := clock.NewMock()
	pool, err := clientpool.New(okx.Table(), clientpool.WithClock(mock))
	require.NoError(t, err)
	charges, err := pool.Classify(post(t, "/api/v5/trade/order", key, `{"instId":"BTC-USDT"}`))
	require.NoError(t, err)
	ticket, err := pool.Acquire(t.Context(), charges...)
	require.NoError(t, err)
	pool.Throttled(clientpool.Throttle{Status: http.StatusTooManyRequests, RetryAfter: time.Second}, ticket.Charges())
	ticket.Release()
	state := map[string]time.Time{}
	for _, s := range pool.Snapshot() {
		state[s.Rule+"["+s.Key+"]"] = s.PausedUntil
	}
	until, lo := state[okx.RulePlaceOrder+"["+key+"|BTC-USDT]"], mock.Now().Add(time.Second)
	assert.True(t, !until.Before(lo) && !until.After(lo.Add(150*time.Millisecond)), "paused until %v, want the Retry-After of 1s plus at most 150ms of spread", until)
	assert.True(t, state[okx.RuleSubAccountOrders+"["+key+"]"].IsZero())
}

func TestPostBodyErrors(t *testing.T) {
	pool := newPool(t, okx.Table())
	for _, path := range []string{"/api/v5/trade/order", "/api/v5/trade/cancel-order", "/api/v5/trade/amend-order", "/api/v5/trade/batch-orders"} {
		t.Run(path, func(t *testing.T) {
			// A server-side request has a body but no GetBody.
			req := httptest.NewRequest(http.MethodPost, base+path, strings.NewReader(`{"instId":"BTC-USDT"}`))
			require.Nil(t, req.GetBody)
			_, err := pool.Classify(req)
			assert.ErrorContains(t, err, "GetBody")

			_, err = pool.Classify(post(t, path, key, `{"instId":`))
			assert.Error(t, err, "malformed JSON")

			_, err = pool.Classify(post(t, path, key, `"BTC-USDT"`))
			assert.Error(t, err, "JSON of the wrong shape")

			// GetBody failing is reported too.
			req = post(t, path, key, `{}`)
			req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("gone") }
			_, err = pool.Classify(req)
			assert.ErrorContains(t, err, "gone")
		})
	}
	_, err := pool.Classify(post(t, "/api/v5/trade/batch-orders", key, `{"instId":"BTC-USDT"}`))
	assert.Error(t, err, "a batch must be an array")
	_, err = pool.Classify(post(t, "/api/v5/trade/order", key, `[{"instId":"BTC-USDT"}]`))
	assert.Error(t, err, "a single order must be an object")
	_, err = pool.Classify(post(t, "/api/v5/trade/order", key, `{"instId":"BTC-USDT"}`+strings.Repeat(" ", 1<<20)))
	assert.ErrorContains(t, err, "larger than")
}

func TestEmptyPostBody(t *testing.T) {
	pool := newPool(t, okx.Table())
	req, err := http.NewRequest(http.MethodPost, base+"/api/v5/trade/cancel-order", nil)
	require.NoError(t, err)
	req.Header.Set(okx.HeaderAPIKey, key)
	got, err := pool.Classify(req)
	require.NoError(t, err)
	assert.Equal(t, []ch{c(okx.RuleCancelOrder, key+"|", 1)}, got)
}

// Classify reads the body through GetBody and leaves req.Body whole.
func TestClassifyLeavesBodyUnread(t *testing.T) {
	pool := newPool(t, okx.Table())
	const body = `[{"instId":"BTC-USDT"},{"instId":"ETH-USDT"}]`
	req := post(t, "/api/v5/trade/batch-orders", key, body)
	_, err := pool.Classify(req)
	require.NoError(t, err)
	b, err := io.ReadAll(req.Body)
	require.NoError(t, err)
	assert.Equal(t, body, string(b))
}

// The rules' Key reads a POST body too, for endpoints a user adds with Costs;
// an unreadable body makes the rule not apply there.
func TestRuleKeyFromBody(t *testing.T) {
	tb := okx.Table()
	tb.Endpoints = append(tb.Endpoints, clientpool.Endpoint{
		Method: http.MethodPost, Path: "/api/v5/trade/custom",
		Costs: []clientpool.Cost{{Rule: okx.RulePlaceOrder}, {Rule: okx.RuleSubAccountOrders}},
	})
	pool := newPool(t, tb)
	got, err := pool.Classify(post(t, "/api/v5/trade/custom", key, `{"instId":"ETH-USDT"}`))
	require.NoError(t, err)
	assert.Equal(t, []ch{c(okx.RulePlaceOrder, key+"|ETH-USDT", 1), c(okx.RuleSubAccountOrders, key, 1)}, got)
	got, err = pool.Classify(post(t, "/api/v5/trade/custom", key, `{`))
	require.NoError(t, err)
	assert.Equal(t, []ch{c(okx.RuleSubAccountOrders, key, 1)}, got)
}

func TestWithTimeScale(t *testing.T) {
	pool := newPool(t, okx.Table(okx.WithTimeScale(20)))
	for _, r := range okx.Table().Rules {
		l, ok := pool.Limit(r.Name)
		require.True(t, ok)
		assert.Equal(t, 100*time.Millisecond, l.Per, r.Name)
		assert.Equal(t, r.Limit.N, l.N, r.Name)
	}
	// Rounded up, never shorter than the server's window.
	for _, r := range okx.Table(okx.WithTimeScale(3)).Rules {
		assert.Equal(t, 666666667*time.Nanosecond, r.Limit.Per)
	}
	for _, r := range okx.Table(okx.WithTimeScale(0.5)).Rules {
		assert.Equal(t, 4*time.Second, r.Limit.Per)
	}
	for _, bad := range []float64{0, -1, posInf(), nan()} {
		assert.Panics(t, func() { okx.WithTimeScale(bad) }, "%v", bad)
	}
}

func posInf() float64 { z := 0.0; return 1 / z }
func nan() float64    { z := 0.0; return z / z }
