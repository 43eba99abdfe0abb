package exchangetest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
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

const okx429Body = `{"code":"50011","msg":"Too Many Requests","data":[]}`

// okxT0 is a multiple of 2 s since the Unix epoch, so that a test would
// notice if the server counted in fixed 2 s windows instead of sliding ones.
var okxT0 = time.Unix(1_700_000_000, 0)

func uid(k string) map[string]string { return map[string]string{"OK-ACCESS-KEY": k} }

func okxOrderBody(instID string) string {
	return `{"instId":"` + instID + `","tdMode":"cash","side":"buy","ordType":"limit","px":"43000","sz":"0.01"}`
}

func okxBatchBody(instIDs ...string) string {
	parts := make([]string, len(instIDs))
	for i, id := range instIDs {
		parts[i] = okxOrderBody(id)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func repeatStr(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// newOKX starts a server on the fake clock clk (if not nil) and closes it
// at cleanup.
func newOKX(t *testing.T, cfg exchangetest.OKXConfig, clk *fakeClock) *exchangetest.OKXServer {
	t.Helper()
	if clk != nil {
		cfg.Clock = clk
	}
	s := exchangetest.NewOKX(cfg)
	t.Cleanup(s.Close)
	return s
}

type okxBodyT struct {
	Code string            `json:"code"`
	Msg  string            `json:"msg"`
	Data []json.RawMessage `json:"data"`
}

func decodeOKXReader(t *testing.T, r io.Reader) okxBodyT {
	t.Helper()
	b, err := io.ReadAll(r)
	require.NoError(t, err)
	return decodeOKX(t, string(b))
}

func decodeOKX(t *testing.T, body string) okxBodyT {
	t.Helper()
	var b okxBodyT
	require.NoError(t, json.Unmarshal([]byte(body), &b), body)
	return b
}

// keyShape names the non-empty parts of k the way Rule.KeyedBy does.
func keyShape(k exchangetest.RuleKey) string {
	var parts []string
	if k.IP != "" {
		parts = append(parts, "IP")
	}
	if k.APIKey != "" {
		parts = append(parts, "UID")
	}
	if k.InstID != "" {
		parts = append(parts, "instId")
	}
	if k.InstType != "" {
		parts = append(parts, "instType")
	}
	return strings.Join(parts, "+")
}

type okxCase struct {
	rule  string
	limit int64
	keyed string
	units int64  // units of base (1, or the orders of a batch)
	base  call   // sent until its key is full
	same  []call // the same key by the rule, though other parts differ: rejected once full
	other []call // another key: still accepted once base's key is full
}

func okxCases() []okxCase {
	get := func(target string) call { return call{method: http.MethodGet, target: target} }
	from := func(c call, ip string) call { c.ip = ip; return c }
	withKey := func(c call, k string) call { c.header = uid(k); return c }
	post := func(path, body, k string) call {
		return call{method: http.MethodPost, target: path, body: body, header: uid(k)}
	}
	var cases []okxCase
	for _, ep := range []struct {
		path  string
		limit int64
	}{{"/api/v5/market/books", 40}, {"/api/v5/market/candles", 40}, {"/api/v5/market/history-candles", 20}} {
		cases = append(cases, okxCase{
			rule: "GET " + ep.path, limit: ep.limit, keyed: "IP", units: 1,
			base:  get(ep.path + "?instId=BTC-USDT"),
			same:  []call{get(ep.path + "?instId=ETH-USDT"), withKey(get(ep.path+"?instId=BTC-USDT"), "k1")},
			other: []call{from(get(ep.path+"?instId=BTC-USDT"), "10.0.0.2"), from(get(ep.path+"?instId=BTC-USDT"), "::1")},
		})
	}
	for _, path := range []string{"/api/v5/public/funding-rate", "/api/v5/public/funding-rate-history"} {
		cases = append(cases, okxCase{
			rule: "GET " + path, limit: 10, keyed: "IP+instId", units: 1,
			base:  get(path + "?instId=BTC-USDT-SWAP"),
			same:  []call{withKey(get(path+"?instId=BTC-USDT-SWAP&limit=5"), "k1")},
			other: []call{get(path + "?instId=ETH-USDT-SWAP"), from(get(path+"?instId=BTC-USDT-SWAP"), "10.0.0.2")},
		})
	}
	cases = append(cases,
		okxCase{
			rule: "GET /api/v5/public/instruments", limit: 20, keyed: "IP+instType", units: 1,
			base:  get("/api/v5/public/instruments?instType=SPOT"),
			same:  []call{get("/api/v5/public/instruments?instType=SPOT&instId=ETH-USDT")},
			other: []call{get("/api/v5/public/instruments?instType=SWAP"), from(get("/api/v5/public/instruments?instType=SPOT"), "10.0.0.2")},
		},
		okxCase{
			rule: "GET /api/v5/market/tickers", limit: 20, keyed: "IP", units: 1,
			base:  get("/api/v5/market/tickers?instType=SPOT"),
			same:  []call{get("/api/v5/market/tickers?instType=SWAP")},
			other: []call{from(get("/api/v5/market/tickers?instType=SPOT"), "10.0.0.2")},
		},
		okxCase{
			rule: "GET /api/v5/public/mark-price", limit: 10, keyed: "IP+instId", units: 1,
			base:  get("/api/v5/public/mark-price?instType=SWAP&instId=BTC-USDT-SWAP"),
			same:  []call{get("/api/v5/public/mark-price?instType=FUTURES&instId=BTC-USDT-SWAP")},
			other: []call{get("/api/v5/public/mark-price?instType=SWAP&instId=ETH-USDT-SWAP"), get("/api/v5/public/mark-price?instType=SWAP")},
		},
	)
	for _, path := range []string{"/api/v5/trade/order", "/api/v5/trade/cancel-order", "/api/v5/trade/amend-order"} {
		cases = append(cases, okxCase{
			rule: "POST " + path, limit: 60, keyed: "UID+instId", units: 1,
			base:  post(path, okxOrderBody("BTC-USDT"), "k1"),
			same:  []call{from(post(path, `{"instId":"BTC-USDT","ordId":"7","clOrdId":"x"}`, "k1"), "10.0.0.9")},
			other: []call{post(path, okxOrderBody("ETH-USDT"), "k1"), post(path, okxOrderBody("BTC-USDT"), "k2")},
		})
	}
	cases = append(cases,
		okxCase{
			rule: "POST /api/v5/trade/batch-orders", limit: 300, keyed: "UID+instId", units: 20,
			base: post("/api/v5/trade/batch-orders", okxBatchBody(repeatStr("BTC-USDT", 20)...), "k1"),
			same: []call{
				from(post("/api/v5/trade/batch-orders", okxBatchBody("BTC-USDT", "BTC-USDT"), "k1"), "10.0.0.9"),
				post("/api/v5/trade/batch-orders", okxBatchBody("ETH-USDT", "BTC-USDT"), "k1"), // rejected whole
			},
			other: []call{
				post("/api/v5/trade/batch-orders", okxBatchBody("ETH-USDT", "ETH-USDT"), "k1"),
				post("/api/v5/trade/batch-orders", okxBatchBody("BTC-USDT", "BTC-USDT"), "k2"),
			},
		},
		okxCase{
			rule: "GET /api/v5/trade/order", limit: 60, keyed: "UID+instId", units: 1,
			base:  withKey(get("/api/v5/trade/order?instId=BTC-USDT&ordId=1"), "k1"),
			same:  []call{from(withKey(get("/api/v5/trade/order?instId=BTC-USDT&ordId=2"), "k1"), "10.0.0.9")},
			other: []call{withKey(get("/api/v5/trade/order?instId=ETH-USDT&ordId=1"), "k1"), withKey(get("/api/v5/trade/order?instId=BTC-USDT&ordId=1"), "k2")},
		},
	)
	for _, ep := range []struct {
		path  string
		limit int64
	}{{"/api/v5/trade/orders-pending", 60}, {"/api/v5/account/balance", 10}, {"/api/v5/account/positions", 10}} {
		cases = append(cases, okxCase{
			rule: "GET " + ep.path, limit: ep.limit, keyed: "UID", units: 1,
			base:  withKey(get(ep.path), "k1"),
			same:  []call{from(withKey(get(ep.path+"?instId=ETH-USDT"), "k1"), "10.0.0.9")},
			other: []call{withKey(get(ep.path), "k2")},
		})
	}
	return cases
}

func TestOKXRules(t *testing.T) {
	s := newOKX(t, exchangetest.OKXConfig{}, nil)
	rules := s.Rules()
	require.Len(t, rules, 17)
	cases := okxCases()
	require.Len(t, cases, 16, "one case per endpoint")
	for _, tc := range cases {
		r, ok := s.Rule(tc.rule)
		require.True(t, ok, tc.rule)
		assert.Equal(t, exchangetest.Rule{
			Name: tc.rule, Limit: tc.limit, Per: 2 * time.Second, Window: 2 * time.Second,
			Fixed: false, KeyedBy: tc.keyed, Doc: r.Doc,
		}, r)
		assert.True(t, strings.HasPrefix(r.Doc, "https://www.okx.com/docs-v5/en/#"), r.Doc)
	}
	sub, ok := s.Rule(exchangetest.OKXSubAccountRule)
	require.True(t, ok)
	assert.Equal(t, int64(1000), sub.Limit)
	assert.Equal(t, "UID", sub.KeyedBy)
	assert.Equal(t, "https://www.okx.com/docs-v5/en/#overview-rate-limits-sub-account-rate-limit", sub.Doc)
	_, ok = s.Rule("GET /nope")
	assert.False(t, ok)

	// Rules returns a copy.
	rules[0].Limit = 1
	assert.NotEqual(t, int64(1), s.Rules()[0].Limit)

	scaled := newOKX(t, exchangetest.OKXConfig{Scale: 20, Limits: map[string]int64{"GET /api/v5/market/books": 3}}, nil)
	books, _ := scaled.Rule("GET /api/v5/market/books")
	assert.Equal(t, int64(3), books.Limit)
	assert.Equal(t, 2*time.Second, books.Per)
	assert.Equal(t, 100*time.Millisecond, books.Window)
}

func TestOKXConfigPanics(t *testing.T) {
	for name, cfg := range map[string]exchangetest.OKXConfig{
		"negative scale": {Scale: -1},
		"unknown rule":   {Limits: map[string]int64{"GET /api/v5/market/nope": 1}},
		"zero limit":     {Limits: map[string]int64{exchangetest.OKXSubAccountRule: 0}},
		"bad status":     {RateLimitStatus: 503},
		"infinite scale": {Scale: math.Inf(1)},
		"NaN scale":      {Scale: math.NaN()},
	} {
		assert.Panics(t, func() { exchangetest.NewOKX(cfg).Close() }, name)
	}
}

// TestOKXEachEndpoint drives every endpoint through the handler at exact
// instants: its limit is reached at one instant, then rejected with 50011
// until exactly 2 s later; requests with the same rule key are rejected,
// others are not.
func TestOKXEachEndpoint(t *testing.T) {
	for _, tc := range okxCases() {
		t.Run(tc.rule, func(t *testing.T) {
			clk := newFakeClock(okxT0)
			s := newOKX(t, exchangetest.OKXConfig{}, clk)
			h := s.Handler()
			n := int(tc.limit / tc.units)
			for i := range n {
				rec := tc.base.serve(h)
				require.Equal(t, http.StatusOK, rec.Code, "request %d: %s", i, rec.Body)
				assert.Equal(t, "0", decodeOKX(t, rec.Body.String()).Code)
			}
			rec := tc.base.serve(h)
			require.Equal(t, http.StatusTooManyRequests, rec.Code)
			assert.JSONEq(t, okx429Body, rec.Body.String())
			for _, c := range tc.same {
				assert.Equal(t, http.StatusTooManyRequests, c.serve(h).Code, "same key: %v", c)
			}
			for _, c := range tc.other {
				assert.Equal(t, http.StatusOK, c.serve(h).Code, "other key: %v", c)
			}

			clk.Set(okxT0.Add(2*time.Second - 1))
			assert.Equal(t, http.StatusTooManyRequests, tc.base.serve(h).Code, "still inside (t-2s, t]")
			clk.Set(okxT0.Add(2 * time.Second))
			for range n {
				require.Equal(t, http.StatusOK, tc.base.serve(h).Code, "the first %d left the window at exactly 2 s", n)
			}
			assert.Equal(t, http.StatusTooManyRequests, tc.base.serve(h).Code)

			log := s.Log()
			baseKey := log[0].Charges[0].Key
			assert.Equal(t, tc.rule, baseKey.Rule)
			assert.Equal(t, tc.keyed, keyShape(baseKey))
			assert.Equal(t, tc.limit, s.Peak()[baseKey])
			assert.Equal(t, tc.limit, s.Used(baseKey))
			assert.Empty(t, s.Violations())
			st := s.Stats()
			rejected := 3 + len(tc.same)
			assert.Equal(t, rejected, st.RateLimited)
			assert.Equal(t, rejected, st.Status429)
			assert.Equal(t, map[string]int{tc.rule: rejected}, st.LimitedBy)
			assert.Equal(t, 2*n+len(tc.other), st.Accepted)
			for _, e := range log {
				assert.Equal(t, tc.rule, e.Charges[0].Key.Rule)
				if e.Outcome == exchangetest.OutcomeRateLimited {
					assert.Equal(t, tc.rule, e.Rule)
					assert.Equal(t, "50011", e.Code)
				}
			}
		})
	}
}

// TestOKXSlidingNotFixed: the window slides with each arrival; a fixed
// 2 s window (okxT0 is aligned) would admit again at okxT0+2s.
func TestOKXSlidingNotFixed(t *testing.T) {
	clk := newFakeClock(okxT0.Add(1500 * time.Millisecond))
	s := newOKX(t, exchangetest.OKXConfig{}, clk)
	h := s.Handler()
	place := call{method: http.MethodPost, target: "/api/v5/trade/order", body: okxOrderBody("BTC-USDT"), header: uid("k")}
	for range 30 {
		require.Equal(t, 200, place.serve(h).Code)
	}
	clk.Set(okxT0.Add(2500 * time.Millisecond))
	for range 30 {
		require.Equal(t, 200, place.serve(h).Code)
	}
	clk.Set(okxT0.Add(2 * time.Second)) // a new fixed window, not a new sliding one
	assert.Equal(t, 429, place.serve(h).Code)
	clk.Set(okxT0.Add(3500*time.Millisecond - 1))
	assert.Equal(t, 429, place.serve(h).Code)
	clk.Set(okxT0.Add(3500 * time.Millisecond)) // the first 30 have left
	for range 30 {
		require.Equal(t, 200, place.serve(h).Code)
	}
	assert.Equal(t, 429, place.serve(h).Code)
	assert.Equal(t, map[exchangetest.RuleKey]int64{
		{Rule: "POST /api/v5/trade/order", APIKey: "k", InstID: "BTC-USDT"}: 60,
		{Rule: exchangetest.OKXSubAccountRule, APIKey: "k"}:                 60,
	}, s.Peak())
}

// TestOKXBatch: a batch counts its orders per instId, a batch over the
// limit of any instrument is rejected whole, and a batch of one order
// counts under the place-order rule.
func TestOKXBatch(t *testing.T) {
	const batchRule, placeRule = "POST /api/v5/trade/batch-orders", "POST /api/v5/trade/order"
	clk := newFakeClock(okxT0)
	s := newOKX(t, exchangetest.OKXConfig{Limits: map[string]int64{batchRule: 5, placeRule: 2}}, clk)
	h := s.Handler()
	batch := func(ids ...string) *http.Response {
		return call{method: http.MethodPost, target: "/api/v5/trade/batch-orders", body: okxBatchBody(ids...), header: uid("k")}.serve(h).Result()
	}
	key := func(rule, inst string) exchangetest.RuleKey {
		return exchangetest.RuleKey{Rule: rule, APIKey: "k", InstID: inst}
	}

	resp := batch("A", "A", "A", "B", "B")
	require.Equal(t, 200, resp.StatusCode)
	var b okxBodyT
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&b))
	require.Len(t, b.Data, 5, "one result per order")
	assert.Equal(t, int64(3), s.Used(key(batchRule, "A")))
	assert.Equal(t, int64(2), s.Used(key(batchRule, "B")))

	// C fits, A does not: nothing is placed.
	assert.Equal(t, 429, batch("C", "C", "A", "A", "A").StatusCode)
	assert.Zero(t, s.Used(key(batchRule, "C")))
	e := s.Log()[1]
	assert.Equal(t, exchangetest.OutcomeRateLimited, e.Outcome)
	assert.Equal(t, batchRule, e.Rule)
	assert.Equal(t, []exchangetest.Charge{
		{Key: key(batchRule, "C"), Units: 2},
		{Key: key(batchRule, "A"), Units: 3},
		{Key: exchangetest.RuleKey{Rule: exchangetest.OKXSubAccountRule, APIKey: "k"}, Units: 5},
	}, e.Charges)
	assert.Equal(t, 200, batch("C", "C", "C", "C", "C").StatusCode)
	assert.Equal(t, 429, batch("C", "D").StatusCode)

	// A batch of one order counts under the place-order rule (limit 2 here),
	// even for an instrument whose batch counter is full.
	assert.Equal(t, 200, batch("C").StatusCode)
	assert.Equal(t, 200, batch("C").StatusCode)
	assert.Equal(t, 429, batch("C").StatusCode)
	assert.Equal(t, placeRule, s.Log()[6].Rule)
	assert.Equal(t, int64(5), s.Used(key(batchRule, "C")))
	assert.Equal(t, int64(2), s.Used(key(placeRule, "C")))
	assert.Empty(t, s.Violations())
}

// TestOKXSubAccount: place and amend count toward the sub-account rule
// (each order of a batch too), cancel does not; the endpoint rules are
// independent of each other.
func TestOKXSubAccount(t *testing.T) {
	for _, code50061 := range []bool{false, true} {
		t.Run(fmt.Sprintf("50061=%v", code50061), func(t *testing.T) {
			clk := newFakeClock(okxT0)
			s := newOKX(t, exchangetest.OKXConfig{
				Limits:              map[string]int64{exchangetest.OKXSubAccountRule: 5, "POST /api/v5/trade/order": 2},
				SubAccountCode50061: code50061,
			}, clk)
			h := s.Handler()
			send := func(path, body, k string) *http.Response {
				return call{method: http.MethodPost, target: path, body: body, header: uid(k)}.serve(h).Result()
			}
			sub := exchangetest.RuleKey{Rule: exchangetest.OKXSubAccountRule, APIKey: "k"}

			assert.Equal(t, 200, send("/api/v5/trade/order", okxOrderBody("A"), "k").StatusCode)
			assert.Equal(t, 200, send("/api/v5/trade/order", okxOrderBody("A"), "k").StatusCode)
			// The place-order limit (2) is reached; amend and cancel are independent.
			r := send("/api/v5/trade/order", okxOrderBody("A"), "k")
			assert.Equal(t, 429, r.StatusCode, "rejected by the place-order rule: 50011 whatever SubAccountCode50061")
			assert.Equal(t, 200, send("/api/v5/trade/amend-order", okxOrderBody("A"), "k").StatusCode)
			for range 10 {
				require.Equal(t, 200, send("/api/v5/trade/cancel-order", okxOrderBody("B"), "k").StatusCode)
			}
			assert.Equal(t, int64(3), s.Used(sub), "place 2 + amend 1; cancels do not count")
			// A batch of 3 would make 6 > 5.
			r = send("/api/v5/trade/batch-orders", okxBatchBody("C", "C", "D"), "k")
			body, _ := io.ReadAll(r.Body)
			if code50061 {
				assert.Equal(t, 200, r.StatusCode)
				assert.JSONEq(t, `{"code":"50061","msg":"You've reached the maximum order rate limit for this account.","data":[]}`, string(body))
			} else {
				assert.Equal(t, 429, r.StatusCode)
				assert.JSONEq(t, okx429Body, string(body))
			}
			assert.Equal(t, 200, send("/api/v5/trade/batch-orders", okxBatchBody("C", "D"), "k").StatusCode)
			assert.Equal(t, int64(5), s.Used(sub))
			r = send("/api/v5/trade/amend-order", okxOrderBody("B"), "k")
			assert.NotEqual(t, "0", decodeOKXReader(t, r.Body).Code, "the sub-account counter is full")
			// Another UID has its own sub-account counter.
			assert.Equal(t, 200, send("/api/v5/trade/amend-order", okxOrderBody("B"), "k2").StatusCode)

			st := s.Stats()
			assert.Equal(t, map[string]int{"POST /api/v5/trade/order": 1, exchangetest.OKXSubAccountRule: 2}, st.LimitedBy)
			if code50061 {
				assert.Equal(t, 1, st.Status429)
			} else {
				assert.Equal(t, 3, st.Status429)
			}
			assert.Equal(t, int64(5), s.Peak()[sub])
			assert.Empty(t, s.Violations())

			clk.Set(okxT0.Add(2 * time.Second))
			assert.Equal(t, 200, send("/api/v5/trade/amend-order", okxOrderBody("B"), "k").StatusCode)
		})
	}
}

func TestOKXRateLimitStatus200(t *testing.T) {
	clk := newFakeClock(okxT0)
	s := newOKX(t, exchangetest.OKXConfig{RateLimitStatus: http.StatusOK, Limits: map[string]int64{"GET /api/v5/market/books": 1}}, clk)
	h := s.Handler()
	books := call{method: http.MethodGet, target: "/api/v5/market/books?instId=BTC-USDT"}
	require.Equal(t, 200, books.serve(h).Code)
	rec := books.serve(h)
	assert.Equal(t, 200, rec.Code)
	assert.JSONEq(t, `{"code":"50011","msg":"Rate limit reached. Please refer to API documentation and throttle requests accordingly.","data":[]}`, rec.Body.String())
	st := s.Stats()
	assert.Equal(t, 1, st.RateLimited)
	assert.Zero(t, st.Status429)
	e := s.Log()[1]
	assert.Equal(t, exchangetest.OutcomeRateLimited, e.Outcome)
	assert.Equal(t, 200, e.Status)
	assert.Equal(t, "50011", e.Code)
}

// TestOKXInvalid: malformed requests get OKX's error codes and count
// toward nothing.
func TestOKXInvalid(t *testing.T) {
	clk := newFakeClock(okxT0)
	limits := map[string]int64{}
	for _, r := range newOKX(t, exchangetest.OKXConfig{}, nil).Rules() {
		limits[r.Name] = 1
	}
	limits[exchangetest.OKXSubAccountRule] = 1000 // shared by place and amend
	s := newOKX(t, exchangetest.OKXConfig{Limits: limits}, clk)
	h := s.Handler()
	get := func(target string) call { return call{method: http.MethodGet, target: target} }
	post := func(path, body string) call {
		return call{method: http.MethodPost, target: path, body: body, header: uid("k")}
	}
	for _, tc := range []struct {
		c      call
		status int
		body   string
	}{
		{get("/api/v5/market/nope"), 404, ""},
		{get("/"), 404, ""},
		{call{method: http.MethodPost, target: "/api/v5/market/books?instId=A"}, 405, `{"code":"50115","msg":"Invalid request method.","data":[]}`},
		{get("/api/v5/trade/cancel-order"), 405, `{"code":"50115","msg":"Invalid request method.","data":[]}`},
		{get("/api/v5/account/balance"), 401, `{"code":"50103","msg":"Request header \"OK-ACCESS-KEY\" cannot be empty.","data":[]}`},
		{call{method: http.MethodPost, target: "/api/v5/trade/order", body: okxOrderBody("A")}, 401, ""},
		{get("/api/v5/market/books"), 400, `{"code":"50014","msg":"Parameter instId can not be empty.","data":[]}`},
		{get("/api/v5/market/books?instId="), 400, ""},
		{get("/api/v5/public/instruments?instId=BTC-USDT"), 400, `{"code":"50014","msg":"Parameter instType can not be empty.","data":[]}`},
		{get("/api/v5/market/tickers"), 400, ""},
		{get("/api/v5/public/mark-price?instId=BTC-USDT-SWAP"), 400, ""},
		{call{method: http.MethodGet, target: "/api/v5/trade/order", header: uid("k")}, 400, ""},
		{post("/api/v5/trade/order", ""), 400, `{"code":"50000","msg":"Body for POST request cannot be empty.","data":[]}`},
		{post("/api/v5/trade/order", "{"), 400, `{"code":"50002","msg":"JSON syntax error","data":[]}`},
		{post("/api/v5/trade/order", `{"side":"buy"}`), 400, `{"code":"50014","msg":"Parameter instId can not be empty.","data":[]}`},
		{post("/api/v5/trade/order", `[`+okxOrderBody("A")+`]`), 400, ""},
		{post("/api/v5/trade/batch-orders", okxOrderBody("A")), 400, ""},
		{post("/api/v5/trade/batch-orders", `[]`), 400, ""},
		{post("/api/v5/trade/batch-orders", `[{"instId":"A"},{"sz":"1"}]`), 400, ""},
		{post("/api/v5/trade/batch-orders", okxBatchBody(repeatStr("A", 21)...)), 400, `{"code":"51000","msg":"Parameter orders error","data":[]}`},
	} {
		rec := tc.c.serve(h)
		assert.Equal(t, tc.status, rec.Code, "%v: %s", tc.c, rec.Body)
		if tc.body != "" {
			assert.JSONEq(t, tc.body, rec.Body.String(), "%v", tc.c)
		}
	}
	st := s.Stats()
	assert.Equal(t, st.Requests, st.Invalid)
	for _, e := range s.Log() {
		assert.Nil(t, e.Charges)
		assert.Equal(t, exchangetest.OutcomeInvalid, e.Outcome)
	}
	assert.Empty(t, s.Peak())
	// Nothing was counted: each limit of 1 still admits one request.
	for _, tc := range okxCases() {
		rec := tc.base.serve(h)
		if tc.units == 1 {
			assert.Equal(t, 200, rec.Code, "%s: %s", tc.rule, rec.Body)
		}
	}
}

// TestOKXBodies checks the shape of each endpoint's answer.
func TestOKXBodies(t *testing.T) {
	clk := newFakeClock(okxT0)
	s := newOKX(t, exchangetest.OKXConfig{}, clk)
	h := s.Handler()
	data := func(c call) []json.RawMessage {
		t.Helper()
		rec := c.serve(h)
		require.Equal(t, 200, rec.Code, rec.Body.String())
		assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
		b := decodeOKX(t, rec.Body.String())
		require.Equal(t, "0", b.Code)
		assert.Equal(t, "", b.Msg)
		return b.Data
	}
	fields := func(raw json.RawMessage) map[string]any {
		var m map[string]any
		require.NoError(t, json.Unmarshal(raw, &m), string(raw))
		return m
	}
	get := func(target string) call { return call{method: http.MethodGet, target: target, header: uid("k")} }
	post := func(path, body string) call {
		return call{method: http.MethodPost, target: path, body: body, header: uid("k")}
	}

	m := fields(data(get("/api/v5/public/instruments?instType=SWAP"))[0])
	assert.Equal(t, "SWAP", m["instType"])
	assert.Equal(t, "BTC-USDT-SWAP", m["instId"])
	assert.Len(t, data(get("/api/v5/market/tickers?instType=SPOT")), 2)
	m = fields(data(get("/api/v5/market/books?instId=BTC-USDT"))[0])
	assert.NotEmpty(t, m["asks"])
	assert.NotEmpty(t, m["bids"])
	for _, path := range []string{"/api/v5/market/candles", "/api/v5/market/history-candles"} {
		rows := data(get(path + "?instId=BTC-USDT"))
		require.Len(t, rows, 2)
		var candle []string
		require.NoError(t, json.Unmarshal(rows[0], &candle), "candles are arrays of strings")
		assert.Len(t, candle, 9)
		assert.Equal(t, strconv.FormatInt(okxT0.Truncate(time.Minute).UnixMilli(), 10), candle[0])
	}
	m = fields(data(get("/api/v5/public/funding-rate?instId=ETH-USDT-SWAP"))[0])
	assert.Equal(t, "ETH-USDT-SWAP", m["instId"])
	assert.Equal(t, "0.0001", m["fundingRate"])
	m = fields(data(get("/api/v5/public/funding-rate-history?instId=ETH-USDT-SWAP"))[0])
	assert.Equal(t, "ETH-USDT-SWAP", m["instId"])
	assert.Equal(t, "1700000000000", m["fundingTime"], "the same rows as OKXServer")
	m = fields(data(get("/api/v5/public/mark-price?instType=SWAP&instId=BTC-USDT-SWAP"))[0])
	assert.Equal(t, "43000.5", m["markPx"])

	first := fields(data(post("/api/v5/trade/order", `{"instId":"BTC-USDT","clOrdId":"c1","side":"buy"}`))[0])
	assert.Equal(t, "c1", first["clOrdId"])
	assert.Equal(t, "0", first["sCode"])
	batch := data(post("/api/v5/trade/batch-orders", okxBatchBody("BTC-USDT", "ETH-USDT")))
	require.Len(t, batch, 2)
	id1, _ := strconv.ParseInt(first["ordId"].(string), 10, 64)
	id2, _ := strconv.ParseInt(fields(batch[0])["ordId"].(string), 10, 64)
	id3, _ := strconv.ParseInt(fields(batch[1])["ordId"].(string), 10, 64)
	assert.Less(t, id1, id2)
	assert.Less(t, id2, id3)
	m = fields(data(post("/api/v5/trade/cancel-order", `{"instId":"BTC-USDT","ordId":"123"}`))[0])
	assert.Equal(t, "123", m["ordId"])
	m = fields(data(post("/api/v5/trade/amend-order", `{"instId":"BTC-USDT","ordId":"123","newSz":"2"}`))[0])
	assert.Equal(t, "123", m["ordId"])
	m = fields(data(get("/api/v5/trade/order?instId=BTC-USDT&ordId=123"))[0])
	assert.Equal(t, "123", m["ordId"])
	assert.Equal(t, "BTC-USDT", m["instId"])
	assert.Empty(t, data(get("/api/v5/trade/orders-pending")))
	assert.Empty(t, data(get("/api/v5/account/positions")))
	m = fields(data(get("/api/v5/account/balance"))[0])
	assert.Equal(t, "10000", m["totalEq"])

	// Trade answers carry inTime/outTime in microseconds.
	rec := post("/api/v5/trade/order", okxOrderBody("SOL-USDT")).serve(h)
	var tr struct{ InTime, OutTime string }
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &tr))
	assert.Equal(t, strconv.FormatInt(okxT0.UnixMicro(), 10), tr.InTime)
}

