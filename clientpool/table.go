package clientpool

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"
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

	// Endpoints map method + path pattern to the rules a request falls
	// under (see Endpoint for the pattern syntax and which endpoint wins
	// when several match).
	Endpoints []Endpoint

	// Default are the costs of a request that matches no endpoint (for
	// example the IP weight every request pays). When Default is empty, a
	// request that matches no endpoint is an error (matching
	// ratesem.ErrNoEndpoint) at Pool.Classify, and so at the RoundTrip of
	// an httpclient.NewPool Transport, which then does not send it; unless
	// UnmatchedUnlimited is set.
	Default []Cost

	// UnmatchedUnlimited, when set and Default is empty, sends a request
	// that matches no endpoint without any limit (Classify returns no
	// charges), for an API that limits only the endpoints it lists (OKX
	// limits each endpoint separately). false (the zero value) makes such a
	// request an error instead, so that a path missing from the table, or
	// misspelt, is found at its first request rather than by the server's
	// 429s. Ignored when Default is not empty.
	UnmatchedUnlimited bool

	// ThrottleTargets, when set, picks from a throttled response which of
	// the call's charges it is about (Binance's body code -1015 means the
	// account's order count, -1003 the IP's weight; OKX's 50061 the
	// sub-account). Pool.Throttled pauses exactly those; a nil
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
// Table.ThrottleTargets and Pool.Throttled. It holds no reader: a
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
	// Method is the HTTP method ("GET", "POST"); "" matches any. As in
	// net/http.ServeMux, "GET" also matches HEAD requests. Methods are
	// case-sensitive: New refuses a standard method not in upper case
	// ("get"), which would match no request a client sends.
	Method string
	// Path is a URL path pattern in net/http.ServeMux's syntax, starting
	// with "/" (no host):
	//
	//   - "/api/v5/trade/order" matches that path alone;
	//   - a segment "{name}" matches any one non-empty segment:
	//     "/v1/items/{id}" matches /v1/items/42 but not /v1/items/42/tags;
	//   - a last segment "{name...}" matches the rest of the path, possibly
	//     empty: "/v1/files/{path...}" matches /v1/files/ and /v1/files/a/b;
	//   - a trailing "/" matches every path below: "/v1/" matches /v1/ and
	//     /v1/anything/else (but not /v1, which ServeMux would redirect);
	//   - a trailing "{$}" matches the path with its trailing slash only:
	//     "/v1/{$}" matches /v1/ alone.
	//
	// The Path must be clean (no empty, "." or ".." segment, no space or
	// tab), since requests are matched by their cleaned path: New refuses
	// one that no request could reach.
	//
	// When several endpoints match a request, the most specific wins, as in
	// ServeMux: the one whose pattern matches a strict subset of the other's
	// requests (a literal segment beats a wildcard there, "{name}" beats
	// "{name...}", a Method beats ""). New returns an error for two
	// endpoints that match some request in common with neither more
	// specific ("/v1/{a}/x" and "/v1/x/{b}"), for a malformed pattern, and
	// for the same Method and Path listed twice. A request's path is
	// cleaned first ("/v1//items/./42" is matched as /v1/items/42) and its
	// host is ignored.
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

// routeEntry is one endpoint as the router keeps it: an http.Handler only
// so that a ServeMux can hold it and hand it back; it never serves.
type routeEntry struct {
	costs   []Cost
	charges func(*http.Request) ([]Charge, error)
}

// ServeHTTP is never called: the router (a ServeMux) only finds entries.
func (*routeEntry) ServeHTTP(http.ResponseWriter, *http.Request) {}

// pattern returns the ServeMux pattern of e.
func (e *Endpoint) pattern() string {
	return strings.TrimPrefix(e.Method+" "+e.Path, " ") // no Method: the Path alone
}

// register returns an error, instead of ServeMux's panic, when pattern
// cannot be registered on mux with h.
func register(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			var ok bool
			if err, ok = r.(error); !ok {
				err = fmt.Errorf("%v", r)
			}
		}
	}()
	mux.Handle(pattern, h)
	return nil
}

