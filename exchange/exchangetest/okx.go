package exchangetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/memnet"
)

// OKX documentation pages the rules of [OKXServer] are read from.
const (
	okxDocs           = "https://www.okx.com/docs-v5/en/"
	okxDocSubAccount  = okxDocs + "#overview-rate-limits-sub-account-rate-limit"
	okxPer            = 2 * time.Second
	okxMaxBatchOrders = 20
)

// OKXSubAccountRule is the name of OKX's sub-account rule: at most 1000 new
// or amended orders per 2 s per UID, across POST /api/v5/trade/order,
// /api/v5/trade/amend-order and every order of /api/v5/trade/batch-orders
// (cancels do not count), in parallel with each endpoint's own limit
// (https://www.okx.com/docs-v5/en/#overview-rate-limits-sub-account-rate-limit).
const OKXSubAccountRule = "sub-account new and amended orders"

// Messages of OKX's rate-limit error codes, from the REST error code table
// (https://www.okx.com/docs-v5/en/#error-code-rest-api).
const (
	okxMsg50011At429 = "Too Many Requests"
	okxMsg50011At200 = "Rate limit reached. Please refer to API documentation and throttle requests accordingly."
	okxMsg50061      = "You've reached the maximum order rate limit for this account."
)

// OKXConfig configures [NewOKX]. The zero value reproduces OKX's
// documented rules at real speed with no added latency.
type OKXConfig struct {
	// Scale divides every window: with Scale 20, OKX's 2 s windows last
	// 100 ms on the server's clock. 0 means 1. It must be positive and
	// finite; NewOKX panics otherwise.
	Scale float64
	// Limits overrides the Limit of rules by name (see Rules for the names:
	// "METHOD path" for an endpoint's own rule, OKXSubAccountRule for the
	// sub-account rule), e.g. to make a test hit a limit with few requests.
	// NewOKX panics on an unknown name or a limit < 1.
	Limits map[string]int64
	// RateLimitStatus is the HTTP status of a rate-limit rejection: 0 or 429
	// answers HTTP 429 with {"code":"50011","msg":"Too Many Requests",...};
	// 200 answers HTTP 200 with {"code":"50011","msg":"Rate limit reached.
	// ...",...}. OKX's error code table lists both forms. Other values
	// make NewOKX panic.
	RateLimitStatus int
	// SubAccountCode50061, if set, answers a rejection by the sub-account
	// rule with HTTP 200 and code "50061" ("You've reached the maximum
	// order rate limit for this account."), as OKX documents. Unset, it is
	// answered like any other rule (50011), the convention this project's
	// presets share.
	SubAccountCode50061 bool
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
	// loopback. Use it inside a testing/synctest bubble, where sockets do
	// not work; the server must then be created inside the bubble and can
	// only be reached through Client and ClientFrom (its URL's host,
	// ending in .invalid, does not resolve).
	InMemory bool
	// Hostile turns on the hostile mode: absurd headers, garbage
	// Retry-After on rejections, spurious throttles (code 50011 or 50061)
	// and stalled bodies on a seeded share of the answers. The zero value
	// is off; see Hostile.
	Hostile Hostile
}

// okxKeyBy is what an OKX rule counts per.
type okxKeyBy uint8

const (
	okxByIP okxKeyBy = iota
	okxByIPInstType
	okxByIPInstID
	okxByUID
	okxByUIDInstID
)

// String names the parts of a request the rule is keyed by, as OKX
// writes them ("IP + instId").
func (k okxKeyBy) String() string {
	return [...]string{"IP", "IP+instType", "IP+instId", "UID", "UID+instId"}[k]
}

// okxBody says how an endpoint takes its parameters.
type okxBody uint8

const (
	okxQuery     okxBody = iota // GET with query parameters
	okxObject                   // POST with a JSON object
	okxBatchBody                // POST with a JSON array of objects
)

