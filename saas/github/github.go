// Package github is the preset of the GitHub REST API's rate limits
// ("Rate limits for the REST API",
// https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api)
// for package clientpool: Table returns the primary limits, learned from
// the responses, and the secondary limits, which GitHub documents but does
// not report.
//
//	pool, err := clientpool.New(github.Table())
//	client := &http.Client{Transport: httpclient.NewPool(pool, httpclient.WithThrottledBody(github.Throttled))}
//
// The rules, per token (the Authorization header; requests without one
// count per client, key ""):
//
//   - RuleCore, the primary limit of the REST API (5000 requests per hour for a user token,
//     60 unauthenticated, more for apps): learned from each response's
//     x-ratelimit-limit, -remaining and -reset (Unix epoch seconds) when
//     x-ratelimit-resource is "core". The reset is on GitHub's clock: the
//     pool reads it against the response's Date header, with
//     clientpool.ResetMargin, so a host clock ahead of GitHub's never
//     starts a window early. Until the first response says it,
//     one request at a time; then each token spends the budget GitHub
//     announced for its window, and a new window's budget when GitHub
//     announces it (clientpool.Learned).
//   - RuleSearch, the search API's own primary limit (30 per minute), for
//     paths under /search/, learned the same way (resource "search"), and
//     RuleCodeSearch, code search's (GET /search/code, 10 per minute,
//     resource "code_search").
//   - RulePoints: at most 900 points per minute per endpoint, GET, HEAD and
//     OPTIONS 1 point, POST, PATCH, PUT and DELETE 5. An endpoint is the
//     method and Endpoint(path) (/repos/{owner}/{repo}/issues/*): coarser
//     than GitHub's own notion at worst, never finer.
//   - RuleConcurrent: at most 100 requests in flight.
//   - RuleCreatePerMinute and RuleCreatePerHour: at most 80
//     content-creating requests per minute and 500 per hour. The page does
//     not list which requests create content; the preset counts every POST
//     and PUT.
//   - RuleCPU and RuleGraphQLCPU, the limit on server time: "No more than
//     90 seconds of CPU time per 60 seconds of real time is allowed. No
//     more than 60 seconds of this CPU time may be for the GraphQL API.
//     You can roughly estimate the CPU time by measuring the total
//     response time for your API requests." RuleCPU counts every request
//     (REST and GraphQL) against 90 000 ms per minute, RuleGraphQLCPU the
//     GraphQL API's (POST /graphql) against 60 000 ms per minute, both in
//     milliseconds (clientpool.Rule.TimeUnit): a request is admitted for
//     an estimate of its server time (1 s by default, or
//     WithCPUEstimate) and settled when it ends to its response time, the
//     wall time from its admission to its release, rounded up to the
//     millisecond: at least GitHub's CPU time for it, which GitHub does
//     not report. A request that takes longer than its estimate counts
//     only its estimate while in flight: give WithCPUEstimate the longest
//     response time you expect (GitHub ends a request after 10 s of
//     processing, the longest estimate worth giving). The estimate also
//     bounds the requests in flight: 90 of 1 s, 9 of 10 s.
//
// The secondary limits count in any window (window.NewCompletion: from a
// request's start to a minute after its end, which holds at the server
// whatever the latency). GitHub answers a limit exceeded with 403 or 429
// and retry-after, or with x-ratelimit-remaining 0 and the reset: pass
// Throttled to httpclient.WithThrottledBody so that a 403 counts as a
// throttle, and the pool pauses the token until then.
package github

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/saas/internal/req"
	"github.com/ratesem/ratesem/window"
)

// docsURL is the GitHub page every rule's Source points to.
const docsURL = "https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api"

// Rule names, as they appear in Charges, Events and Pool.SetLimit.
const (
	RuleCore            = "core"
	RuleSearch          = "search"
	RuleCodeSearch      = "code search"
	RulePoints          = "points per endpoint"
	RuleConcurrent      = "concurrent"
	RuleCreatePerMinute = "content per minute"
	RuleCreatePerHour   = "content per hour"
	RuleCPU             = "cpu time"
	RuleGraphQLCPU      = "graphql cpu time"
)

