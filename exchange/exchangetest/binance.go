package exchangetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/memnet"
)

// Names of the rules of [BinanceServer], after the rateLimitType and
// interval of Binance spot's exchangeInfo
// (https://developers.binance.com/docs/binance-spot-api-docs/rest-api/limits).
const (
	// BinanceRequestWeight: 6000 request weight per minute per IP.
	BinanceRequestWeight = "REQUEST_WEIGHT 1m"
	// BinanceRawRequests: 61000 requests per 5 minutes per IP.
	BinanceRawRequests = "RAW_REQUESTS 5m"
	// BinanceOrders10s: 100 new orders per 10 seconds per account.
	BinanceOrders10s = "ORDERS 10s"
	// BinanceOrders1d: 200000 new orders per day per account.
	BinanceOrders1d = "ORDERS 1d"
)

// Response headers of Binance spot, from its limits page.
const (
	// BinanceUsedWeightHeader carries, on every response, the IP's request
	// weight used in the current minute window.
	BinanceUsedWeightHeader = "X-MBX-USED-WEIGHT-1M"
	// BinanceOrderCount10sHeader and BinanceOrderCount1dHeader carry, on
	// responses to POST /api/v3/order, the account's orders in the current
	// 10-second and day windows.
	BinanceOrderCount10sHeader = "X-MBX-ORDER-COUNT-10S"
	BinanceOrderCount1dHeader  = "X-MBX-ORDER-COUNT-1D"
)

const (
	binanceDocs       = "https://developers.binance.com/docs/binance-spot-api-docs/"
	binanceDocLimits  = binanceDocs + "rest-api/limits"
	binanceBanFirst   = 2 * time.Minute
	binanceBanMax     = 72 * time.Hour
	binancePOSTOrder  = http.MethodPost + " /api/v3/order"
	binanceAPIKeyHead = "X-MBX-APIKEY"
)

// binanceLimit describes a rule as exchangeInfo lists it, and its 429 body.
type binanceLimit struct {
	spec        ruleSpec
	typ         string // rateLimitType
	interval    string // SECOND, MINUTE, DAY
	intervalNum int
	code        int
	msg         string // format with the limit
}

var binanceLimits = []binanceLimit{
	{ruleSpec{BinanceRequestWeight, 6000, time.Minute, true, "IP", binanceDocLimits}, "REQUEST_WEIGHT", "MINUTE", 1, -1003,
		"Too much request weight used; current limit is %d request weight per 1 MINUTE. Please use WebSocket Streams for live updates to avoid polling the API."},
	{ruleSpec{BinanceRawRequests, 61000, 5 * time.Minute, true, "IP", binanceDocLimits}, "RAW_REQUESTS", "MINUTE", 5, -1003,
		"Too many requests; current limit is %d requests per 5 MINUTE. Please use WebSocket Streams for live updates to avoid polling the API."},
	{ruleSpec{BinanceOrders10s, 100, 10 * time.Second, true, "account", binanceDocLimits}, "ORDERS", "SECOND", 10, -1015,
		"Too many new orders; current limit is %d orders per 10 SECOND."},
	{ruleSpec{BinanceOrders1d, 200000, 24 * time.Hour, true, "account", binanceDocLimits}, "ORDERS", "DAY", 1, -1015,
		"Too many new orders; current limit is %d orders per 1 DAY."},
}