// okxEndpoint is one route of OKXServer and its own rate limit.
type okxEndpoint struct {
	method, path string
	limit        int64
	keyBy        okxKeyBy
	doc          string
	body         okxBody
	required     []string // query parameters that must be non-empty
	subAccount   bool     // counts toward OKXSubAccountRule
	data         func(s *OKXServer, q okxRequest) any
}

func (e *okxEndpoint) rule() string { return e.method + " " + e.path }
func (e *okxEndpoint) private() bool {
	return e.keyBy == okxByUID || e.keyBy == okxByUIDInstID
}

// okxOrder is the part of an order object the server reads.
type okxOrder struct {
	InstID  *string `json:"instId"`
	OrdID   string  `json:"ordId"`
	ClOrdID string  `json:"clOrdId"`
}

// okxRequest is a request after validation.
type okxRequest struct {
	at     time.Time
	query  url.Values
	orders []okxOrder // POST: the order object, or the batch
}

// okxEndpoints is the table of routes, limits and keys, from the endpoint
// pages of https://www.okx.com/docs-v5/en/ (each entry's doc). All windows
// are 2 s.
var okxEndpoints = []*okxEndpoint{
	{method: http.MethodGet, path: "/api/v5/public/instruments", limit: 20, keyBy: okxByIPInstType,
		doc: okxDocs + "#public-data-rest-api-get-instruments", required: []string{"instType"}, data: okxInstruments},
	{method: http.MethodGet, path: "/api/v5/market/tickers", limit: 20, keyBy: okxByIP,
		doc: okxDocs + "#order-book-trading-market-data-get-tickers", required: []string{"instType"}, data: okxTickers},
	{method: http.MethodGet, path: "/api/v5/market/books", limit: 40, keyBy: okxByIP,
		doc: okxDocs + "#order-book-trading-market-data-get-order-book", required: []string{"instId"}, data: okxBooks},
	{method: http.MethodGet, path: "/api/v5/market/candles", limit: 40, keyBy: okxByIP,
		doc: okxDocs + "#order-book-trading-market-data-get-candlesticks", required: []string{"instId"}, data: okxCandles},
	{method: http.MethodGet, path: "/api/v5/market/history-candles", limit: 20, keyBy: okxByIP,
		doc: okxDocs + "#order-book-trading-market-data-get-candlesticks-history", required: []string{"instId"}, data: okxCandles},
	{method: http.MethodGet, path: "/api/v5/public/funding-rate", limit: 10, keyBy: okxByIPInstID,
		doc: okxDocs + "#public-data-rest-api-get-funding-rate", required: []string{"instId"}, data: okxFundingRateNow},
	{method: http.MethodGet, path: "/api/v5/public/funding-rate-history", limit: 10, keyBy: okxByIPInstID,
		doc: okxDocs + "#public-data-rest-api-get-funding-rate-history", required: []string{"instId"}},
	{method: http.MethodGet, path: "/api/v5/public/mark-price", limit: 10, keyBy: okxByIPInstID,
		doc: okxDocs + "#public-data-rest-api-get-mark-price", required: []string{"instType"}, data: okxMarkPrice},
	{method: http.MethodPost, path: "/api/v5/trade/order", limit: 60, keyBy: okxByUIDInstID,
		doc: okxDocs + "#order-book-trading-trade-post-place-order", body: okxObject, subAccount: true, data: okxPlaced},
	{method: http.MethodPost, path: "/api/v5/trade/cancel-order", limit: 60, keyBy: okxByUIDInstID,
		doc: okxDocs + "#order-book-trading-trade-post-cancel-order", body: okxObject, data: okxCancelled},
	{method: http.MethodPost, path: "/api/v5/trade/amend-order", limit: 60, keyBy: okxByUIDInstID,
		doc: okxDocs + "#order-book-trading-trade-post-amend-order", body: okxObject, subAccount: true, data: okxAmended},
	{method: http.MethodPost, path: "/api/v5/trade/batch-orders", limit: 300, keyBy: okxByUIDInstID,
		doc: okxDocs + "#order-book-trading-trade-post-place-multiple-orders", body: okxBatchBody, subAccount: true, data: okxPlaced},
	{method: http.MethodGet, path: "/api/v5/trade/order", limit: 60, keyBy: okxByUIDInstID,
		doc: okxDocs + "#order-book-trading-trade-get-order-details", required: []string{"instId"}, data: okxOrderDetails},
	{method: http.MethodGet, path: "/api/v5/trade/orders-pending", limit: 60, keyBy: okxByUID,
		doc: okxDocs + "#order-book-trading-trade-get-order-list", data: okxEmpty},
	{method: http.MethodGet, path: "/api/v5/account/balance", limit: 10, keyBy: okxByUID,
		doc: okxDocs + "#trading-account-rest-api-get-balance", data: okxBalance},
	{method: http.MethodGet, path: "/api/v5/account/positions", limit: 10, keyBy: okxByUID,
		doc: okxDocs + "#trading-account-rest-api-get-positions", data: okxEmpty},
}

