package binance

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/internal/peek"
	"github.com/ratesem/ratesem/window"
)

// DocsURL is the Binance Spot API documentation every Source in this package
// points into; a Source is DocsURL followed by a page and its #section.
const DocsURL = "https://developers.binance.com/docs/binance-spot-api-docs/"

// Rule names, as they appear in Charges, Events and Pool.SetLimit: Binance's
// rateLimitType, with the interval for the two ORDERS limits.
const (
	RuleRequestWeight = "REQUEST_WEIGHT" // weight units per IP per minute
	RuleRawRequests   = "RAW_REQUESTS"   // requests per IP per 5 minutes
	RuleOrders10s     = "ORDERS_10S"     // orders per account in 10 s
	RuleOrders1d      = "ORDERS_1D"      // orders per account in a day
)

// Limits: LimitX is the N of rule X (weight units for REQUEST_WEIGHT, requests
// for RAW_REQUESTS, orders for the ORDERS rules) per PerX, a time.Duration, as
// GET /api/v3/exchangeInfo reports them in "rateLimits" (source: DocsURL +
// "rest-api/limits", and each rule's Source). Binance may change them, and
// gives some accounts others; Pool.SetLimit changes them at run time.
const (
	LimitRequestWeight = 6000
	PerRequestWeight   = time.Minute
	LimitRawRequests   = 61000
	PerRawRequests     = 5 * time.Minute
	LimitOrders10s     = 100
	PerOrders10s       = 10 * time.Second
	LimitOrders1d      = 200000
	PerOrders1d        = 24 * time.Hour
)

// Request and response headers.
const (
	// HeaderAPIKey identifies the account the ORDERS limits count against.
	HeaderAPIKey = "X-MBX-APIKEY"
	// HeaderUsedWeight1m is the IP's REQUEST_WEIGHT used in the current minute.
	HeaderUsedWeight1m = "X-MBX-USED-WEIGHT-1M"
	// HeaderOrderCount10s and HeaderOrderCount1d are the account's order
	// counts in the current 10 s and day.
	HeaderOrderCount10s = "X-MBX-ORDER-COUNT-10S"
	HeaderOrderCount1d  = "X-MBX-ORDER-COUNT-1D"
)

// rules is Binance Spot's rule table, one line per rule: name, N per window,
// what the key is, the response header with the server's count, whether a
// throttle pauses it, and where the rule is documented. Edit the values here
// (and the Limit constants) when Binance changes them, then run
// `go test ./exchange/binance -run TestDocTable -update` to refresh the
// package documentation.
var rules = []ruleRow{
	{RuleRequestWeight, LimitRequestWeight, PerRequestWeight, byIP, HeaderUsedWeight1m, true, "rest-api/limits#ip-limits"},
	{RuleRawRequests, LimitRawRequests, PerRawRequests, byIP, "", false, "enums#rate-limiters-ratelimittype"},
	{RuleOrders10s, LimitOrders10s, PerOrders10s, byAccount, HeaderOrderCount10s, false, "rest-api/limits#unfilled-order-count"},
	{RuleOrders1d, LimitOrders1d, PerOrders1d, byAccount, HeaderOrderCount1d, false, "rest-api/limits#unfilled-order-count"},
}

