package okx

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/internal/peek"
	"github.com/ratesem/ratesem/window"
)

// docsURL is the OKX API v5 documentation every Source in this package points
// into; a Source is docsURL followed by the #section of the endpoint.
const docsURL = "https://www.okx.com/docs-v5/en/"

// Per is the window of every OKX REST limit: "N requests per 2 seconds".
const Per = 2 * time.Second

// Rule names, as they appear in Charges, Events and Pool.SetLimit. Each rule
// applies per key; the key of each is in the package documentation's table.
const (
	RuleInstruments        = "instruments"          // GET /api/v5/public/instruments; IP + instType
	RuleTickers            = "tickers"              // GET /api/v5/market/tickers; IP
	RuleBooks              = "books"                // GET /api/v5/market/books; IP
	RuleCandles            = "candles"              // GET /api/v5/market/candles; IP
	RuleHistoryCandles     = "history-candles"      // GET /api/v5/market/history-candles; IP
	RuleFundingRate        = "funding-rate"         // GET /api/v5/public/funding-rate; IP + instId
	RuleFundingRateHistory = "funding-rate-history" // GET /api/v5/public/funding-rate-history; IP + instId
	RuleMarkPrice          = "mark-price"           // GET /api/v5/public/mark-price; IP + instId
	RulePlaceOrder         = "place-order"          // POST /api/v5/trade/order (and a batch of one order); UID + instId
	RuleCancelOrder        = "cancel-order"         // POST /api/v5/trade/cancel-order; UID + instId
	RuleAmendOrder         = "amend-order"          // POST /api/v5/trade/amend-order; UID + instId
	RuleBatchOrders        = "batch-orders"         // POST /api/v5/trade/batch-orders, per order; UID + instId
	RuleOrderDetails       = "order-details"        // GET /api/v5/trade/order; UID + instId
	RuleOrdersPending      = "orders-pending"       // GET /api/v5/trade/orders-pending; UID
	RuleBalance            = "balance"              // GET /api/v5/account/balance; UID
	RulePositions          = "positions"            // GET /api/v5/account/positions; UID
	RuleSubAccountOrders   = "sub-account-orders"   // new and amended orders of a sub-account; UID
)

// The N of each rule, in requests (orders for RuleBatchOrders and
// RuleSubAccountOrders) per Per, as documented by OKX (see the rule's
// Source). Users read them from Table's rules (Rule.Limit) or the package
// documentation's table.
const (
	limitInstruments        = 20
	limitTickers            = 20
	limitBooks              = 40
	limitCandles            = 40
	limitHistoryCandles     = 20
	limitFundingRate        = 10
	limitFundingRateHistory = 10
	limitMarkPrice          = 10
	limitPlaceOrder         = 60
	limitCancelOrder        = 60
	limitAmendOrder         = 60
	limitBatchOrders        = 300
	limitOrderDetails       = 60
	limitOrdersPending      = 60
	limitBalance            = 10
	limitPositions          = 10
	limitSubAccountOrders   = 1000
)

// Request parts the keys are read from.
const (
	// HeaderAPIKey is the request header that identifies the user (the "User
	// ID" of OKX's rules): requests with the same OK-ACCESS-KEY share the
	// UID limits.
	HeaderAPIKey = "OK-ACCESS-KEY"
)

// rules is OKX's rule table, one line per rule: name, N per Per, what the key
// is, whether a throttle pauses it, and the documentation section it is read
// from. Edit the values here (and the limit constants) when OKX changes them,
// then run `go test ./exchange/okx -run TestDocTable -update` to refresh the
// package documentation.
var rules = []ruleRow{
	{RuleInstruments, limitInstruments, byIPInstType, true, "public-data-rest-api-get-instruments"},
	{RuleTickers, limitTickers, byIP, false, "order-book-trading-market-data-get-tickers"},
	{RuleBooks, limitBooks, byIP, false, "order-book-trading-market-data-get-order-book"},
	{RuleCandles, limitCandles, byIP, false, "order-book-trading-market-data-get-candlesticks"},
	{RuleHistoryCandles, limitHistoryCandles, byIP, false, "order-book-trading-market-data-get-candlesticks-history"},
	{RuleFundingRate, limitFundingRate, byIPInstID, true, "public-data-rest-api-get-funding-rate"},
	{RuleFundingRateHistory, limitFundingRateHistory, byIPInstID, true, "public-data-rest-api-get-funding-rate-history"},
	{RuleMarkPrice, limitMarkPrice, byIPInstID, true, "public-data-rest-api-get-mark-price"},
	{RulePlaceOrder, limitPlaceOrder, byUIDInstID, true, "order-book-trading-trade-post-place-order"},
	{RuleCancelOrder, limitCancelOrder, byUIDInstID, true, "order-book-trading-trade-post-cancel-order"},
	{RuleAmendOrder, limitAmendOrder, byUIDInstID, true, "order-book-trading-trade-post-amend-order"},
	{RuleBatchOrders, limitBatchOrders, byUIDInstID, true, "order-book-trading-trade-post-place-multiple-orders"},
	{RuleOrderDetails, limitOrderDetails, byUIDInstID, true, "order-book-trading-trade-get-order-details"},
	{RuleOrdersPending, limitOrdersPending, byUID, false, "order-book-trading-trade-get-order-list"},
	{RuleBalance, limitBalance, byUID, false, "trading-account-rest-api-get-balance"},
	{RulePositions, limitPositions, byUID, false, "trading-account-rest-api-get-positions"},
	{RuleSubAccountOrders, limitSubAccountOrders, byUID, false, "overview-rate-limits-sub-account-rate-limit"},
}