// okxRoutes maps path, then method, to its endpoint.
var okxRoutes = func() map[string]map[string]*okxEndpoint {
	m := make(map[string]map[string]*okxEndpoint)
	for _, e := range okxEndpoints {
		if m[e.path] == nil {
			m[e.path] = make(map[string]*okxEndpoint)
		}
		m[e.path][e.method] = e
	}
	return m
}()

const okxPlaceOrderRule = http.MethodPost + " /api/v5/trade/order"

// OKXServer is a running in-process server for a set of OKX v5 REST
// endpoints that enforces OKX's rate limits exactly, as a sliding window
// on arrival (see [NewOKX], which makes one; the zero OKXServer is not
// usable). All methods are safe for concurrent use, also while requests are
// being served.
type OKXServer struct {
	*core
	rateLimitStatus int
	code50061       bool
	hostile         *hostile // nil: off; its draws guarded by core.mu
	ordID           atomic.Int64
}

// NewOKX starts and returns a server for these OKX v5 endpoints; the
// caller must call Close. Every limit is per 2 s (divided by cfg.Scale),
// and each endpoint has its own rule, named "METHOD path":
//
//	GET  /api/v5/public/instruments          20 per IP+instType  (instType required)
//	GET  /api/v5/market/tickers              20 per IP           (instType required)
//	GET  /api/v5/market/books                40 per IP           (instId required)
//	GET  /api/v5/market/candles              40 per IP           (instId required)
//	GET  /api/v5/market/history-candles      20 per IP           (instId required)
//	GET  /api/v5/public/funding-rate         10 per IP+instId    (instId required)
//	GET  /api/v5/public/funding-rate-history 10 per IP+instId    (instId required)
//	GET  /api/v5/public/mark-price           10 per IP+instId    (instType required; no instId counts as instId "")
//	POST /api/v5/trade/order                 60 per UID+instId   (+1 sub-account)
//	POST /api/v5/trade/cancel-order          60 per UID+instId
//	POST /api/v5/trade/amend-order           60 per UID+instId   (+1 sub-account)
//	POST /api/v5/trade/batch-orders         300 orders per UID+instId (+1 sub-account per order)
//	GET  /api/v5/trade/order                 60 per UID+instId   (instId required)
//	GET  /api/v5/trade/orders-pending        60 per UID
//	GET  /api/v5/account/balance             10 per UID
//	GET  /api/v5/account/positions           10 per UID
//	OKXSubAccountRule                      1000 orders per UID
//
// Rules.Doc gives the documentation page of each. How a request is read:
// the client IP is the host part of RemoteAddr; the UID is the value of
// header OK-ACCESS-KEY (required on /api/v5/trade and /api/v5/account
// paths; signatures are not checked); instId and instType are query
// parameters of a GET, instId is the field of the JSON object a POST sends,
// or of each object of the JSON array batch-orders sends (1 to 20 orders).
//
// Counting, per rule and key, is an exact sliding window on arrival: a
// request arriving at t is accepted iff for every rule it falls under, the
// units accepted in (t−Window, t] plus its own are within the limit; then
// all its units are counted at t. A request counts 1 unit, except that a
// batch counts, per instId, its number of orders under the batch rule, and
// its total number of orders under the sub-account rule. A batch of
// exactly one order counts under the place-order rule instead of the batch
// rule, as OKX documents ("If there is only one order in the request, it
// will consume the rate limit of Place order",
// https://www.okx.com/docs-v5/en/#overview-rate-limits-trading-related-apis).
// Place, amend and cancel are independent rules. A request over any rule is
// rejected whole (a batch over the limit of any one of its instruments
// places nothing) with code 50011 (HTTP 429, or 200 per RateLimitStatus;
// 50061 for the sub-account rule if SubAccountCode50061 is set).
//
// Only accepted requests are counted: rejected requests do not extend the
// window, so a client that retries too fast is not locked out beyond the
// rule (OKX does not document this either way). Invalid requests are not
// counted either; they are answered with OKX's codes: 401 and 50103 without
// OK-ACCESS-KEY, 400 and 50014 for a missing parameter, 400 and 50000 for an
// empty POST body, 400 and 50002 for malformed JSON, 400 and 51000 for a
// batch of more than 20 orders, 405 and 50115 for a wrong method, and a
// plain 404 for an unknown path.
//
// Every request is logged (Log) with its arrival time, rule keys and units,
// and outcome; then the handler waits for Latency and writes a small
// OKX-shaped JSON body ({"code":"0","msg":"","data":[...]}), echoing instId
// where the request has one; placed orders get increasing ordIds.
func NewOKX(cfg OKXConfig) *OKXServer {
	scale := scaleOf(cfg.Scale, "NewOKX")
	specs := make([]ruleSpec, 0, len(okxEndpoints)+1)
	for _, e := range okxEndpoints {
		specs = append(specs, ruleSpec{name: e.rule(), limit: e.limit, per: okxPer, keyedBy: e.keyBy.String(), doc: e.doc})
	}
	specs = append(specs, ruleSpec{name: OKXSubAccountRule, limit: 1000, per: okxPer, keyedBy: "UID", doc: okxDocSubAccount})
	status := cfg.RateLimitStatus
	switch status {
	case 0:
		status = http.StatusTooManyRequests
	case http.StatusTooManyRequests, http.StatusOK:
	default:
		panic(fmt.Sprintf("exchangetest: NewOKX: RateLimitStatus must be 0, 200 or 429, got %d", status))
	}
	s := &OKXServer{
		core:            newCore(buildRules(specs, scale, cfg.Limits, "NewOKX"), nowOf(cfg.Clock), cfg.Latency),
		rateLimitStatus: status,
		code50061:       cfg.SubAccountCode50061,
		hostile:         newHostile(cfg.Hostile, "NewOKX", "50011", "50061"),
	}
	s.ordID.Store(700000000000000000)
	s.net = memnet.New("okx.exchangetest.invalid", http.HandlerFunc(s.serveHTTP), cfg.InMemory)
	return s
}