// BinanceConfig configures [NewBinance]. The zero value reproduces Binance
// spot's documented limits at real speed with no added latency.
type BinanceConfig struct {
	// Scale divides every window and ban: with Scale 20 a minute lasts 3 s
	// on the server's clock, the fixed windows are aligned to multiples of
	// the scaled length since the Unix epoch, and the first ban lasts 6 s.
	// 0 means 1. It must be positive and finite; NewBinance panics
	// otherwise.
	Scale float64
	// Limits overrides the Limit of rules by name (BinanceRequestWeight,
	// BinanceRawRequests, BinanceOrders10s, BinanceOrders1d). NewBinance
	// panics on an unknown name or a limit < 1.
	Limits map[string]int64
	// Latency, if not nil, is called once per request after the decision
	// was made and logged, and the handler waits that long before
	// answering, returning early if the request's context ends. It must be
	// safe for concurrent use; see FixedLatency and UniformLatency.
	Latency func() time.Duration
	// Clock, if not nil, is the source of arrival times (and so of the
	// window boundaries), e.g. a *clock.Mock; only its Now is read, under
	// the server's lock: it must be safe for concurrent use and must not go
	// backwards. nil means the real clock, which is already virtual inside a
	// testing/synctest bubble. Latency sleeps on the real timer.
	Clock ratesem.Clock
	// InMemory serves over in-memory connections (net.Pipe) instead of TCP
	// loopback, for use inside a testing/synctest bubble; see
	// OKXConfig.InMemory.
	InMemory bool
	// Hostile turns on the hostile mode: absurd headers, garbage or
	// missing Retry-After, spurious 429s (code -1015 or -1003, no
	// Retry-After) and stalled bodies on a seeded share of the answers.
	// The zero value is off; see Hostile.
	Hostile Hostile
}

// binanceEndpoint is one route of BinanceServer.
type binanceEndpoint struct {
	method, path string
	doc          string
	signed       bool     // needs the X-MBX-APIKEY header
	order        bool     // counts one order in each ORDERS window
	required     []string // parameters that must be non-empty
	// weight returns the request weight, or an error answer.
	weight func(q url.Values) (int64, *reply)
	data   func(s *BinanceServer, q url.Values, at time.Time) any
}

func (e *binanceEndpoint) name() string { return e.method + " " + e.path }

func fixedWeight(w int64) func(url.Values) (int64, *reply) {
	return func(url.Values) (int64, *reply) { return w, nil }
}

// tickerWeight is the weight of GET /api/v3/ticker/24hr: 2 for one symbol;
// for a symbols list (a JSON array of strings), 2 for 1 to 20 symbols, 40
// for up to 100 and 80 beyond; 80 for all symbols (neither parameter).
func tickerWeight(q url.Values) (int64, *reply) {
	_, list, bad := tickerSymbols(q)
	switch {
	case bad != nil:
		return 0, bad
	case q.Get("symbol") != "":
		return 2, nil
	case list == nil || len(list) > 100:
		return 80, nil
	case len(list) > 20:
		return 40, nil
	}
	return 2, nil
}

// tickerSymbols reads the symbol and symbols parameters of
// GET /api/v3/ticker/24hr; list is nil without symbols.
func tickerSymbols(q url.Values) (symbol string, list []string, bad *reply) {
	symbol, raw := q.Get("symbol"), q.Get("symbols")
	if raw == "" {
		return symbol, nil, nil
	}
	if symbol != "" {
		rp := binanceError(http.StatusBadRequest, -1128, "Combination of optional parameters invalid.")
		return "", nil, &rp
	}
	if err := json.Unmarshal([]byte(raw), &list); err != nil || len(list) == 0 {
		rp := binanceError(http.StatusBadRequest, -1100, "Illegal characters found in parameter 'symbols'.")
		return "", nil, &rp
	}
	return "", list, nil
}

// withSymbol is the weight of endpoints that are cheaper for one symbol.
func withSymbol(one, all int64) func(url.Values) (int64, *reply) {
	return func(q url.Values) (int64, *reply) {
		if q.Get("symbol") != "" {
			return one, nil
		}
		return all, nil
	}
}

// depthWeight is the weight of GET /api/v3/depth by its limit parameter.
func depthWeight(q url.Values) (int64, *reply) {
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			rp := binanceError(http.StatusBadRequest, -1100, "Illegal characters found in parameter 'limit'; legal range is '[1, 5000]'.")
			return 0, &rp
		}
		limit = n // above 5000 the answer is truncated to 5000 and weighs 250
	}
	switch {
	case limit <= 100:
		return 5, nil
	case limit <= 500:
		return 25, nil
	case limit <= 1000:
		return 50, nil
	}
	return 250, nil
}