// endpoints is Binance Spot's endpoint table, one line per endpoint: method,
// path, REQUEST_WEIGHT (fixed, or computed from the request as described),
// the units in each ORDERS rule, and the documentation section. Every
// request also counts 1 in RAW_REQUESTS. The weights are those of the
// "Weight" line of each endpoint in DocsURL's REST API pages (read from
// github.com/binance/binance-spot-api-docs, rest-api.md, July 2026).
var endpoints = []endpointRow{
	{"GET", "/api/v3/ping", 1, nil, "", 0, "rest-api/general-endpoints#test-connectivity"},
	{"GET", "/api/v3/time", 1, nil, "", 0, "rest-api/general-endpoints#check-server-time"},
	{"GET", "/api/v3/exchangeInfo", 20, nil, "", 0, "rest-api/general-endpoints#exchange-information"},
	{"GET", "/api/v3/depth", 0, depthWeight, "limit<=100 (default): 5, <=500: 25, <=1000: 50, else 250", 0, "rest-api/market-data-endpoints#order-book"},
	{"GET", "/api/v3/trades", 25, nil, "", 0, "rest-api/market-data-endpoints#recent-trades-list"},
	{"GET", "/api/v3/historicalTrades", 25, nil, "", 0, "rest-api/market-data-endpoints#old-trade-lookup"},
	{"GET", "/api/v3/aggTrades", 4, nil, "", 0, "rest-api/market-data-endpoints#compressedaggregate-trades-list"},
	{"GET", "/api/v3/klines", 2, nil, "", 0, "rest-api/market-data-endpoints#klinecandlestick-data"},
	{"GET", "/api/v3/uiKlines", 2, nil, "", 0, "rest-api/market-data-endpoints#uiklines"},
	{"GET", "/api/v3/avgPrice", 2, nil, "", 0, "rest-api/market-data-endpoints#current-average-price"},
	{"GET", "/api/v3/ticker/24hr", 0, tickerWeight, "symbol: 2; symbols<=20: 2, <=100: 40; else 80", 0, "rest-api/market-data-endpoints#24hr-ticker-price-change-statistics"},
	{"GET", "/api/v3/ticker/tradingDay", 0, perSymbolWeight, "4 per symbol, at most 200; else 200", 0, "rest-api/market-data-endpoints#trading-day-ticker"},
	{"GET", "/api/v3/ticker/price", 0, priceTickerWeight, "symbol: 2; else 4", 0, "rest-api/market-data-endpoints#symbol-price-ticker"},
	{"GET", "/api/v3/ticker/bookTicker", 0, priceTickerWeight, "symbol: 2; else 4", 0, "rest-api/market-data-endpoints#symbol-order-book-ticker"},
	{"GET", "/api/v3/ticker", 0, perSymbolWeight, "4 per symbol, at most 200; else 200", 0, "rest-api/market-data-endpoints#rolling-window-price-change-statistics"},
	{"POST", "/api/v3/order", 1, nil, "", 1, "rest-api/trading-endpoints#new-order-trade"},
	{"POST", "/api/v3/order/test", 0, orderTestWeight, "computeCommissionRates=true: 20; else 1", 0, "rest-api/trading-endpoints#test-new-order-trade"},
	{"DELETE", "/api/v3/order", 1, nil, "", 0, "rest-api/trading-endpoints#cancel-order-trade"},
	{"DELETE", "/api/v3/openOrders", 1, nil, "", 0, "rest-api/trading-endpoints#cancel-all-open-orders-on-a-symbol-trade"},
	{"POST", "/api/v3/order/cancelReplace", 1, nil, "", 1, "rest-api/trading-endpoints#cancel-an-existing-order-and-send-a-new-order-trade"},
	{"GET", "/api/v3/account", 20, nil, "", 0, "rest-api/account-endpoints#account-information-user_data"},
	{"GET", "/api/v3/order", 4, nil, "", 0, "rest-api/account-endpoints#query-order-user_data"},
	{"GET", "/api/v3/openOrders", 0, openOrdersWeight, "symbol: 6; else 80", 0, "rest-api/account-endpoints#current-open-orders-user_data"},
	{"GET", "/api/v3/allOrders", 20, nil, "", 0, "rest-api/account-endpoints#all-orders-user_data"},
	{"GET", "/api/v3/orderList", 4, nil, "", 0, "rest-api/account-endpoints#query-order-list-user_data"},
	{"GET", "/api/v3/allOrderList", 20, nil, "", 0, "rest-api/account-endpoints#query-all-order-lists-user_data"},
	{"GET", "/api/v3/openOrderList", 6, nil, "", 0, "rest-api/account-endpoints#query-open-order-lists-user_data"},
	{"GET", "/api/v3/myTrades", 0, myTradesWeight, "orderId: 5; else 20", 0, "rest-api/account-endpoints#account-trade-list-user_data"},
	{"GET", "/api/v3/rateLimit/order", 40, nil, "", 0, "rest-api/account-endpoints#query-unfilled-order-count-user_data"},
	{"GET", "/api/v3/account/commission", 20, nil, "", 0, "rest-api/account-endpoints#query-commission-rates-user_data"},
}

// Option configures Spot.
type Option func(*config)

type config struct{ scale float64 }

// WithTimeScale divides the window of every rule by scale: with
// WithTimeScale(20) Binance's minute lasts 3 s and its day 72 min, for tests
// and demos against a server (such as package exchangetest's) scaled the same
// way. The fixed windows stay aligned to whole multiples of the scaled window
// since the Unix epoch. The scaled window is the real one divided by scale,
// rounded up to a whole nanosecond. The default is 1, Binance's real limits.
// It panics unless scale is a finite number > 0.
func WithTimeScale(scale float64) Option {
	if !(scale > 0) || math.IsInf(scale, 0) {
		panic(fmt.Sprintf("ratesem: WithTimeScale(%v): want a finite scale > 0", scale))
	}
	return func(c *config) { c.scale = scale }
}