// URL returns the base URL of the server, e.g. "http://127.0.0.1:40321"
// (on TCP) or "http://okx.exchangetest.invalid" (InMemory); append a path
// such as "/api/v5/market/books?instId=BTC-USDT".
func (s *OKXServer) URL() string { return s.net.URL() }

// Client returns an HTTP client whose connections come from 127.0.0.1. It
// is the same client on every call; Close closes its idle connections.
func (s *OKXServer) Client() *http.Client { return s.net.ClientFrom("127.0.0.1") }

// ClientFrom returns an HTTP client whose requests the server sees as
// coming from ip (the IP part of the rule keys), one client per ip, reused
// across calls. With InMemory any IP works; on TCP the connection is bound
// to ip as its local address, which needs an address of this machine (on
// Linux all of 127.0.0.0/8 is). It panics if ip does not parse.
func (s *OKXServer) ClientFrom(ip string) *http.Client { return s.net.ClientFrom(ip) }

// Handler returns the server's handler, so a test can call ServeHTTP
// directly with an httptest.NewRequest of any RemoteAddr; such requests
// are counted and logged like the others.
func (s *OKXServer) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

// Close shuts the server down, blocking until outstanding requests have
// been answered (a configured latency ends early for requests whose client
// went away), and closes the idle connections of the clients it handed out.
// The log and statistics stay readable.
func (s *OKXServer) Close() { s.net.Close() }