// endpoints is OKX's endpoint table, one line per endpoint: method, path, the
// rules a request falls under (each costs 1, except where how says
// otherwise), and the documentation section.
var endpoints = []endpointRow{
	{"GET", "/api/v5/public/instruments", fromQuery, []string{RuleInstruments}, "public-data-rest-api-get-instruments"},
	{"GET", "/api/v5/market/tickers", fromQuery, []string{RuleTickers}, "order-book-trading-market-data-get-tickers"},
	{"GET", "/api/v5/market/books", fromQuery, []string{RuleBooks}, "order-book-trading-market-data-get-order-book"},
	{"GET", "/api/v5/market/candles", fromQuery, []string{RuleCandles}, "order-book-trading-market-data-get-candlesticks"},
	{"GET", "/api/v5/market/history-candles", fromQuery, []string{RuleHistoryCandles}, "order-book-trading-market-data-get-candlesticks-history"},
	{"GET", "/api/v5/public/funding-rate", fromQuery, []string{RuleFundingRate}, "public-data-rest-api-get-funding-rate"},
	{"GET", "/api/v5/public/funding-rate-history", fromQuery, []string{RuleFundingRateHistory}, "public-data-rest-api-get-funding-rate-history"},
	{"GET", "/api/v5/public/mark-price", fromQuery, []string{RuleMarkPrice}, "public-data-rest-api-get-mark-price"},
	{"POST", "/api/v5/trade/order", fromBody, []string{RulePlaceOrder, RuleSubAccountOrders}, "order-book-trading-trade-post-place-order"},
	{"POST", "/api/v5/trade/cancel-order", fromBody, []string{RuleCancelOrder}, "order-book-trading-trade-post-cancel-order"},
	{"POST", "/api/v5/trade/amend-order", fromBody, []string{RuleAmendOrder, RuleSubAccountOrders}, "order-book-trading-trade-post-amend-order"},
	{"POST", "/api/v5/trade/batch-orders", perOrder, []string{RuleBatchOrders, RuleSubAccountOrders}, "order-book-trading-trade-post-place-multiple-orders"},
	{"GET", "/api/v5/trade/order", fromQuery, []string{RuleOrderDetails}, "order-book-trading-trade-get-order-details"},
	{"GET", "/api/v5/trade/orders-pending", fromQuery, []string{RuleOrdersPending}, "order-book-trading-trade-get-order-list"},
	{"GET", "/api/v5/account/balance", fromQuery, []string{RuleBalance}, "trading-account-rest-api-get-balance"},
	{"GET", "/api/v5/account/positions", fromQuery, []string{RulePositions}, "trading-account-rest-api-get-positions"},
}

// Option configures Table.
type Option func(*config)

type config struct{ scale float64 }

// WithTimeScale divides the window of every rule by scale: with
// WithTimeScale(20) OKX's 2 s window lasts 100 ms, for tests and demos against
// a server (such as package exchangetest's) scaled the same way. The scaled
// window is Per / scale rounded up to a whole nanosecond, so it is never
// shorter than the server's. The default is 1, OKX's real limits. It panics
// unless scale is a finite number > 0.
func WithTimeScale(scale float64) Option {
	if !(scale > 0) || math.IsInf(scale, 0) {
		panic(fmt.Sprintf("ratesem: WithTimeScale(%v): want a finite scale > 0", scale))
	}
	return func(c *config) { c.scale = scale }
}

// Table returns OKX's REST limits as a clientpool.Table (see the package
// documentation for the rules, keys and endpoints). Every rule uses the
// completion window (Rule.Window nil), which holds at the server whatever the
// latency. Requests to endpoints not in the table are not limited
// (Table.Default is nil and Table.UnmatchedUnlimited is set): OKX limits
// each endpoint separately.
//
// Classify (and so Pool.Acquire through an httpclient Transport) reads the
// instId of a POST body through req.GetBody, leaving req.Body unread; it
// returns an error, matching no ratesem sentinel, for a POST whose body is
// not empty but has no GetBody, for a body over 1 MiB, and for a body that
// is not the JSON the endpoint takes. Table does not block; the Table's
// functions are safe for concurrent use.
//
// Each call returns a new Table, which the caller may change before giving it
// to clientpool.New.
func Table(opts ...Option) clientpool.Table {
	cfg := config{scale: 1}
	for _, o := range opts {
		o(&cfg)
	}
	per := scaled(Per, cfg.scale)
	t := clientpool.Table{UnmatchedUnlimited: true}
	for _, r := range rules {
		rule := clientpool.Rule{
			Name:            r.name,
			Limit:           window.Limit{N: r.n, Per: per},
			PauseOnThrottle: r.pause,
			Source:          docsURL + "#" + r.section,
		}
		if r.scope != byIP {
			rule.Key = r.scope.key
		}
		t.Rules = append(t.Rules, rule)
	}
	for _, e := range endpoints {
		ep := clientpool.Endpoint{Method: e.method, Path: e.path, Source: docsURL + "#" + e.section}
		switch e.how {
		case fromQuery:
			for _, name := range e.rules {
				ep.Costs = append(ep.Costs, clientpool.Cost{Rule: name, Units: 1})
			}
		case fromBody:
			ep.Charges = orderCharges(ruleScopes(e.rules))
		case perOrder:
			ep.Charges = batchCharges(e.rules[0], e.rules[1])
		}
		t.Endpoints = append(t.Endpoints, ep)
	}
	t.ThrottleTargets = throttleTargets
	return t
}