// The limit on server time (see the package doc; the rules' Source, "About
// secondary rate limits"), counted in units of cpuUnit (unexported: the
// package doc and the rules' Limit say them).
const (
	// cpuPerMinute is the server time of every request of a token, REST
	// and GraphQL, in any minute, in units of cpuUnit: 90 s.
	cpuPerMinute = 90_000
	// graphQLCPUPerMinute is the part of cpuPerMinute the GraphQL API
	// may take, in units of cpuUnit: 60 s.
	graphQLCPUPerMinute = 60_000
	// cpuUnit is the unit of RuleCPU and RuleGraphQLCPU
	// (clientpool.Rule.TimeUnit): a millisecond of response time, rounded
	// up. Under WithScale the unit and the window are divided by the
	// scale, and N rounded down so that N units never exceed the scaled
	// budget.
	cpuUnit = time.Millisecond
	// cpuEstimate is the server time a request is admitted for under
	// RuleCPU and RuleGraphQLCPU when WithCPUEstimate does not say: 1 s
	// (divided by WithScale's factor).
	cpuEstimate = time.Second
	// graphQLPath is the GraphQL API's endpoint (POST /graphql).
	graphQLPath = "/graphql"
)

// The documented secondary limits (see the rules' Source, "About secondary
// rate limits").
const (
	PointsPerMinute     = 900 // points per endpoint per minute
	MaxConcurrent       = 100 // requests in flight
	CreatesPerMinute    = 80  // content-creating requests per minute
	CreatesPerHour      = 500 // content-creating requests per hour
	PointsRead          = 1   // GET, HEAD, OPTIONS
	PointsWrite         = 5   // POST, PATCH, PUT, DELETE
	SearchPerMinute     = 30  // the search resource's primary limit for a user
	CodeSearchPerMinute = 10  // the code_search resource's (GET /search/code)
	UnauthenticatedCore = 60  // the core limit without a token, per hour
)

// The response headers of the primary limits, which Table's rules read
// (Rule.Usage): x-ratelimit-limit, -remaining, -reset (Unix epoch seconds)
// and -resource.
const (
	headerLimit     = "x-ratelimit-limit"
	headerRemaining = "x-ratelimit-remaining"
	headerReset     = "x-ratelimit-reset" // Unix epoch seconds
	headerResource  = "x-ratelimit-resource"
)

// Option configures Table.
type Option func(*config)

type config struct {
	core     int64
	scale    float64
	expect   bool
	estimate time.Duration
}

// WithCoreLimit sets a guess of the primary limit, in requests per hour,
// which the first response corrects; 0 (the default) admits one request at
// a time until the first response says the limit.
func WithCoreLimit(n int64) Option { return func(c *config) { c.core = max(n, 0) } }

// WithCPUEstimate sets the server time a request is admitted for under
// RuleCPU and RuleGraphQLCPU, until its end settles it to its response
// time: the longest response time expected, as measured on the pool's
// clock (under WithScale, not divided again). d ≤ 0 keeps cpuEstimate; a
// d longer than the GraphQL budget (60 s, divided by the scale) is that
// budget, so that a request is never too heavy to start.
func WithCPUEstimate(d time.Duration) Option { return func(c *config) { c.estimate = d } }

// WithScale divides every window (hour, minute) by f, for a test server on
// a scaled clock (saastest's Scale); f ≤ 0, NaN or infinite keeps 1.
func WithScale(f float64) Option { return func(c *config) { c.scale = f } }