// Rules returns a copy of the server's rules, in the order of the table in
// NewOKX, with scale and Limits applied.
func (s *OKXServer) Rules() []Rule { return s.rulesCopy() }

// Rule returns the rule named name, and whether there is one.
func (s *OKXServer) Rule(name string) (Rule, bool) { return s.rule(name) }

// Log returns a copy of the log of every request received so far, in the
// order of the decisions (so At is non-decreasing if Now does not go back).
func (s *OKXServer) Log() []Entry { return s.logCopy() }

// Stats counts the log by outcome and status; see Summarize.
func (s *OKXServer) Stats() Stats { return Summarize(s.Log()) }

// Peak returns, for every rule key, the most units the server accepted in
// any sliding window of the rule: PeakUsage(s.Log(), s.Rules()).
func (s *OKXServer) Peak() map[RuleKey]int64 { return PeakUsage(s.Log(), s.Rules()) }

// Violations returns Violations(s.Log(), s.Rules()); it is empty unless the
// server itself is broken.
func (s *OKXServer) Violations() []Violation { return Violations(s.Log(), s.Rules()) }

// Used returns the units counted for key in the sliding window that ends at
// the server's current instant.
func (s *OKXServer) Used(key RuleKey) int64 { return s.used(key) }

// okxError is an answer with a non-zero code.
func okxError(status int, code, msg string) reply {
	b, err := json.Marshal(struct {
		Code string   `json:"code"`
		Msg  string   `json:"msg"`
		Data []string `json:"data"`
	}{code, msg, []string{}})
	if err != nil {
		panic("exchangetest: encoding OKX error: " + err.Error())
	}
	return reply{status: status, body: b, code: code}
}

// serveHTTP is the handler; see NewOKX.
func (s *OKXServer) serveHTTP(w http.ResponseWriter, r *http.Request) {
	ip := remoteIP(r)
	apiKey := r.Header.Get("OK-ACCESS-KEY")
	ep, req, charges, invalid := s.parse(w, r, ip, apiKey)

	s.mu.Lock()
	now := s.now()
	req.at = now
	e := Entry{At: now, Method: r.Method, Path: r.URL.Path, IP: ip, APIKey: apiKey, Charges: charges}
	altered := s.hostile.draw()
	var rp reply
	switch {
	case invalid != nil:
		rp = *invalid
		e.Charges = nil
	case altered && s.hostile.Throttle && s.lim.check(charges, now) == nil:
		e.Outcome, e.Rule = OutcomeRateLimited, HostileRule
		switch {
		case s.hostile.ThrottleCode == "50061":
			rp = okxError(http.StatusOK, "50061", okxMsg50061)
		case s.rateLimitStatus == http.StatusOK:
			rp = okxError(http.StatusOK, "50011", okxMsg50011At200)
		default:
			rp = okxError(http.StatusTooManyRequests, "50011", okxMsg50011At429)
		}
	default:
		if rule := s.lim.admit(charges, now); rule != nil {
			e.Outcome, e.Rule = OutcomeRateLimited, rule.Name
			switch {
			case rule.Name == OKXSubAccountRule && s.code50061:
				rp = okxError(http.StatusOK, "50061", okxMsg50061)
			case s.rateLimitStatus == http.StatusOK:
				rp = okxError(http.StatusOK, "50011", okxMsg50011At200)
			default:
				rp = okxError(http.StatusTooManyRequests, "50011", okxMsg50011At429)
			}
		} else {
			e.Outcome = OutcomeAccepted
		}
	}
	if e.Outcome == OutcomeAccepted {
		rp = s.success(ep, req)
	}
	if altered {
		s.hostile.alter(&rp, now, e.Outcome == OutcomeRateLimited)
		e.Hostile = true
		if ra, ok := rp.header["Retry-After"]; ok {
			e.RetryAfter = wholeSeconds(ra)
		}
	}
	e.Status, e.Code = rp.status, rp.code
	s.log = append(s.log, e)
	s.mu.Unlock()

	if !sleepLatency(r.Context(), s.latency) {
		return // the client is gone; nothing to answer
	}
	rp.write(r.Context(), w, s.net.Stop())
}