// binanceEndpoints is the table of routes and weights, from the endpoint
// pages of https://developers.binance.com/docs/binance-spot-api-docs/rest-api.
var binanceEndpoints = []*binanceEndpoint{
	{method: http.MethodGet, path: "/api/v3/depth", doc: binanceDocs + "rest-api/market-data-endpoints#order-book",
		required: []string{"symbol"}, weight: depthWeight, data: binanceDepth},
	{method: http.MethodGet, path: "/api/v3/klines", doc: binanceDocs + "rest-api/market-data-endpoints#klinecandlestick-data",
		required: []string{"symbol", "interval"}, weight: fixedWeight(2), data: binanceKlines},
	{method: http.MethodGet, path: "/api/v3/exchangeInfo", doc: binanceDocs + "rest-api/general-endpoints#exchange-information",
		weight: fixedWeight(20), data: binanceExchangeInfo},
	{method: http.MethodGet, path: "/api/v3/ticker/24hr", doc: binanceDocs + "rest-api/market-data-endpoints#24hr-ticker-price-change-statistics",
		weight: tickerWeight, data: binanceTicker},
	{method: http.MethodGet, path: "/api/v3/account", doc: binanceDocs + "rest-api/account-endpoints#account-information-user_data",
		signed: true, weight: fixedWeight(20), data: binanceAccount},
	{method: http.MethodGet, path: "/api/v3/order", doc: binanceDocs + "rest-api/account-endpoints#query-order-user_data",
		signed: true, required: []string{"symbol"}, weight: fixedWeight(4), data: binanceQueryOrder},
	{method: http.MethodGet, path: "/api/v3/openOrders", doc: binanceDocs + "rest-api/account-endpoints#current-open-orders-user_data",
		signed: true, weight: withSymbol(6, 80), data: func(*BinanceServer, url.Values, time.Time) any { return []string{} }},
	{method: http.MethodPost, path: "/api/v3/order", doc: binanceDocs + "rest-api/trading-endpoints#new-order-trade",
		signed: true, order: true, required: []string{"symbol", "side", "type"}, weight: fixedWeight(1), data: binanceNewOrder},
}

var binanceRoutes = func() map[string]map[string]*binanceEndpoint {
	m := make(map[string]map[string]*binanceEndpoint)
	for _, e := range binanceEndpoints {
		if m[e.path] == nil {
			m[e.path] = make(map[string]*binanceEndpoint)
		}
		m[e.path][e.method] = e
	}
	return m
}()

// binanceIP is the ban state of one client IP.
type binanceIP struct {
	retryUntil time.Time // a request arriving before this instant gets the IP banned
	banUntil   time.Time // every request before this instant is answered 418
	bans       int       // bans so far; the n-th lasts 2 min · 2^(n−1), at most 3 days (scaled)
}

// BinanceServer is a running in-process server for a set of Binance spot
// REST endpoints that enforces Binance's rate limits exactly, in fixed
// windows aligned to the clock, with 429, Retry-After and IP bans (418)
// (see [NewBinance], which makes one; the zero BinanceServer is not usable).
// All methods are safe for concurrent use, also while requests are being
// served.
type BinanceServer struct {
	*core
	scale   float64
	ips     map[string]*binanceIP // guarded by core.mu
	hostile *hostile              // nil: off; its draws guarded by core.mu
	orderID atomic.Int64
}