// newRouter returns the router of eps, a net/http.ServeMux (nil when eps
// is empty) that finds the endpoint of a request (match), so that
// patterns, precedence and conflicts are exactly ServeMux's; or an error
// naming the endpoint (and, for a conflict, the other one) that ServeMux
// refuses.
func newRouter(eps []Endpoint) (*http.ServeMux, error) {
	if len(eps) == 0 {
		return nil, nil
	}
	if !muxPatterns() {
		return nil, errors.New("ratesem: endpoints need net/http.ServeMux's patterns, which GODEBUG=httpmuxgo121=1 turns off: unset it")
	}
	mux := http.NewServeMux()
	seen := make(map[[2]string]bool, len(eps))
	for i := range eps {
		e := &eps[i]
		if seen[[2]string{e.Method, e.Path}] {
			return nil, fmt.Errorf("ratesem: endpoint %q listed twice: remove one", e.pattern())
		}
		seen[[2]string{e.Method, e.Path}] = true
		if !strings.HasPrefix(e.Path, "/") {
			return nil, fmt.Errorf("ratesem: endpoint %q: Path must start with \"/\" (a path pattern, no host)", e.pattern())
		}
		if strings.ContainsAny(e.Path, " \t") {
			return nil, fmt.Errorf("ratesem: endpoint %q: Path has a space or tab: a ServeMux pattern cannot match one", e.pattern())
		}
		if c := cleanPath(e.Path); c != e.Path {
			// Requests are matched by their cleaned path (match): this
			// pattern could never match one.
			return nil, fmt.Errorf("ratesem: endpoint %q: Path has empty, \".\" or \"..\" segments (no host part either), so no request, matched by its cleaned path, reaches it: write %q", e.pattern(), c)
		}
		if strings.ContainsAny(e.Method, " \t/") {
			return nil, fmt.Errorf("ratesem: endpoint %q: Method %q is not an HTTP method", e.pattern(), e.Method)
		}
		if up := strings.ToUpper(e.Method); up != e.Method && standardMethod(up) {
			return nil, fmt.Errorf("ratesem: endpoint %q: methods are case-sensitive and clients send %q: write Method %q", e.pattern(), up, up)
		}
		h := &routeEntry{costs: e.Costs, charges: e.Charges}
		// A pattern alone first: its error is about its syntax.
		if err := register(http.NewServeMux(), e.pattern(), h); err != nil {
			return nil, fmt.Errorf("ratesem: endpoint %q is not a net/http.ServeMux pattern: %v", e.pattern(), unwrapAll(err))
		}
		if err := register(mux, e.pattern(), h); err != nil {
			// Then a conflict: find the endpoint it conflicts with.
			for j := range i {
				m := http.NewServeMux()
				register(m, eps[j].pattern(), h)
				if register(m, e.pattern(), h) != nil {
					return nil, fmt.Errorf("ratesem: endpoints %q and %q match some request in common and neither is more specific: make one match fewer requests (a literal segment or a method) or drop one", eps[j].pattern(), e.pattern())
				}
			}
			return nil, fmt.Errorf("ratesem: endpoint %q: %v", e.pattern(), err)
		}
	}
	return mux, nil
}

// standardMethod reports whether m is one of the methods of RFC 9110 and
// RFC 5789 (PATCH), in upper case as clients send them.
func standardMethod(m string) bool {
	return slices.Contains([]string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace}, m)
}