// parse routes and validates a request and returns what it would count;
// invalid is set when the request must be answered without counting.
func (s *OKXServer) parse(w http.ResponseWriter, r *http.Request, ip, apiKey string) (ep *okxEndpoint, req okxRequest, charges []Charge, invalid *reply) {
	fail := func(rp reply) (*okxEndpoint, okxRequest, []Charge, *reply) { return nil, okxRequest{}, nil, &rp }
	byMethod := okxRoutes[r.URL.Path]
	if byMethod == nil {
		return fail(reply{status: http.StatusNotFound, body: []byte("404 page not found\n"), text: true})
	}
	ep = byMethod[r.Method]
	if ep == nil {
		return fail(okxError(http.StatusMethodNotAllowed, "50115", "Invalid request method."))
	}
	if ep.private() && apiKey == "" {
		return fail(okxError(http.StatusUnauthorized, "50103", `Request header "OK-ACCESS-KEY" cannot be empty.`))
	}
	req.query = r.URL.Query()
	for _, p := range ep.required {
		if req.query.Get(p) == "" {
			return fail(okxError(http.StatusBadRequest, "50014", "Parameter "+p+" can not be empty."))
		}
	}
	if ep.body != okxQuery {
		raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		raw = bytes.TrimSpace(raw)
		switch {
		case err != nil:
			return fail(okxError(http.StatusBadRequest, "50002", "JSON syntax error"))
		case len(raw) == 0:
			return fail(okxError(http.StatusBadRequest, "50000", "Body for POST request cannot be empty."))
		}
		if ep.body == okxObject {
			var o okxOrder
			if err := json.Unmarshal(raw, &o); err != nil {
				return fail(okxError(http.StatusBadRequest, "50002", "JSON syntax error"))
			}
			req.orders = []okxOrder{o}
		} else {
			if err := json.Unmarshal(raw, &req.orders); err != nil {
				return fail(okxError(http.StatusBadRequest, "50002", "JSON syntax error"))
			}
			if len(req.orders) == 0 {
				return fail(okxError(http.StatusBadRequest, "50000", "Body for POST request cannot be empty."))
			}
			if len(req.orders) > okxMaxBatchOrders {
				return fail(okxError(http.StatusBadRequest, "51000", "Parameter orders error"))
			}
		}
		for _, o := range req.orders {
			if o.InstID == nil || *o.InstID == "" {
				return fail(okxError(http.StatusBadRequest, "50014", "Parameter instId can not be empty."))
			}
		}
	}
	return ep, req, okxCharges(ep, req, ip, apiKey), nil
}