// Table returns GitHub's rules, set up by opts. Every request is charged
// under RuleCore or RuleSearch, RulePoints, RuleConcurrent and RuleCPU, and
// a POST or PUT also under the two content-creation rules; a search under
// RuleSearch or RuleCodeSearch instead of RuleCore; a GraphQL request
// (POST graphQLPath) under RuleGraphQLCPU instead of RuleCore (the GraphQL
// API's primary limit, in points computed from the query, is its own and
// not modelled here).
func Table(opts ...Option) clientpool.Table {
	var c config
	for _, o := range opts {
		o(&c)
	}
	hour, minute := req.Scaled(time.Hour, c.scale), req.Scaled(time.Minute, c.scale)
	unit, cpuN, gqlN := cpuUnits(c.scale)
	estimate := c.estimate
	if estimate <= 0 {
		estimate = req.Scaled(cpuEstimate, c.scale)
	}
	cpuWeight := min(clientpool.TimeUnits(estimate, unit), gqlN)
	graphql := func(r *http.Request) bool { return r.URL.Path == graphQLPath }
	code := func(r *http.Request) bool {
		return r.URL.Path == "/search/code" || strings.HasPrefix(r.URL.Path, "/search/code/")
	}
	search := func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/search/") && !code(r) }
	creates := func(r *http.Request) bool { return r.Method == http.MethodPost || r.Method == http.MethodPut }
	rules := []clientpool.Rule{
		{Name: RuleCore, Limit: window.Limit{N: c.core, Per: hour}, Learn: learn("core"),
			Key: func(r *http.Request) (string, bool) { return token(r), !search(r) && !code(r) && !graphql(r) }},
		{Name: RuleSearch, Limit: window.Limit{N: 0, Per: minute}, Learn: learn("search"),
			Key: func(r *http.Request) (string, bool) { return token(r), search(r) }},
		{Name: RuleCodeSearch, Limit: window.Limit{N: 0, Per: minute}, Learn: learn("code_search"),
			Key: func(r *http.Request) (string, bool) { return token(r), code(r) }},
		{Name: RulePoints, Limit: window.Limit{N: PointsPerMinute, Per: minute},
			Key: func(r *http.Request) (string, bool) {
				return token(r) + " " + r.Method + " " + Endpoint(r.URL.Path), true
			},
			Weight: points},
		{Name: RuleConcurrent, Limit: window.Limit{N: MaxConcurrent, Per: time.Microsecond}, MaxUnitsInFlight: MaxConcurrent,
			Key: func(r *http.Request) (string, bool) { return token(r), true }},
		{Name: RuleCreatePerMinute, Limit: window.Limit{N: CreatesPerMinute, Per: minute},
			Key: func(r *http.Request) (string, bool) { return token(r), creates(r) }},
		{Name: RuleCreatePerHour, Limit: window.Limit{N: CreatesPerHour, Per: hour},
			Key: func(r *http.Request) (string, bool) { return token(r), creates(r) }},
		{Name: RuleCPU, Limit: window.Limit{N: cpuN, Per: minute}, TimeUnit: unit,
			Key:    func(r *http.Request) (string, bool) { return token(r), true },
			Weight: func(*http.Request) int64 { return cpuWeight }},
		{Name: RuleGraphQLCPU, Limit: window.Limit{N: gqlN, Per: minute}, TimeUnit: unit,
			Key:    func(r *http.Request) (string, bool) { return token(r), graphql(r) },
			Weight: func(*http.Request) int64 { return cpuWeight }},
	}
	var t clientpool.Table
	for _, r := range rules {
		r.Source = docsURL
		r.PauseOnThrottle = true
		t.Rules = append(t.Rules, r)
		t.Default = append(t.Default, clientpool.Cost{Rule: r.Name})
	}
	return t
}

// cpuUnits returns the unit of RuleCPU and RuleGraphQLCPU under a scale
// f (cpuUnit divided by f, rounded down, at least 1 ns) and their N: the
// scaled budgets (90 s and 60 s divided by f) in that unit, rounded down,
// so that N units never exceed a scaled budget, and a measure in those
// units (rounded up) never falls short of a duration. An f so small that a
// minute divided by it overflows a Duration counts as the smallest that
// does not (the windows saturate there too, req.Scaled).
func cpuUnits(f float64) (unit time.Duration, cpu, graphql int64) {
	if !(f > 0) || math.IsInf(f, 0) {
		f = 1
	}
	f = max(f, float64(time.Minute)/math.MaxInt64)
	unit = max(time.Duration(float64(cpuUnit)/f), 1)
	n := func(units int64) int64 {
		return max(int64(float64(units)*float64(cpuUnit)/f/float64(unit)), 1)
	}
	return unit, n(cpuPerMinute), n(graphQLCPUPerMinute)
}