// throttleTargets points a throttle with code 50061 at the sub-account rule
// (https://www.okx.com/docs-v5/en/#overview-rate-limits-sub-account-rate-limit);
// any other throttle falls back to the rules marked to pause (the
// per-instrument ones).
func throttleTargets(th clientpool.Throttle, charges []clientpool.Charge) []clientpool.Charge {
	if peek.Code(th.Body) != codeSubAccountRateLimited {
		return nil
	}
	return pick(charges, RuleSubAccountOrders)
}

// pick returns the charges under the named rules, or nil when there are none.
func pick(charges []clientpool.Charge, rules ...string) []clientpool.Charge {
	var out []clientpool.Charge
	for _, c := range charges {
		if slices.Contains(rules, c.Rule) {
			out = append(out, c)
		}
	}
	return out
}

// scaled returns per / scale rounded up to a whole nanosecond.
func scaled(per time.Duration, scale float64) time.Duration {
	if scale == 1 {
		return per
	}
	return max(time.Duration(math.Ceil(float64(per)/scale)), 1)
}

type ruleRow struct {
	name    string
	n       int64
	scope   scope
	pause   bool
	section string
}

type endpointRow struct {
	method, path string
	how          how
	rules        []string
	section      string
}

// how says where an endpoint's keys come from and what it costs.
type how int

const (
	fromQuery how = iota // keys from the query and headers; 1 per rule
	fromBody             // instId from the JSON object body; 1 per rule
	perOrder             // a JSON array of orders: 1 per order (see batchCharges)
)

func ruleScopes(names []string) []ruleScope {
	out := make([]ruleScope, len(names))
	for i, name := range names {
		out[i] = ruleScope{name, scopeOf(name)}
	}
	return out
}

func scopeOf(name string) scope {
	for _, r := range rules {
		if r.name == name {
			return r.scope
		}
	}
	panic("ratesem: no rule " + name) // a typo in the tables above; TestTable catches it
}

type ruleScope struct {
	name  string
	scope scope
}

// orderCharges returns the Charges of an endpoint whose body is one JSON
// object with an instId: 1 under each rule, keyed by the request's UID and
// that instId.
func orderCharges(rs []ruleScope) func(*http.Request) ([]clientpool.Charge, error) {
	return func(req *http.Request) ([]clientpool.Charge, error) {
		var o order
		if err := readJSON(req, &o); err != nil {
			return nil, err
		}
		uid := req.Header.Get(HeaderAPIKey)
		charges := make([]clientpool.Charge, len(rs))
		for i, r := range rs {
			charges[i] = clientpool.Charge{Rule: r.name, Key: r.scope.keyOf(uid, o.InstID, req), Weight: 1}
		}
		return charges, nil
	}
}

// batchCharges returns the Charges of POST /api/v5/trade/batch-orders, whose
// body is a JSON array of orders: the batch rule counts each order against
// its own UID + instrument key (a batch over two instruments is charged to
// both), and the sub-account rule counts every order. A batch of exactly one
// order is, as OKX documents, counted as a single order: under
// RulePlaceOrder instead of the batch rule. An empty batch costs nothing.
func batchCharges(batch, sub string) func(*http.Request) ([]clientpool.Charge, error) {
	return func(req *http.Request) ([]clientpool.Charge, error) {
		var orders []order
		if err := readJSON(req, &orders); err != nil {
			return nil, err
		}
		if len(orders) == 0 {
			return nil, nil
		}
		uid := req.Header.Get(HeaderAPIKey)
		rule := batch
		if len(orders) == 1 {
			rule = RulePlaceOrder
		}
		charges := make([]clientpool.Charge, 0, len(orders)+1)
		index := make(map[string]int, len(orders))
		for _, o := range orders {
			key := byUIDInstID.keyOf(uid, o.InstID, req)
			if i, ok := index[key]; ok {
				charges[i].Weight++
				continue
			}
			index[key] = len(charges)
			charges = append(charges, clientpool.Charge{Rule: rule, Key: key, Weight: 1})
		}
		return append(charges, clientpool.Charge{Rule: sub, Key: byUID.keyOf(uid, "", req), Weight: int64(len(orders))}), nil
	}
}