// TestOKXScaleSynctest runs the server on in-memory connections inside a
// synctest bubble: virtual time makes the scaled 100 ms windows exact.
func TestOKXScaleSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := exchangetest.NewOKX(exchangetest.OKXConfig{
			Scale: 20, InMemory: true, Latency: exchangetest.FixedLatency(5 * time.Millisecond),
		})
		defer s.Close()
		assert.Equal(t, "http://okx.exchangetest.invalid", s.URL())
		u := s.URL() + "/api/v5/public/funding-rate?instId=BTC-USDT-SWAP"

		// 15 at once from one IP: 10 pass. Another IP has its own counter.
		statuses := func(c *http.Client, n int) map[int]int {
			var mu sync.Mutex
			got := map[int]int{}
			var wg sync.WaitGroup
			for range n {
				wg.Go(func() {
					resp, err := c.Get(u)
					if !assert.NoError(t, err) {
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					mu.Lock()
					got[resp.StatusCode]++
					mu.Unlock()
				})
			}
			wg.Wait()
			return got
		}
		start := time.Now()
		assert.Equal(t, map[int]int{200: 10, 429: 5}, statuses(s.Client(), 15))
		assert.Equal(t, 5*time.Millisecond, time.Since(start), "all answered after the latency, at the same virtual instant")
		assert.Equal(t, map[int]int{200: 10}, statuses(s.ClientFrom("10.9.8.7"), 10))

		// The window is 2 s / 20 = 100 ms, counted from the arrivals at start.
		var early, onTime map[int]int
		var wg sync.WaitGroup
		wg.Go(func() {
			time.Sleep(time.Until(start.Add(100*time.Millisecond - 1)))
			early = statuses(s.Client(), 3)
		})
		wg.Go(func() {
			time.Sleep(time.Until(start.Add(100 * time.Millisecond)))
			onTime = statuses(s.Client(), 11)
		})
		wg.Wait()
		assert.Equal(t, map[int]int{429: 3}, early, "1 ns before the first ten leave")
		assert.Equal(t, map[int]int{200: 10, 429: 1}, onTime, "exactly when they leave")

		st := s.Stats()
		assert.Equal(t, 30, st.Accepted)
		assert.Equal(t, 9, st.Status429)
		assert.Empty(t, s.Violations())
		peak := s.Peak()
		assert.Equal(t, int64(10), peak[exchangetest.RuleKey{Rule: "GET /api/v5/public/funding-rate", IP: "127.0.0.1", InstID: "BTC-USDT-SWAP"}])
		assert.Equal(t, int64(10), peak[exchangetest.RuleKey{Rule: "GET /api/v5/public/funding-rate", IP: "10.9.8.7", InstID: "BTC-USDT-SWAP"}])
	})
}