// okxCharges lists what a valid request counts, endpoint rule(s) first.
func okxCharges(ep *okxEndpoint, req okxRequest, ip, apiKey string) []Charge {
	key := func(rule, instID string) RuleKey {
		switch ep.keyBy {
		case okxByIP:
			return RuleKey{Rule: rule, IP: ip}
		case okxByIPInstType:
			return RuleKey{Rule: rule, IP: ip, InstType: req.query.Get("instType")}
		case okxByIPInstID:
			return RuleKey{Rule: rule, IP: ip, InstID: req.query.Get("instId")}
		case okxByUID:
			return RuleKey{Rule: rule, APIKey: apiKey}
		default: // okxByUIDInstID
			return RuleKey{Rule: rule, APIKey: apiKey, InstID: instID}
		}
	}
	var charges []Charge
	switch {
	case ep.body == okxQuery:
		charges = []Charge{{Key: key(ep.rule(), req.query.Get("instId")), Units: 1}}
	case ep.body == okxObject:
		charges = []Charge{{Key: key(ep.rule(), *req.orders[0].InstID), Units: 1}}
	case len(req.orders) == 1: // a batch of one counts as a single order
		charges = []Charge{{Key: key(okxPlaceOrderRule, *req.orders[0].InstID), Units: 1}}
	default:
		idx := make(map[string]int)
		for _, o := range req.orders {
			if i, ok := idx[*o.InstID]; ok {
				charges[i].Units++
				continue
			}
			idx[*o.InstID] = len(charges)
			charges = append(charges, Charge{Key: key(ep.rule(), *o.InstID), Units: 1})
		}
	}
	if ep.subAccount {
		charges = append(charges, Charge{Key: RuleKey{Rule: OKXSubAccountRule, APIKey: apiKey}, Units: int64(len(req.orders))})
	}
	return charges
}

// success builds the answer of an accepted request.
func (s *OKXServer) success(ep *okxEndpoint, req okxRequest) reply {
	if ep.data == nil { // funding-rate-history: the same rows as OKXServer
		return reply{status: http.StatusOK, body: fundingRateBody(req.query.Get("instId")), code: "0"}
	}
	resp := map[string]any{"code": "0", "msg": "", "data": ep.data(s, req)}
	if ep.body != okxQuery {
		us := strconv.FormatInt(req.at.UnixMicro(), 10)
		resp["inTime"], resp["outTime"] = us, us
	}
	b, err := json.Marshal(resp)
	if err != nil {
		panic("exchangetest: encoding OKX answer: " + err.Error())
	}
	return reply{status: http.StatusOK, body: b, code: "0"}
}