// points is a request's weight under RulePoints.
func points(r *http.Request) int64 {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, "":
		return PointsRead
	}
	return PointsWrite
}

// token returns the key of a request's token: a hash of its Authorization
// header (the token itself is never kept), "" without one.
func token(r *http.Request) string {
	a := r.Header.Get("Authorization")
	if a == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(a))
	return hex.EncodeToString(sum[:8])
}

// Endpoint returns the endpoint a path belongs to for RulePoints, never
// finer than GitHub's own: /repos/{owner}/{repo}, /users/{user} and
// /orgs/{org} named, then the resource that follows, and everything after
// it as "*" (/repos/{owner}/{repo}/issues/* for an issue, its comments, its
// events; /repos/{owner}/{repo}/commits/* for every SHA; /gists/* for every
// gist). GitHub's routes put ids, SHAs, branch names and file paths after
// the resource; without its route table, the preset cannot tell which
// deeper segments are fixed, so it counts them together: at worst fewer
// points per endpoint than GitHub allows, never more. It reads nothing
// but p.
func Endpoint(p string) string {
	seg := strings.Split(strings.Trim(p, "/"), "/")
	named := map[string][]string{"repos": {"{owner}", "{repo}"}, "users": {"{user}"}, "orgs": {"{org}"}}[seg[0]]
	keep := min(len(seg), 1+len(named)+1) // the prefix, its names, the resource
	if len(named) == 0 {
		keep = min(len(seg), 1)
	}
	for i := 1; i < keep && i <= len(named); i++ {
		seg[i] = named[i-1]
	}
	e := "/" + strings.Join(seg[:keep], "/")
	if keep < len(seg) {
		e += "/*"
	}
	return e
}

// learn reads the primary limit of one resource: x-ratelimit-limit,
// -remaining and -reset (Unix epoch seconds on GitHub's clock, the
// window's end: Learned.Epoch, read against the response's Date header),
// when x-ratelimit-resource names resource (or is absent, for "core").
func learn(resource string) func(http.Header, time.Time) (clientpool.Learned, bool) {
	return func(h http.Header, _ time.Time) (clientpool.Learned, bool) {
		res := h.Get(headerResource)
		if res != resource && (res != "" || resource != "core") {
			return clientpool.Learned{}, false
		}
		n, ok := req.Count(h.Get(headerLimit))
		if !ok || n == 0 {
			return clientpool.Learned{}, false
		}
		in := clientpool.Learned{Limit: window.Limit{N: n}, Remaining: -1}
		if r, ok := req.Count(h.Get(headerRemaining)); ok {
			in.Remaining = r
		}
		// The reset is on GitHub's clock: the pool reads it against the
		// response's Date (Learned.Epoch), so it is not compared with the
		// host's clock here: a host ahead of GitHub's would drop it.
		if s, ok := req.Count(h.Get(headerReset)); ok && s < 1<<40 && s > 0 {
			in.Reset, in.Epoch = time.Unix(s, 0), true
		}
		return in, true
	}
}

// Throttled reports whether a response is GitHub's answer to a limit
// exceeded: a 429, or a 403 with retry-after or with x-ratelimit-remaining
// 0. Give it to httpclient.WithThrottledBody; it reads no body.
func Throttled(status int, h http.Header, _ []byte) bool {
	switch status {
	case http.StatusTooManyRequests:
		return true
	case http.StatusForbidden:
		return h.Get("Retry-After") != "" || h.Get(headerRemaining) == "0"
	}
	return false
}