// TestOKXUnderLoadRealTime hammers a scaled server over TCP from many
// goroutines. Timing is up to the scheduler, so the test checks the
// server's own log: no rule is exceeded, the clients saw what the log
// says, and every rejection happened with its key full (no needless
// rejection).
func TestOKXUnderLoadRealTime(t *testing.T) {
	s := newOKX(t, exchangetest.OKXConfig{
		Scale:   100, // 20 ms windows
		Latency: exchangetest.UniformLatency(0, time.Millisecond),
		Limits:  map[string]int64{"POST /api/v5/trade/batch-orders": 12, exchangetest.OKXSubAccountRule: 15},
	}, nil)
	c := s.Client()
	const goroutines, perG = 12, 30
	counts := make([]map[int]int, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			counts[g] = map[int]int{}
			for i := range perG {
				var req *http.Request
				switch (g + i) % 3 {
				case 0:
					req, _ = http.NewRequest(http.MethodGet, s.URL()+"/api/v5/market/books?instId=BTC-USDT", nil)
				case 1:
					req, _ = http.NewRequest(http.MethodPost, s.URL()+"/api/v5/trade/batch-orders", strings.NewReader(okxBatchBody("A", "B", "A")))
				default:
					req, _ = http.NewRequest(http.MethodPost, s.URL()+"/api/v5/trade/amend-order", strings.NewReader(okxOrderBody("A")))
				}
				req.Header.Set("OK-ACCESS-KEY", "k")
				resp, err := c.Do(req)
				if !assert.NoError(t, err) {
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				counts[g][resp.StatusCode]++
			}
		})
	}
	wg.Wait()

	log := s.Log()
	require.Len(t, log, goroutines*perG)
	st := s.Stats()
	seen := map[int]int{}
	for _, m := range counts {
		for k, v := range m {
			seen[k] += v
		}
	}
	assert.Equal(t, map[int]int{200: st.Accepted, 429: st.Status429}, seen)
	assert.Empty(t, s.Violations())

	rules := map[string]exchangetest.Rule{}
	for _, r := range s.Rules() {
		rules[r.Name] = r
	}
	for i, e := range log {
		if e.Outcome != exchangetest.OutcomeRateLimited {
			continue
		}
		// The rejecting rule's key was too full for this request at e.At.
		var mine exchangetest.Charge
		for _, c := range e.Charges {
			if c.Key.Rule == e.Rule {
				mine = c
			}
		}
		var used int64
		for _, x := range log[:i] {
			if x.Outcome != exchangetest.OutcomeAccepted || e.At.Sub(x.At) >= rules[e.Rule].Window {
				continue
			}
			for _, c := range x.Charges {
				if c.Key == mine.Key {
					used += c.Units
				}
			}
		}
		assert.Greater(t, used+mine.Units, rules[e.Rule].Limit, "needless rejection at %d by %s", i, e.Rule)
	}
	t.Logf("%d requests: %d accepted, %d rejected %v", st.Requests, st.Accepted, st.RateLimited, st.LimitedBy)
}