// NewBinance starts and returns a server for these Binance spot endpoints;
// the caller must call Close. Request weights (per
// https://developers.binance.com/docs/binance-spot-api-docs/rest-api and
// each endpoint's page):
//
//	GET  /api/v3/depth         5, 25, 50, 250 for limit ≤100, ≤500, ≤1000, more (default 100)  (symbol required)
//	GET  /api/v3/klines        2     (symbol, interval required)
//	GET  /api/v3/exchangeInfo  20
//	GET  /api/v3/ticker/24hr   2 with symbol; symbols=[...] 2 for 1-20, 40 for 21-100, 80 for more; 80 with neither
//	GET  /api/v3/account       20    (API key)
//	GET  /api/v3/order         4     (API key; symbol and orderId or origClientOrderId required)
//	GET  /api/v3/openOrders    6 with symbol, 80 without  (API key)
//	POST /api/v3/order         1, and 1 order in each ORDERS window  (API key; symbol, side, type required)
//
// Rules (Rules; all fixed windows aligned to the clock, divided by
// cfg.Scale): BinanceRequestWeight 6000 weight per minute per IP,
// BinanceRawRequests 61000 requests per 5 minutes per IP, BinanceOrders10s
// 100 and BinanceOrders1d 200000 orders per account, where the account is
// the X-MBX-APIKEY header (signatures and timestamps are not checked) and
// the IP the host part of RemoteAddr. Parameters are read from the query
// string and, for POST, a form-encoded body.
//
// A request arriving at t is accepted iff for every rule it falls under
// the units already accepted in t's window plus its own are within the
// limit; then all are counted. Otherwise nothing is counted (rejected
// requests do not count toward any weight or order limit — a choice: Binance
// does not document it) and it is answered HTTP 429 with Retry-After: the
// whole seconds until the rejecting rule's window ends (rounded up, at
// least 1), and {"code":-1003,...} for the IP limits or {"code":-1015,...}
// for the order limits. Rules are checked in the order above; the first
// that does not fit rejects.
//
// Bans, per IP: a request arriving before the Retry-After of an earlier 429
// to the same IP has passed (measured from that 429's arrival, in the
// whole seconds sent) bans the IP; it is answered HTTP 418, and so is
// every request from the IP until the ban ends, with Retry-After the whole
// seconds left and {"code":-1003,"msg":"Way too much request weight used;
// IP banned until <ms>. ..."}. The n-th ban of an IP lasts 2 minutes ·
// 2^(n−1), at most 3 days, divided by the scale; requests during a ban do
// not extend it; the count of bans is kept for the server's life.
//
// Every response carries X-MBX-USED-WEIGHT-1M, the IP's weight used in the
// current window of BinanceRequestWeight after the decision (so including
// the request if it was accepted); responses to POST /api/v3/order with an
// API key also carry X-MBX-ORDER-COUNT-10S and X-MBX-ORDER-COUNT-1D. Invalid
// requests are not counted and are answered with Binance's codes: 401 and
// -2014 without an API key on a signed endpoint, 400 and -1102 for a
// missing parameter, 400 and -1100 for a bad depth limit or symbols list,
// 400 and -1128 for symbol and symbols together, plain 404 and 405
// for an unknown path or method. A banned IP gets 418 whatever it sends.
//
// Every request is logged (Log); then the handler waits for Latency and
// writes a small Binance-shaped JSON body (klines an array of arrays, a new
// order an increasing orderId, ...).
func NewBinance(cfg BinanceConfig) *BinanceServer {
	scale := scaleOf(cfg.Scale, "NewBinance")
	specs := make([]ruleSpec, len(binanceLimits))
	for i, l := range binanceLimits {
		specs[i] = l.spec
	}
	s := &BinanceServer{
		core:    newCore(buildRules(specs, scale, cfg.Limits, "NewBinance"), nowOf(cfg.Clock), cfg.Latency),
		scale:   scale,
		ips:     make(map[string]*binanceIP),
		hostile: newHostile(cfg.Hostile, "NewBinance", "-1003", "-1015"),
	}
	s.orderID.Store(1000)
	s.net = memnet.New("binance.exchangetest.invalid", http.HandlerFunc(s.serveHTTP), cfg.InMemory)
	return s
}

