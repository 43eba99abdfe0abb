package clientpool

import (
	"fmt"
	"net/http"
	"time"

	"github.com/ratesem/ratesem"
)

// Table is an API's limits as data: its rules, and which rules each
// endpoint falls under with what weight. The presets in
// github.com/ratesem/ratesem/exchange are Tables. A Table is read-only once
// given to New.
type Table struct {
	// Rules are the limits, each applied per key.
	Rules []Rule

	// Endpoints map method + path to the rules a request falls under.
	Endpoints []Endpoint

	// Default are the costs of a request that matches no endpoint (for
	// example the IP weight every request pays); nil means such requests
	// are not limited.
	Default []Cost

	// ThrottleTargets, when set, picks from a throttled response which of
	// the call's charges it is about (Binance's body code -1015 means the
	// account's order count, -1003 the IP's weight; OKX's 50061 the
	// sub-account). Pool.ThrottledResponse pauses exactly those; a nil
	// result falls back to the rules marked PauseOnThrottle. It is a pure
	// function of th: it never reads a body (th.Body holds what the
	// transport saw), and it must be safe for concurrent use.
	ThrottleTargets func(th Throttle, charges []Charge) []Charge

	// Scope, in Redis mode (redisrate.Shared), names the group of limits this
	// Table's keys belong to, for example an exchange and an account or
	// an egress IP ("binance:acct-7"): every Pool over the same Redis with
	// the same prefix and Scope shares the same counts. Every key of one
	// scope shares one hash tag, so that one call's keys, passed together
	// to one Lua script, always hash to one slot of a Redis Cluster. The
	// consequence: one scope lives in one slot, hence on one cluster node;
	// to spread the load over the nodes, use one Table (and Pool) per
	// account or IP group, each with its own Scope. "" means the prefix
	// alone is the scope. Ignored in process.
	Scope string
}

// Throttle is what a transport saw of one throttled response, handed to
// Table.ThrottleTargets and Pool.ThrottledResponse. It holds no reader: a
// stalled body can never block the pool.
type Throttle struct {
	// Status is the response's HTTP status code (429, 418, or 200 for an
	// API that signals a throttle in the body, as OKX's 50011).
	Status int
	// Header is the response's header; read-only.
	Header http.Header
	// Body is the start of the response body as far as it was seen when
	// the throttle was reported (at most a few hundred bytes; possibly
	// empty or cut short). Read-only.
	Body []byte
	// RetryAfter is the server's usable Retry-After delay, already capped
	// by the caller, or 0 when the response had none (the pool then backs
	// off on its own).
	RetryAfter time.Duration
}

// Endpoint is one API endpoint and what a request to it costs.
type Endpoint struct {
	// Method is the HTTP method ("GET", "POST"); "" matches any.
	Method string
	// Path is the URL path, matched exactly ("/api/v5/trade/order").
	Path string
	// Costs are the rules the endpoint falls under, each with a weight.
	Costs []Cost
	// Charges, when set, computes the charges itself instead of Costs, for
	// requests that fall under one rule with several keys (an OKX batch of
	// orders on several instruments counts per instrument). It must treat
	// the request as read-only (read a body through req.GetBody) and be
	// safe for concurrent use.
	Charges func(req *http.Request) ([]Charge, error)
	// Source is where the weights come from (the API documentation page).
	Source string
}

// Cost is what a request to an endpoint costs under one rule.
type Cost struct {
	// Rule names a rule of the Table.
	Rule string
	// Units is a fixed weight, in the rule's units; 0 means Weight decides.
	Units int64
	// Weight computes the weight from the request (Binance's depth costs 5
	// to 250 by its limit parameter; OKX's batch orders count each order).
	// nil, with Units 0, means the rule's Weight, or 1.
	Weight func(req *http.Request) int64
}

type route struct{ method, path string }

type routeEntry struct {
	costs   []Cost
	charges func(*http.Request) ([]Charge, error)
}

// classify returns the charges of req under t, merging charges to the same
// limiter. It returns an error for a negative weight.
func (p *Pool) classify(req *http.Request) ([]Charge, error) {
	e, ok := p.routes[route{req.Method, req.URL.Path}]
	if !ok {
		if e, ok = p.routes[route{"", req.URL.Path}]; !ok {
			e = routeEntry{costs: p.table.Default}
		}
	}
	if e.charges != nil {
		return e.charges(req)
	}
	costs := e.costs
	charges := make([]Charge, 0, len(costs))
	for _, c := range costs {
		r := p.rules[c.Rule]
		key := ""
		if r.Key != nil {
			k, ok := r.Key(req)
			if !ok {
				continue
			}
			key = k
		}
		var w int64
		switch {
		case c.Units != 0:
			w = c.Units
		case c.Weight != nil:
			w = c.Weight(req)
		case r.Weight != nil:
			w = r.Weight(req)
		default:
			w = 1
		}
		if w < 0 {
			return nil, fmt.Errorf("ratesem: %s %s: %w %d under rule %q", req.Method, req.URL.Path, ratesem.ErrNegativeWeight, w, c.Rule)
		}
		charges = append(charges, Charge{Rule: c.Rule, Key: key, Weight: w})
	}
	return charges, nil
}