// muxPatterns reports whether ServeMux matches patterns with methods and
// wildcards (Go 1.22's), as it does unless GODEBUG has httpmuxgo121=1.
var muxPatterns = sync.OnceValue(func() bool {
	mux := http.NewServeMux()
	h := &routeEntry{}
	if register(mux, "GET /a/{b}", h) != nil {
		return false
	}
	got, _ := mux.Handler(&http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/a/c"}})
	return got == h
})

// unwrapAll returns the innermost error of a chain of single wraps
// (ServeMux's "parsing %q: %w" is then only the reason).
func unwrapAll(err error) error {
	for u := errors.Unwrap(err); u != nil; u = errors.Unwrap(u) {
		err = u
	}
	return err
}

// match returns the endpoint of req under the router mux, or nil when none
// matches.
func match(mux *http.ServeMux, req *http.Request) *routeEntry {
	if mux == nil || req.URL == nil {
		return nil
	}
	probe := req
	esc := req.URL.EscapedPath()
	clean := cleanPath(decodeDots(esc))
	if req.Method == "" || clean != esc {
		// ServeMux would redirect an unclean path, and takes the method
		// literally where a client sends "" as GET: match a copy.
		u := &url.URL{Path: clean, RawPath: clean}
		if p, err := url.PathUnescape(clean); err == nil {
			u.Path = p
		}
		probe = &http.Request{Method: method(req), Host: req.Host, URL: u}
	}
	h, _ := mux.Handler(probe)
	e, _ := h.(*routeEntry) // not ours: not found, method not allowed, or a redirect of /tree to /tree/
	return e
}

// decodeDots returns the escaped path p with every "%2e" (either case)
// written as ".": a percent-encoded unreserved character is the character
// itself (RFC 3986 6.2.2.2), so that "%2e%2e" is a dot segment that
// cleanPath removes, as a server normalising the path does.
func decodeDots(p string) string {
	if !strings.Contains(p, "%2") {
		return p
	}
	return strings.NewReplacer("%2e", ".", "%2E", ".").Replace(p)
}

// cleanPath returns p as ServeMux matches it: rooted, with "." and ".."
// elements and repeated slashes removed, keeping a trailing slash.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// Classify returns the charges of a request under the Table's endpoints:
// one per rule of the matching endpoint (or of the Table's Default) whose
// Key applies; none for a request that matches no endpoint when the Table
// has no Default and sets UnmatchedUnlimited. It returns an error matching
// ratesem.ErrNoEndpoint for a request that matches no endpoint when the
// Table has neither, an error matching ratesem.ErrNegativeWeight for a
// negative weight, or the error of the endpoint's Charges function. It
// does not block, changes nothing and is safe for concurrent use.
func (p *Pool) Classify(req *http.Request) ([]Charge, error) {
	var costs []Cost
	if e := match(p.routes, req); e != nil {
		if e.charges != nil {
			return e.charges(req)
		}
		costs = e.costs
	} else if costs = p.table.Default; len(costs) == 0 && !p.table.UnmatchedUnlimited {
		path := ""
		if req.URL != nil {
			path = req.URL.Path
		}
		return nil, fmt.Errorf("%w: %s %s: add an Endpoint for it (or a Default) to the Table, or set Table.UnmatchedUnlimited to send such requests without a limit", ratesem.ErrNoEndpoint, method(req), path)
	}
	charges := make([]Charge, 0, len(costs))
	for _, c := range costs {
		r := p.rules[c.Rule]
		var key string
		if r.Key != nil {
			var ok bool
			if key, ok = r.Key(req); !ok {
				continue // the rule does not apply to req
			}
		}
		w := int64(1)
		switch {
		case c.Units != 0:
			w = c.Units
		case c.Weight != nil:
			w = c.Weight(req)
		case r.Weight != nil:
			w = r.Weight(req)
		}
		if w < 0 {
			return nil, fmt.Errorf("%w %d under rule %q for %s %s", ratesem.ErrNegativeWeight, w, c.Rule, method(req), req.URL.Path)
		}
		charges = append(charges, Charge{Rule: c.Rule, Key: key, Weight: w})
	}
	return charges, nil
}

// method returns req's method as a client sends it ("" is GET).
func method(req *http.Request) string {
	if req.Method == "" {
		return http.MethodGet
	}
	return req.Method
}