// URL returns the base URL of the server, e.g. "http://127.0.0.1:40321"
// (on TCP) or "http://binance.exchangetest.invalid" (InMemory); append a
// path such as "/api/v3/depth?symbol=BTCUSDT".
func (s *BinanceServer) URL() string { return s.net.URL() }

// Client returns an HTTP client whose connections come from 127.0.0.1. It
// is the same client on every call; Close closes its idle connections.
func (s *BinanceServer) Client() *http.Client { return s.net.ClientFrom("127.0.0.1") }

// ClientFrom returns an HTTP client whose requests the server sees as
// coming from ip, one client per ip, reused across calls. With InMemory any
// IP works; on TCP the connection is bound to ip as its local address,
// which needs an address of this machine (on Linux all of 127.0.0.0/8 is).
// It panics if ip does not parse.
func (s *BinanceServer) ClientFrom(ip string) *http.Client { return s.net.ClientFrom(ip) }

// Handler returns the server's handler, so a test can call ServeHTTP
// directly with an httptest.NewRequest of any RemoteAddr; such requests
// are counted and logged like the others.
func (s *BinanceServer) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

// Close shuts the server down, blocking until outstanding requests have
// been answered, and closes the idle connections of the clients it handed
// out. The log and statistics stay readable.
func (s *BinanceServer) Close() { s.net.Close() }

// Rules returns a copy of the server's rules (BinanceRequestWeight,
// BinanceRawRequests, BinanceOrders10s, BinanceOrders1d), with scale and
// Limits applied.
func (s *BinanceServer) Rules() []Rule { return s.rulesCopy() }

// Rule returns the rule named name, and whether there is one.
func (s *BinanceServer) Rule(name string) (Rule, bool) { return s.rule(name) }

// Log returns a copy of the log of every request received so far, in the
// order of the decisions.
func (s *BinanceServer) Log() []Entry { return s.logCopy() }

// Stats counts the log by outcome and status (429s and 418s included); see
// Summarize.
func (s *BinanceServer) Stats() Stats { return Summarize(s.Log()) }

// Peak returns, for every rule key, the most units the server accepted in
// any one fixed window of the rule: PeakUsage(s.Log(), s.Rules()).
func (s *BinanceServer) Peak() map[RuleKey]int64 { return PeakUsage(s.Log(), s.Rules()) }

// Violations returns Violations(s.Log(), s.Rules()); it is empty unless the
// server itself is broken.
func (s *BinanceServer) Violations() []Violation { return Violations(s.Log(), s.Rules()) }

// Used returns the units counted for key in the fixed window that holds
// the server's current instant, e.g. the used weight of an IP:
// s.Used(RuleKey{Rule: BinanceRequestWeight, IP: "127.0.0.1"}).
func (s *BinanceServer) Used(key RuleKey) int64 { return s.used(key) }

// BannedUntil returns the end of ip's current or last ban (the zero time
// if it was never banned) and the number of bans ip has had.
func (s *BinanceServer) BannedUntil(ip string) (until time.Time, bans int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.ips[ip]; st != nil {
		return st.banUntil, st.bans
	}
	return time.Time{}, 0
}

// binanceError is an answer with Binance's error body.
func binanceError(status, code int, msg string) reply {
	b, err := json.Marshal(struct {
		Code int    `json:"code"`
		Msg  string `json:"msg"`
	}{code, msg})
	if err != nil {
		panic("exchangetest: encoding Binance error: " + err.Error())
	}
	return reply{status: status, body: b, code: strconv.Itoa(code)}
}

// ceilSeconds rounds d up to whole seconds, at least 1.
func ceilSeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}

// banLength returns the length of the n-th ban (n ≥ 1), before scaling.
func banLength(n int) time.Duration {
	d := binanceBanFirst
	for i := 1; i < n && d < binanceBanMax; i++ {
		d *= 2
	}
	return min(d, binanceBanMax)
}