func okxMillis(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

func okxInstruments(_ *OKXServer, q okxRequest) any {
	t := q.query.Get("instType")
	id := "BTC-USDT"
	if t == "SWAP" {
		id = "BTC-USDT-SWAP"
	}
	return []map[string]string{{
		"instType": t, "instId": id, "baseCcy": "BTC", "quoteCcy": "USDT",
		"tickSz": "0.1", "lotSz": "0.00000001", "minSz": "0.00001", "state": "live",
	}}
}

func okxTickers(_ *OKXServer, q okxRequest) any {
	t := q.query.Get("instType")
	return []map[string]string{
		{"instType": t, "instId": "BTC-USDT", "last": "43000.1", "askPx": "43000.2", "bidPx": "43000.1", "ts": okxMillis(q.at)},
		{"instType": t, "instId": "ETH-USDT", "last": "2300.55", "askPx": "2300.56", "bidPx": "2300.55", "ts": okxMillis(q.at)},
	}
}

func okxBooks(_ *OKXServer, q okxRequest) any {
	return []map[string]any{{
		"asks": [][]string{{"43000.2", "1.5", "0", "3"}, {"43000.3", "0.8", "0", "2"}},
		"bids": [][]string{{"43000.1", "2.1", "0", "4"}, {"43000.0", "0.4", "0", "1"}},
		"ts":   okxMillis(q.at),
	}}
}

// okxCandles returns two one-minute candles ending at the arrival, newest
// first, as arrays of strings: ts, o, h, l, c, vol, volCcy, volCcyQuote,
// confirm.
func okxCandles(_ *OKXServer, q okxRequest) any {
	m := q.at.Truncate(time.Minute)
	return [][]string{
		{okxMillis(m), "43050.0", "43100.0", "42990.0", "43080.0", "12.5", "12.5", "538125.0", "0"},
		{okxMillis(m.Add(-time.Minute)), "43000.0", "43060.0", "42950.0", "43050.0", "20.1", "20.1", "864705.0", "1"},
	}
}

func okxFundingRateNow(_ *OKXServer, q okxRequest) any {
	next := q.at.Truncate(8 * time.Hour).Add(8 * time.Hour)
	return []map[string]string{{
		"instType": "SWAP", "instId": q.query.Get("instId"), "fundingRate": "0.0001",
		"fundingTime": okxMillis(next), "nextFundingTime": okxMillis(next.Add(8 * time.Hour)), "method": "current_period",
	}}
}

func okxMarkPrice(_ *OKXServer, q okxRequest) any {
	id := q.query.Get("instId")
	if id == "" {
		id = "BTC-USDT-SWAP"
	}
	return []map[string]string{{"instType": q.query.Get("instType"), "instId": id, "markPx": "43000.5", "ts": okxMillis(q.at)}}
}

func okxPlaced(s *OKXServer, q okxRequest) any {
	out := make([]map[string]string, len(q.orders))
	for i, o := range q.orders {
		out[i] = map[string]string{
			"ordId": strconv.FormatInt(s.ordID.Add(1), 10), "clOrdId": o.ClOrdID, "tag": "",
			"ts": okxMillis(q.at), "sCode": "0", "sMsg": "Order placed", "subCode": "",
		}
	}
	return out
}

func okxCancelled(_ *OKXServer, q okxRequest) any {
	o := q.orders[0]
	return []map[string]string{{"ordId": o.OrdID, "clOrdId": o.ClOrdID, "ts": okxMillis(q.at), "sCode": "0", "sMsg": ""}}
}

func okxAmended(_ *OKXServer, q okxRequest) any {
	o := q.orders[0]
	return []map[string]string{{"ordId": o.OrdID, "clOrdId": o.ClOrdID, "reqId": "", "ts": okxMillis(q.at), "sCode": "0", "sMsg": ""}}
}

func okxOrderDetails(_ *OKXServer, q okxRequest) any {
	return []map[string]string{{
		"instType": "SPOT", "instId": q.query.Get("instId"), "ordId": q.query.Get("ordId"), "clOrdId": q.query.Get("clOrdId"),
		"px": "43000", "sz": "0.01", "side": "buy", "ordType": "limit", "state": "live",
		"cTime": okxMillis(q.at), "uTime": okxMillis(q.at),
	}}
}

func okxBalance(_ *OKXServer, q okxRequest) any {
	return []map[string]any{{
		"totalEq": "10000", "uTime": okxMillis(q.at),
		"details": []map[string]string{{"ccy": "USDT", "eq": "10000", "cashBal": "10000", "availBal": "10000"}},
	}}
}

func okxEmpty(*OKXServer, okxRequest) any { return []string{} }

// okxFundingRate is one row of OKX's funding-rate-history response.
type okxFundingRate struct {
	InstID       string `json:"instId"`
	InstType     string `json:"instType"`
	FundingRate  string `json:"fundingRate"`
	RealizedRate string `json:"realizedRate"`
	FundingTime  string `json:"fundingTime"`
	Method       string `json:"method"`
}

type okxResponse struct {
	Code string           `json:"code"`
	Msg  string           `json:"msg"`
	Data []okxFundingRate `json:"data"`
}

// fundingRateBody returns a plausible successful answer: three funding
// periods, newest first, 8 hours apart.
func fundingRateBody(instID string) []byte {
	const first = int64(1700000000000) // ms since the Unix epoch
	const period = int64(8 * time.Hour / time.Millisecond)
	rates := []string{"0.0001", "0.00008", "-0.00002"}
	resp := okxResponse{Code: "0", Msg: "", Data: make([]okxFundingRate, len(rates))}
	for i, rate := range rates {
		resp.Data[i] = okxFundingRate{
			InstID:       instID,
			InstType:     "SWAP",
			FundingRate:  rate,
			RealizedRate: rate,
			FundingTime:  strconv.FormatInt(first-int64(i)*period, 10),
			Method:       "current_period",
		}
	}
	b, err := json.Marshal(resp)
	if err != nil {
		panic("exchangetest: encoding funding-rate body: " + err.Error()) // cannot happen: only strings
	}
	return b
}