// Spot returns Binance Spot's REST limits (https://api.binance.com/api/v3) as
// a clientpool.Table; see the package documentation for the rules and
// endpoints. Every rule counts in fixed windows aligned to the clock, as
// Binance does, each call in every window from its start to its end
// (window.NewFixedCompletion), and reads the server's own count
// from the response headers where Binance sends one. A request to an endpoint
// not in the table costs 1 REQUEST_WEIGHT and 1 RAW_REQUESTS
// (Table.Default), Binance's most common weight.
//
// Each call returns a new Table, which the caller may change (add endpoints,
// say) before giving it to clientpool.New.
func Spot(opts ...Option) clientpool.Table {
	cfg := config{scale: 1}
	for _, o := range opts {
		o(&cfg)
	}
	t := clientpool.Table{
		Default: []clientpool.Cost{{Rule: RuleRequestWeight, Units: 1}, {Rule: RuleRawRequests, Units: 1}},
	}
	for _, r := range rules {
		rule := clientpool.Rule{
			Name:            r.name,
			Limit:           window.Limit{N: r.n, Per: scaled(r.per, cfg.scale)},
			Window:          fixedWindow,
			PauseOnThrottle: r.pause,
			Source:          DocsURL + r.section,
		}
		if r.scope == byAccount {
			rule.Key = accountKey
		}
		if r.usage != "" {
			rule.Usage = clientpool.BinanceUsage(r.usage)
		}
		t.Rules = append(t.Rules, rule)
	}
	for _, e := range endpoints {
		weight := clientpool.Cost{Rule: RuleRequestWeight, Units: e.weight, Weight: e.weightFunc}
		ep := clientpool.Endpoint{
			Method: e.method, Path: e.path, Source: DocsURL + e.section,
			Costs: []clientpool.Cost{weight, {Rule: RuleRawRequests, Units: 1}},
		}
		if e.orders > 0 {
			ep.Costs = append(ep.Costs,
				clientpool.Cost{Rule: RuleOrders10s, Units: e.orders},
				clientpool.Cost{Rule: RuleOrders1d, Units: e.orders})
		}
		t.Endpoints = append(t.Endpoints, ep)
	}
	t.ThrottleTargets = throttleTargets
	return t
}

// CodeTooManyOrders is the body code of a 429 for the account's order count
// (ORDERS); -1003 is the IP's weight or raw requests. Source:
// https://developers.binance.com/docs/binance-spot-api-docs/errors#-1015-too_many_orders
// ("Too many new orders." or "Too many new orders; current limit is %s
// orders per %s.": the message may or may not name the interval).
const CodeTooManyOrders = "-1015"

// throttleTargets points a 429 with code -1015 at the account's ORDERS_10S
// charge only; any other throttle (-1003, or a 418 ban) falls back to the
// rules marked to pause (the IP's REQUEST_WEIGHT).
//
// A -1015 is shared by both ORDERS rules and need not say which one was
// hit, so it pauses the shortest window that can explain it: pausing the
// 1-day rule for its window would park the account for up to a day on a
// burst that ten seconds cure. If the daily count is really exhausted, the
// next order is rejected again and the pool's backoff on the 10-second key
// grows (capped), and the X-MBX-ORDER-COUNT-1D header, when Binance sends
// it, tells the daily rule its true count.
func throttleTargets(th clientpool.Throttle, charges []clientpool.Charge) []clientpool.Charge {
	if peek.Code(th.Body) != CodeTooManyOrders {
		return nil
	}
	var out []clientpool.Charge
	for _, c := range charges {
		if c.Rule == RuleOrders10s {
			out = append(out, c)
		}
	}
	return out
}

// fixedWindow counts each call in every aligned window its start..end
// touches (window.NewFixedCompletion): Binance counts arrivals in fixed
// windows, and a call started before a boundary may arrive after it.
func fixedWindow(l window.Limit) window.Policy { return window.NewFixedCompletion(l) }

// accountKey is the key of the ORDERS rules: the request's API key.
func accountKey(req *http.Request) (string, bool) { return req.Header.Get(HeaderAPIKey), true }

// scaled returns per / scale rounded up to a whole nanosecond.
func scaled(per time.Duration, scale float64) time.Duration {
	if scale == 1 {
		return per
	}
	return max(time.Duration(math.Ceil(float64(per)/scale)), 1)
}

// depthWeight is the REQUEST_WEIGHT of GET /api/v3/depth by its limit
// parameter (default 100). Binance truncates a limit above 5000 to 5000, so it
// costs 250; a limit that is not a positive integer also costs 250, the most
// the endpoint can cost, since Binance does not document it.
func depthWeight(req *http.Request) int64 {
	limit := 100
	if v := req.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return 250
		}
		limit = n
	}
	switch {
	case limit <= 100:
		return 5
	case limit <= 500:
		return 25
	case limit <= 1000:
		return 50
	}
	return 250
}