// serveHTTP is the handler; see NewBinance.
func (s *BinanceServer) serveHTTP(w http.ResponseWriter, r *http.Request) {
	ip := remoteIP(r)
	apiKey := r.Header.Get(binanceAPIKeyHead)
	ep, q, charges, invalid := s.parse(w, r, ip, apiKey)

	s.mu.Lock()
	now := s.now()
	e := Entry{At: now, Method: r.Method, Path: r.URL.Path, IP: ip, APIKey: apiKey, Charges: charges}
	st := s.ips[ip]
	if st == nil {
		st = &binanceIP{}
		s.ips[ip] = st
	}
	altered := s.hostile.draw()
	var rp reply
	var retryUntil time.Time // the ban deadline a 429 sets
	switch {
	case now.Before(st.banUntil):
		e.Outcome = OutcomeBanned
		rp = s.banned(st, now)
	case now.Before(st.retryUntil):
		st.bans++
		st.banUntil = now.Add(scaled(banLength(st.bans), s.scale))
		e.Outcome = OutcomeBanned
		rp = s.banned(st, now)
	case invalid != nil:
		rp = *invalid
		e.Charges = nil
	case altered && s.hostile.Throttle && s.lim.check(charges, now) == nil:
		e.Outcome, e.Rule = OutcomeRateLimited, HostileRule
		rp = s.spuriousThrottle(ep)
	default:
		if rule := s.lim.admit(charges, now); rule != nil {
			ra := ceilSeconds(untilWindowEnd(now, rule.Window))
			retryUntil = now.Add(time.Duration(ra) * time.Second)
			for _, l := range binanceLimits {
				if l.spec.name == rule.Name {
					rp = binanceError(http.StatusTooManyRequests, l.code, fmt.Sprintf(l.msg, rule.Limit))
				}
			}
			rp.header = map[string]string{"Retry-After": strconv.Itoa(ra)}
			e.Outcome, e.Rule = OutcomeRateLimited, rule.Name
		} else {
			e.Outcome = OutcomeAccepted
			b, err := json.Marshal(ep.data(s, q, now))
			if err != nil {
				panic("exchangetest: encoding Binance answer: " + err.Error())
			}
			rp = reply{status: http.StatusOK, body: b}
		}
	}
	if rp.header == nil {
		rp.header = make(map[string]string, 3)
	}
	rp.header[BinanceUsedWeightHeader] = strconv.FormatInt(s.lim.used(RuleKey{Rule: BinanceRequestWeight, IP: ip}, now), 10)
	if ep != nil && ep.order && apiKey != "" {
		rp.header[BinanceOrderCount10sHeader] = strconv.FormatInt(s.lim.used(RuleKey{Rule: BinanceOrders10s, APIKey: apiKey}, now), 10)
		rp.header[BinanceOrderCount1dHeader] = strconv.FormatInt(s.lim.used(RuleKey{Rule: BinanceOrders1d, APIKey: apiKey}, now), 10)
	}
	if altered {
		rejection := e.Outcome == OutcomeRateLimited || e.Outcome == OutcomeBanned
		if s.hostile.alter(&rp, now, rejection) {
			retryUntil = time.Time{} // only a Retry-After sent unaltered is enforced
		}
		e.Hostile = true
	}
	if retryUntil.After(st.retryUntil) {
		st.retryUntil = retryUntil
	}
	if ra, ok := rp.header["Retry-After"]; ok {
		e.RetryAfter = wholeSeconds(ra)
	}
	e.Status, e.Code = rp.status, rp.code
	s.log = append(s.log, e)
	s.mu.Unlock()

	if !sleepLatency(r.Context(), s.latency) {
		return // the client is gone; nothing to answer
	}
	rp.write(r.Context(), w, s.net.Stop())
}

// spuriousThrottle is the hostile mode's 429 to a request every rule
// admits: Hostile.ThrottleCode's body and no Retry-After.
func (s *BinanceServer) spuriousThrottle(ep *binanceEndpoint) reply {
	code := s.hostile.ThrottleCode
	if code == "" {
		code = "-1003"
		if ep.order {
			code = "-1015"
		}
	}
	l := binanceLimits[0] // -1003: REQUEST_WEIGHT
	if code == "-1015" {
		l = binanceLimits[3] // the daily order limit: a message naming the longest window
	}
	r, _ := s.rule(l.spec.name)
	return binanceError(http.StatusTooManyRequests, l.code, fmt.Sprintf(l.msg, r.Limit))
}