// TestOKXCloseWithCancelledLatency: a handler waiting out its latency
// returns when the client leaves, so Close does not block.
func TestOKXCloseWithCancelledLatency(t *testing.T) {
	s := exchangetest.NewOKX(exchangetest.OKXConfig{Latency: exchangetest.FixedLatency(time.Hour)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+"/api/v5/market/books?instId=A", nil)
		resp, err := s.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	require.Eventually(t, func() bool { return len(s.Log()) == 1 }, 10*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close blocked: the handler ignored the request's cancellation")
	}
	assert.Equal(t, exchangetest.OutcomeAccepted, s.Log()[0].Outcome)
}

func ExampleNewOKX() {
	// A fixed clock puts every request in the same 2 s window.
	at := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	s := exchangetest.NewOKX(exchangetest.OKXConfig{Clock: newFakeClock(at)})
	defer s.Close()

	// OKX: 40 order-book requests per 2 s per IP.
	for i := 1; i <= 41; i++ {
		resp, err := s.Client().Get(s.URL() + "/api/v5/market/books?instId=BTC-USDT")
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			fmt.Println(i, resp.StatusCode, string(body))
		}
	}
	st := s.Stats()
	fmt.Println("accepted:", st.Accepted, "rejected:", st.RateLimited, st.LimitedBy)
	for k, n := range s.Peak() {
		fmt.Printf("peak %v: %d\n", k, n)
	}
	fmt.Println("violations:", len(s.Violations()))
	// Output:
	// 41 429 {"code":"50011","msg":"Too Many Requests","data":[]}
	// accepted: 40 rejected: 1 map[GET /api/v5/market/books:1]
	// peak GET /api/v5/market/books ip=127.0.0.1: 40
	// violations: 0
}