// tickerWeight is the REQUEST_WEIGHT of GET /api/v3/ticker/24hr: 2 for one
// symbol; for a symbols list (a JSON array), 2 for up to 20 symbols, 40 for up
// to 100 and 80 beyond; 80 for all symbols (neither parameter) and for a
// symbols value that is not a JSON array of strings.
func tickerWeight(req *http.Request) int64 {
	q := req.URL.Query()
	if q.Get("symbol") != "" {
		return 2
	}
	if v := q.Get("symbols"); v != "" {
		var symbols []string
		if err := json.Unmarshal([]byte(v), &symbols); err != nil {
			return 80
		}
		switch n := len(symbols); {
		case n <= 20:
			return 2
		case n <= 100:
			return 40
		}
	}
	return 80
}

// priceTickerWeight is the REQUEST_WEIGHT of GET /api/v3/ticker/price and
// GET /api/v3/ticker/bookTicker: 2 for one symbol, 4 for a symbols list or
// all symbols.
func priceTickerWeight(req *http.Request) int64 {
	if req.URL.Query().Get("symbol") != "" {
		return 2
	}
	return 4
}

// maxPerSymbol is the most GET /api/v3/ticker and
// GET /api/v3/ticker/tradingDay cost: 4 per symbol, capped at 200 beyond 50
// symbols.
const maxPerSymbol = 200

// perSymbolWeight is the REQUEST_WEIGHT of GET /api/v3/ticker (rolling
// window statistics) and GET /api/v3/ticker/tradingDay: 4 for each symbol
// requested, at most 200 (beyond 50 symbols). The endpoints need symbol or
// symbols; a request with neither, or with a symbols value that is not a
// non-empty JSON array of strings, costs 200, the most they can cost, as
// Binance does not document it.
func perSymbolWeight(req *http.Request) int64 {
	q := req.URL.Query()
	if q.Get("symbol") != "" {
		return 4
	}
	var symbols []string
	if err := json.Unmarshal([]byte(q.Get("symbols")), &symbols); err != nil || len(symbols) == 0 {
		return maxPerSymbol
	}
	return min(4*int64(len(symbols)), maxPerSymbol)
}

// myTradesWeight is the REQUEST_WEIGHT of GET /api/v3/myTrades: 5 with
// orderId, 20 without.
func myTradesWeight(req *http.Request) int64 {
	if req.URL.Query().Get("orderId") != "" {
		return 5
	}
	return 20
}

// maxFormBody is the most of a request body orderTestWeight reads for its
// parameters.
const maxFormBody = 64 << 10

// orderTestWeight is the REQUEST_WEIGHT of POST /api/v3/order/test: 20 with
// computeCommissionRates=true, 1 without. Binance takes the parameters from
// the query string and the form body alike: the body is read through
// req.GetBody (req.Body is left unread), and a body that cannot be read so
// (no GetBody, an error, more than 64 KiB, not a form) costs 20, the most
// the endpoint can cost.
func orderTestWeight(req *http.Request) int64 {
	const with, without = 20, 1
	if commissionRates(req.URL.Query()) {
		return with
	}
	if req.Body == nil || req.Body == http.NoBody {
		return without
	}
	if req.GetBody == nil {
		return with
	}
	body, err := req.GetBody()
	if err != nil {
		return with
	}
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, maxFormBody+1))
	if err != nil || len(b) > maxFormBody {
		return with
	}
	form, err := url.ParseQuery(string(b))
	if err != nil || commissionRates(form) {
		return with
	}
	return without
}

// commissionRates reports whether q asks POST /api/v3/order/test for
// commission rates. Binance reads booleans case-insensitively; anything but
// "false" (or absent) is taken as true, the costlier reading.
func commissionRates(q url.Values) bool {
	for _, v := range q["computeCommissionRates"] {
		if !strings.EqualFold(v, "false") {
			return true
		}
	}
	return false
}

// openOrdersWeight is the REQUEST_WEIGHT of GET /api/v3/openOrders: 6 for one
// symbol, 80 for all.
func openOrdersWeight(req *http.Request) int64 {
	if req.URL.Query().Get("symbol") != "" {
		return 6
	}
	return 80
}

type scope int

const (
	byIP      scope = iota // the client's own IP: one key, ""
	byAccount              // header X-MBX-APIKEY
)

// String names what the rule is keyed by, for the doc table ("IP",
// "account").
func (s scope) String() string {
	if s == byAccount {
		return "account"
	}
	return "IP"
}

type ruleRow struct {
	name    string
	n       int64
	per     time.Duration
	scope   scope
	usage   string // response header with the server's count; "" for none
	pause   bool
	section string
}

type endpointRow struct {
	method, path string
	weight       int64                         // REQUEST_WEIGHT; 0 when weightFunc decides
	weightFunc   func(req *http.Request) int64 // REQUEST_WEIGHT from the request
	weightDoc    string                        // weightFunc in words
	orders       int64                         // units in each ORDERS rule
	section      string
}