// banned is the 418 answer to an IP banned until st.banUntil.
func (s *BinanceServer) banned(st *binanceIP, now time.Time) reply {
	rp := binanceError(StatusBanned, -1003, fmt.Sprintf(
		"Way too much request weight used; IP banned until %d. Please use WebSocket Streams for live updates to avoid bans.",
		st.banUntil.UnixMilli()))
	rp.header = map[string]string{"Retry-After": strconv.Itoa(ceilSeconds(st.banUntil.Sub(now)))}
	return rp
}

// parse routes and validates a request and returns what it would count;
// invalid is set when the request must be answered without counting. ep
// is set whenever the route exists, even if the request is invalid.
func (s *BinanceServer) parse(w http.ResponseWriter, r *http.Request, ip, apiKey string) (ep *binanceEndpoint, q url.Values, charges []Charge, invalid *reply) {
	fail := func(rp reply) (*binanceEndpoint, url.Values, []Charge, *reply) { return ep, nil, nil, &rp }
	byMethod := binanceRoutes[r.URL.Path]
	if byMethod == nil {
		return fail(reply{status: http.StatusNotFound, body: []byte("404 page not found\n"), text: true})
	}
	if ep = byMethod[r.Method]; ep == nil {
		return fail(reply{status: http.StatusMethodNotAllowed, body: []byte("Method Not Allowed\n"), text: true})
	}
	if ep.signed && apiKey == "" {
		return fail(binanceError(http.StatusUnauthorized, -2014, "API-key format invalid."))
	}
	if r.Method == http.MethodPost {
		r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	}
	if err := r.ParseForm(); err != nil {
		return fail(binanceError(http.StatusBadRequest, -1100, "Illegal characters found in a parameter."))
	}
	q = r.Form
	for _, p := range ep.required {
		if q.Get(p) == "" {
			return fail(binanceError(http.StatusBadRequest, -1102,
				"Mandatory parameter '"+p+"' was not sent, was empty/null, or malformed."))
		}
	}
	if ep.path == "/api/v3/order" && r.Method == http.MethodGet && q.Get("orderId") == "" && q.Get("origClientOrderId") == "" {
		return fail(binanceError(http.StatusBadRequest, -1102, "Param 'origClientOrderId' or 'orderId' must be sent, but both were empty/null!"))
	}
	weight, bad := ep.weight(q)
	if bad != nil {
		return fail(*bad)
	}
	charges = []Charge{
		{Key: RuleKey{Rule: BinanceRequestWeight, IP: ip}, Units: weight},
		{Key: RuleKey{Rule: BinanceRawRequests, IP: ip}, Units: 1},
	}
	if ep.order {
		charges = append(charges,
			Charge{Key: RuleKey{Rule: BinanceOrders10s, APIKey: apiKey}, Units: 1},
			Charge{Key: RuleKey{Rule: BinanceOrders1d, APIKey: apiKey}, Units: 1})
	}
	return ep, q, charges, nil
}

func binanceDepth(_ *BinanceServer, _ url.Values, _ time.Time) any {
	return map[string]any{
		"lastUpdateId": 1027024,
		"bids":         [][]string{{"43000.10000000", "0.43100000"}, {"43000.00000000", "1.20000000"}},
		"asks":         [][]string{{"43000.20000000", "0.12000000"}, {"43000.30000000", "2.50000000"}},
	}
}

// binanceKlines returns two one-minute klines ending at the arrival, oldest
// first: open time, open, high, low, close, volume, close time, quote
// volume, trades, taker buy base volume, taker buy quote volume, ignore.
func binanceKlines(_ *BinanceServer, _ url.Values, at time.Time) any {
	m := at.Truncate(time.Minute)
	row := func(open time.Time, o, h, l, c string) []any {
		return []any{open.UnixMilli(), o, h, l, c, "12.50000000", open.Add(time.Minute).UnixMilli() - 1,
			"537500.00000000", 308, "6.20000000", "266600.00000000", "0"}
	}
	return [][]any{
		row(m.Add(-time.Minute), "43000.00000000", "43060.00000000", "42950.00000000", "43050.00000000"),
		row(m, "43050.00000000", "43100.00000000", "42990.00000000", "43080.00000000"),
	}
}

func binanceExchangeInfo(s *BinanceServer, _ url.Values, at time.Time) any {
	limits := make([]map[string]any, len(binanceLimits))
	for i, l := range binanceLimits {
		r, _ := s.rule(l.spec.name)
		limits[i] = map[string]any{"rateLimitType": l.typ, "interval": l.interval, "intervalNum": l.intervalNum, "limit": r.Limit}
	}
	return map[string]any{
		"timezone": "UTC", "serverTime": at.UnixMilli(), "rateLimits": limits, "exchangeFilters": []string{},
		"symbols": []map[string]any{
			{"symbol": "BTCUSDT", "status": "TRADING", "baseAsset": "BTC", "quoteAsset": "USDT"},
			{"symbol": "ETHUSDT", "status": "TRADING", "baseAsset": "ETH", "quoteAsset": "USDT"},
		},
	}
}

func binanceTicker(_ *BinanceServer, q url.Values, at time.Time) any {
	t := func(sym, last string) map[string]any {
		return map[string]any{
			"symbol": sym, "priceChange": "120.00000000", "priceChangePercent": "0.280", "lastPrice": last,
			"volume": "1523.20000000", "openTime": at.Add(-24 * time.Hour).UnixMilli(), "closeTime": at.UnixMilli(), "count": 76543,
		}
	}
	sym, list, _ := tickerSymbols(q)
	if sym != "" {
		return t(sym, "43000.10000000")
	}
	if list == nil {
		list = []string{"BTCUSDT", "ETHUSDT"}
	}
	out := make([]map[string]any, len(list))
	for i, sym := range list {
		out[i] = t(sym, "43000.10000000")
	}
	return out
}

func binanceAccount(_ *BinanceServer, _ url.Values, at time.Time) any {
	return map[string]any{
		"makerCommission": 10, "takerCommission": 10, "canTrade": true, "canWithdraw": true, "canDeposit": true,
		"updateTime": at.UnixMilli(), "accountType": "SPOT", "permissions": []string{"SPOT"},
		"balances": []map[string]string{
			{"asset": "BTC", "free": "0.50000000", "locked": "0.00000000"},
			{"asset": "USDT", "free": "10000.00000000", "locked": "0.00000000"},
		},
	}
}

func binanceQueryOrder(_ *BinanceServer, q url.Values, at time.Time) any {
	id, _ := strconv.ParseInt(q.Get("orderId"), 10, 64)
	return map[string]any{
		"symbol": q.Get("symbol"), "orderId": id, "orderListId": -1, "clientOrderId": q.Get("origClientOrderId"),
		"price": "43000.00000000", "origQty": "0.01000000", "executedQty": "0.00000000", "status": "NEW",
		"timeInForce": "GTC", "type": "LIMIT", "side": "BUY", "time": at.UnixMilli(), "updateTime": at.UnixMilli(), "isWorking": true,
	}
}

func binanceNewOrder(s *BinanceServer, q url.Values, at time.Time) any {
	cid := q.Get("newClientOrderId")
	id := s.orderID.Add(1)
	if cid == "" {
		cid = "exchangetest" + strconv.FormatInt(id, 10)
	}
	return map[string]any{
		"symbol": q.Get("symbol"), "orderId": id, "orderListId": -1, "clientOrderId": cid, "transactTime": at.UnixMilli(),
	}
}
