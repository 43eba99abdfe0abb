package saastest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/memnet"
)

// GitHubDocs is the page the GitHub server's model is read from.
const GitHubDocs = "https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api"

// GitHubConfig configures NewGitHub. The zero value reproduces GitHub's
// documented limits at real speed: 5000 requests per hour per token (60
// per IP without one), search 30 per minute (10 without a token), at most
// 100 requests in flight, 900 points per minute per endpoint, 80
// content-creating requests per minute and 500 per hour, rejections 403.
// A negative number makes NewGitHub panic.
type GitHubConfig struct {
	// Limit is the primary limit of an authenticated token per hour
	// (resource core). 0 means 5000.
	Limit int64
	// UnauthenticatedLimit is the primary limit per client IP without an
	// Authorization header, per hour. 0 means 60.
	UnauthenticatedLimit int64
	// SearchLimit and UnauthenticatedSearchLimit are the primary limits of
	// resource search (paths under /search/) per minute. 0 means 30 and
	// 10.
	SearchLimit, UnauthenticatedSearchLimit int64
	// InitialUsed starts the first core window of every key with this
	// many requests already used (capped at the limit), so that the first
	// response shows x-ratelimit-remaining below the limit, as for a token
	// another program already used.
	InitialUsed int64
	// RejectStatus is the status of a rejection, primary or secondary: 0
	// or 403 answers 403, 429 answers 429 (GitHub documents both). Other
	// values make NewGitHub panic.
	RejectStatus int
	// MaxInFlight is the secondary limit on requests in flight per key
	// (arrived and not yet answered). 0 means 100.
	MaxInFlight int64
	// PointsPerMinute is the secondary limit of points per minute per key
	// and endpoint. 0 means 900.
	PointsPerMinute int64
	// CreatesPerMinute and CreatesPerHour are the secondary limits of
	// content-creating requests (POST and PUT) per key. 0 means 80 and
	// 500.
	CreatesPerMinute, CreatesPerHour int64
	// Pages is the number of pages of every listing. 0 means 3.
	Pages int
	// Scale divides every window (the hour lasts time.Hour/Scale on the
	// server's clock). 0 means 1; it must be positive and finite.
	Scale float64
	// CPUTime turns on the secondary limit on server time (GitHubDocs,
	// "About secondary rate limits": "No more than 90 seconds of CPU time
	// per 60 seconds of real time is allowed. No more than 60 seconds of
	// this CPU time may be for the GraphQL API."). The server's CPU time
	// of a request is its handler time: from its arrival (At) to its
	// answer (Done), Latency and ServerTime included, on the server's
	// clock. It is off by default so that configs written before it keep
	// their meaning (a hundred requests in flight spend 100 s of server
	// time per second).
	CPUTime bool
	// CPUPerMinute and GraphQLCPUPerMinute are the server time allowed
	// per key in any minute (divided by Scale), of every request and of
	// the GraphQL API's (POST /graphql), with CPUTime. 0 means 90 s and
	// 60 s (divided by Scale).
	CPUPerMinute, GraphQLCPUPerMinute time.Duration
	// ServerTime returns how long the server works on an accepted request
	// before it answers, on its clock, after Latency: a route's own time,
	// or a random one. nil, or a result ≤ 0, means none. It is called once
	// per accepted request, outside the server's lock.
	ServerTime func(r *http.Request) time.Duration
	// Latency, Clock, InMemory and MaxBodyBytes work as in OpenAIConfig.
	// With a latency, requests stay in flight long enough to test
	// MaxInFlight.
	Latency      func() time.Duration
	Clock        ratesem.Clock
	InMemory     bool
	MaxBodyBytes int64
}

// GitHubServer is an in-process server of a small fake GitHub REST API
// that enforces GitHub's primary and secondary rate limits (see
// NewGitHub). Its methods are safe for concurrent use, also while requests
// are served.
type GitHubServer struct {
	base
	cfg  GitHubConfig
	keys map[string]*ghKey

	peakInFlight int64
}

// ghKey is the state of one token (or client IP).
type ghKey struct {
	windows  map[string]*ghWindow // by resource
	inFlight int64
	points   map[string][]ghStamp // by endpoint, accepted in the last minute
	creates  []ghStamp            // accepted in the last hour
	cpu      []ghSpan             // answered in the last minute (CPUTime), in order of their ends
	firstEnd time.Time            // end of the first core window (the one InitialUsed applies to)
}

type ghWindow struct {
	end  time.Time
	used int64
}

type ghStamp struct {
	at time.Time
	n  int64
}

// ghSpan is the handler time d of a request answered at end.
type ghSpan struct {
	end     time.Time
	d       time.Duration
	graphql bool
}

// NewGitHub starts a server for GET, HEAD, OPTIONS, POST, PATCH, PUT and
// DELETE under /repos/{owner}/{repo}/..., /users/{user}/... and
// /search/{kind}; the caller must Close it. It panics on an invalid config.
//
// The model (from GitHubDocs). Requests are counted per key: the
// Authorization header's value, or the client IP without one.
//
// Primary limit: per key and resource (core; search for /search/), a
// window starts at the first request judged after the previous window
// ended and lasts an hour (search: a minute), divided by Scale; at most
// Limit (UnauthenticatedLimit, SearchLimit...) accepted requests per
// window. Every judged response carries x-ratelimit-limit, -remaining,
// -used, -reset (the window's end in Unix epoch seconds, rounded up) and
// -resource, and a Date header read on the server's clock. Over the limit
// the answer is RejectStatus with x-ratelimit-remaining 0, and the request
// is not counted.
//
// Secondary limits, per key, checked at arrival in sliding windows (after
// the primary one): at most MaxInFlight requests accepted and not yet
// answered (the count drops just before the reply is written); at most
// PointsPerMinute points in any minute per endpoint, where an endpoint is
// the method and the path template (/repos/{owner}/{repo}, /users/{user},
// numeric segments as {n}) and GET, HEAD and OPTIONS cost 1 point, POST,
// PATCH, PUT and DELETE 5; at most CreatesPerMinute content-creating
// requests in any minute and CreatesPerHour in any hour. GitHub does not
// list which requests create content; this server takes POST and PUT (they
// create issues, comments, files), not PATCH (edits) or DELETE. A
// violation is answered RejectStatus with retry-after (whole seconds until
// the window admits the request; 1 for the in-flight cap) and a
// secondary-limit message, and is not counted anywhere.
//
// Server time (with CPUTime): each accepted request's handler time (Done −
// At) is summed per key over the requests answered in the last minute
// (divided by Scale), and the GraphQL API's apart; a request that arrives
// when the sum has reached CPUPerMinute (a GraphQL request: or the GraphQL
// sum GraphQLCPUPerMinute) is answered RejectStatus with retry-after (until
// enough answered requests leave the minute) and a secondary-limit message
// (Entry.Limit LimitCPU or LimitGraphQLCPU). The time counts when the
// request ends, as a time known only then; requests in flight count
// nothing yet.
//
// POST /graphql is the GraphQL API: resource "graphql" (its primary
// window counts requests against Limit, not GraphQL's points), 5 points
// under the endpoint "POST /graphql", not content-creating, answered 200.
//
// GET of a listing (a path whose last segment is a name, e.g.
// /repos/o/r/issues, /users/u/repos, /search/repositories) answers page
// ?page= of Pages pages of ?per_page= (default 30, at most 100) items,
// with a Link header (rel="next", rel="last") before the last page; other
// GETs answer an object. POST answers 201, DELETE 204. A body that is not
// JSON, or larger than MaxBodyBytes, is answered 400; other paths 404,
// other methods 405; none is counted.
func NewGitHub(cfg GitHubConfig) *GitHubServer {
	def := func(v *int64, d int64, name string) {
		if *v < 0 {
			panic(fmt.Sprintf("saastest: NewGitHub: negative %s %d", name, *v))
		}
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.Limit, 5000, "Limit")
	def(&cfg.UnauthenticatedLimit, 60, "UnauthenticatedLimit")
	def(&cfg.SearchLimit, 30, "SearchLimit")
	def(&cfg.UnauthenticatedSearchLimit, 10, "UnauthenticatedSearchLimit")
	def(&cfg.MaxInFlight, 100, "MaxInFlight")
	def(&cfg.PointsPerMinute, 900, "PointsPerMinute")
	def(&cfg.CreatesPerMinute, 80, "CreatesPerMinute")
	def(&cfg.CreatesPerHour, 500, "CreatesPerHour")
	if cfg.InitialUsed < 0 || cfg.Pages < 0 {
		panic("saastest: NewGitHub: negative InitialUsed or Pages")
	}
	if cfg.CPUPerMinute < 0 || cfg.GraphQLCPUPerMinute < 0 {
		panic("saastest: NewGitHub: negative CPUPerMinute or GraphQLCPUPerMinute")
	}
	if cfg.Pages == 0 {
		cfg.Pages = 3
	}
	switch cfg.RejectStatus {
	case 0:
		cfg.RejectStatus = http.StatusForbidden
	case http.StatusForbidden, http.StatusTooManyRequests:
	default:
		panic(fmt.Sprintf("saastest: NewGitHub: RejectStatus must be 0, 403 or 429, got %d", cfg.RejectStatus))
	}
	s := &GitHubServer{
		base: newBase(cfg.Clock, cfg.Scale, cfg.Latency, cfg.MaxBodyBytes, "NewGitHub"),
		cfg:  cfg,
		keys: make(map[string]*ghKey),
	}
	if s.cfg.CPUPerMinute == 0 {
		s.cfg.CPUPerMinute = s.scaled(90 * time.Second)
	}
	if s.cfg.GraphQLCPUPerMinute == 0 {
		s.cfg.GraphQLCPUPerMinute = s.scaled(60 * time.Second)
	}
	s.net = memnet.New("github.saastest.invalid", http.HandlerFunc(s.serveHTTP), cfg.InMemory)
	return s
}

// PeakInFlight returns the most requests of one key that were accepted
// and not yet answered at any instant.
func (s *GitHubServer) PeakInFlight() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peakInFlight
}

// PeakPoints returns the most points one endpoint of one key held in any
// window (t−minute, t] (minute divided by Scale), from the log.
func (s *GitHubServer) PeakPoints() int64 {
	return peakPerWindow(s.Log(), s.scaled(time.Minute),
		func(e Entry) int64 { return e.Points }, func(e Entry) string { return e.Key + " " + e.Endpoint })
}

// PeakCreates returns the most content-creating requests of one key in any
// minute and in any hour (divided by Scale), from the log.
func (s *GitHubServer) PeakCreates() (perMinute, perHour int64) {
	log := s.Log()
	one := func(e Entry) int64 {
		if e.Creates {
			return 1
		}
		return 0
	}
	key := func(e Entry) string { return e.Key }
	return peakPerWindow(log, s.scaled(time.Minute), one, key), peakPerWindow(log, s.scaled(time.Hour), one, key)
}

// Violations returns the accepted requests that broke a limit, recomputed
// from the log: a primary window (key, resource and window end) holding
// more accepted requests than its limit allows after InitialUsed, or a
// request that ended a sliding window over the points or content-creation
// limits. It is empty unless the server's bookkeeping is wrong (the
// in-flight cap is checked live: see PeakInFlight).
func (s *GitHubServer) Violations() []Entry {
	log := s.Log()
	var bad []Entry
	type win struct {
		key, res string
		end      time.Time
	}
	used := map[win]int64{}
	first := map[string]time.Time{} // the first core window's end per key
	s.mu.Lock()
	for key, k := range s.keys {
		first[key] = k.firstEnd
	}
	s.mu.Unlock()
	for _, e := range log {
		if !e.Accepted() {
			continue
		}
		w := win{e.Key, e.Resource, e.Reset}
		used[w]++
		n := used[w]
		if e.Resource == "core" && e.Reset.Equal(first[e.Key]) {
			n += min(s.cfg.InitialUsed, s.primaryLimit(e.Key, e.Resource))
		}
		if n > s.primaryLimit(e.Key, e.Resource) {
			bad = append(bad, e)
		}
	}
	check := func(w time.Duration, limit int64, units func(Entry) int64, key func(Entry) string) {
		sums := map[string][]ghStamp{}
		for _, e := range log {
			u := units(e)
			if !e.Accepted() || u == 0 {
				continue
			}
			k := key(e)
			st := append(sums[k], ghStamp{e.At, u})
			for len(st) > 0 && !st[0].at.After(e.At.Add(-w)) {
				st = st[1:]
			}
			sums[k] = st
			var sum int64
			for _, x := range st {
				sum += x.n
			}
			if sum > limit {
				bad = append(bad, e)
			}
		}
	}
	points := func(e Entry) int64 { return e.Points }
	creates := func(e Entry) int64 {
		if e.Creates {
			return 1
		}
		return 0
	}
	check(s.scaled(time.Minute), s.cfg.PointsPerMinute, points, func(e Entry) string { return e.Key + " " + e.Endpoint })
	check(s.scaled(time.Minute), s.cfg.CreatesPerMinute, creates, func(e Entry) string { return e.Key })
	check(s.scaled(time.Hour), s.cfg.CreatesPerHour, creates, func(e Entry) string { return e.Key })
	return bad
}

func (s *GitHubServer) primaryLimit(key, resource string) int64 {
	auth := !strings.HasPrefix(key, "ip:")
	switch {
	case resource == "search" && auth:
		return s.cfg.SearchLimit
	case resource == "search":
		return s.cfg.UnauthenticatedSearchLimit
	case auth:
		return s.cfg.Limit
	}
	return s.cfg.UnauthenticatedLimit
}

// ghTemplate returns the path template of p and whether p is a path this
// server answers; list reports a listing (last segment a name).
func ghTemplate(p string) (tmpl string, list, ok bool) {
	seg := strings.Split(strings.Trim(p, "/"), "/")
	for _, s := range seg {
		if s == "" {
			return "", false, false
		}
	}
	if len(seg) == 1 && seg[0] == "graphql" {
		return "/graphql", false, true
	}
	minLen := map[string]int{"repos": 3, "users": 2, "search": 2}[seg[0]]
	if minLen == 0 || len(seg) < minLen {
		return "", false, false
	}
	out := slices.Clone(seg)
	named := map[string][]string{"repos": {"{owner}", "{repo}"}, "users": {"{user}"}}[seg[0]]
	for i := 1; i < len(out); i++ {
		switch {
		case i <= len(named):
			out[i] = named[i-1]
		case isNumber(out[i]):
			out[i] = "{n}"
		}
	}
	last := out[len(out)-1]
	list = len(seg) > len(named)+1 && !strings.HasPrefix(last, "{")
	return "/" + strings.Join(out, "/"), list, true
}

func isNumber(s string) bool {
	_, err := strconv.ParseUint(s, 10, 64)
	return err == nil
}

func ghMessage(msg string) map[string]string {
	return map[string]string{"message": msg, "documentation_url": GitHubDocs}
}

func (s *GitHubServer) primaryHeaders(limit int64, w *ghWindow, res string) map[string]string {
	end := w.end.Add(time.Second - time.Nanosecond).Unix() // rounded up to the second
	return map[string]string{
		"x-ratelimit-limit":     strconv.FormatInt(limit, 10),
		"x-ratelimit-remaining": strconv.FormatInt(max(0, limit-w.used), 10),
		"x-ratelimit-used":      strconv.FormatInt(w.used, 10),
		"x-ratelimit-reset":     strconv.FormatInt(end, 10),
		"x-ratelimit-resource":  res,
		// on the server's clock (Clock), which the reset is read against
		"Date": s.now().UTC().Format(http.TimeFormat),
	}
}

// sinceWindow drops the stamps at or before now−w and returns the rest
// and their sum.
func sinceWindow(st []ghStamp, now time.Time, w time.Duration) ([]ghStamp, int64) {
	i := 0
	for i < len(st) && !st[i].at.After(now.Add(-w)) {
		i++
	}
	st = st[i:]
	var sum int64
	for _, x := range st {
		sum += x.n
	}
	return st, sum
}

// freeIn returns how long until the stamps of a window w, holding sum,
// have room for n more within limit.
func freeIn(st []ghStamp, sum, n, limit int64, now time.Time, w time.Duration) time.Duration {
	for _, x := range st {
		if sum+n <= limit {
			break
		}
		sum -= x.n
		if sum+n <= limit {
			return x.at.Add(w).Sub(now)
		}
	}
	return 0
}

func (s *GitHubServer) serveHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	e := Entry{At: s.now(), Method: r.Method, Path: r.URL.Path, Limit: LimitInvalid}
	s.mu.Unlock()
	invalid := func(status int, msg string) {
		e.Status = status
		s.mu.Lock()
		s.record(e)
		s.mu.Unlock()
		writeJSON(w, status, nil, ghMessage(msg))
	}
	tmpl, list, ok := ghTemplate(r.URL.Path)
	if !ok {
		invalid(http.StatusNotFound, "Not Found")
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		e.Points = 1
	case http.MethodPost, http.MethodPatch, http.MethodPut, http.MethodDelete:
		e.Points = 5
		e.Creates = r.Method == http.MethodPost || r.Method == http.MethodPut
	default:
		invalid(http.StatusMethodNotAllowed, "Method Not Allowed")
		return
	}
	body, err := s.readBody(w, r)
	if err != nil {
		invalid(http.StatusBadRequest, "Problems parsing JSON: "+err.Error())
		return
	}
	if len(body) > 0 && !json.Valid(body) {
		invalid(http.StatusBadRequest, "Problems parsing JSON")
		return
	}
	e.Endpoint = r.Method + " " + tmpl
	e.Resource = "core"
	graphql := tmpl == "/graphql"
	switch {
	case strings.HasPrefix(tmpl, "/search/"):
		e.Resource = "search"
	case graphql:
		e.Resource = "graphql"
		e.Creates = false
	}
	if a := r.Header.Get("Authorization"); a != "" {
		e.Key = a
	} else {
		ip, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			ip = r.RemoteAddr
		}
		e.Key = "ip:" + ip
	}
	e.Requests = 1

	s.mu.Lock()
	now := s.now()
	e.At = now
	k := s.keys[e.Key]
	if k == nil {
		k = &ghKey{windows: map[string]*ghWindow{}, points: map[string][]ghStamp{}}
		s.keys[e.Key] = k
	}
	limit := s.primaryLimit(e.Key, e.Resource)
	win := k.windows[e.Resource]
	if win == nil || !now.Before(win.end) {
		per := time.Hour
		if e.Resource == "search" {
			per = time.Minute
		}
		nw := &ghWindow{end: now.Add(s.scaled(per))}
		if win == nil && e.Resource == "core" {
			nw.used = min(s.cfg.InitialUsed, limit)
			k.firstEnd = nw.end
		}
		win = nw
		k.windows[e.Resource] = win
	}
	e.Reset = win.end
	var pts, cm, ch []ghStamp
	var ptsSum, cmSum, chSum int64
	pts, ptsSum = sinceWindow(k.points[e.Endpoint], now, s.scaled(time.Minute))
	k.points[e.Endpoint] = pts
	ch, chSum = sinceWindow(k.creates, now, s.scaled(time.Hour))
	k.creates = ch
	cm, cmSum = sinceWindow(ch, now, s.scaled(time.Minute))
	var cpu, gql time.Duration
	if s.cfg.CPUTime {
		cpu, gql = k.cpuLocked(now, s.scaled(time.Minute))
	}
	var creates int64
	if e.Creates {
		creates = 1
	}
	var retry time.Duration
	switch {
	case win.used+1 > limit:
		e.Limit = LimitPrimary
	case k.inFlight+1 > s.cfg.MaxInFlight:
		e.Limit, retry = LimitConcurrency, time.Second
	case ptsSum+e.Points > s.cfg.PointsPerMinute:
		e.Limit = LimitPoints
		retry = freeIn(pts, ptsSum, e.Points, s.cfg.PointsPerMinute, now, s.scaled(time.Minute))
	case cmSum+creates > s.cfg.CreatesPerMinute:
		e.Limit = LimitCreatesMinute
		retry = freeIn(cm, cmSum, 1, s.cfg.CreatesPerMinute, now, s.scaled(time.Minute))
	case chSum+creates > s.cfg.CreatesPerHour:
		e.Limit = LimitCreatesHour
		retry = freeIn(ch, chSum, 1, s.cfg.CreatesPerHour, now, s.scaled(time.Hour))
	case s.cfg.CPUTime && cpu >= s.cfg.CPUPerMinute:
		e.Limit = LimitCPU
		retry = k.cpuFreeIn(cpu, s.cfg.CPUPerMinute, false, now, s.scaled(time.Minute))
	case s.cfg.CPUTime && graphql && gql >= s.cfg.GraphQLCPUPerMinute:
		e.Limit = LimitGraphQLCPU
		retry = k.cpuFreeIn(gql, s.cfg.GraphQLCPUPerMinute, true, now, s.scaled(time.Minute))
	default:
		e.Limit = ""
	}
	if e.Limit != "" {
		e.Status = s.cfg.RejectStatus
		s.record(e)
		h := s.primaryHeaders(limit, win, e.Resource)
		s.mu.Unlock()
		msg := "API rate limit exceeded for " + e.Key + "."
		if e.Limit == LimitPrimary {
			h["x-ratelimit-remaining"] = "0"
		} else {
			h["retry-after"] = strconv.FormatInt(ceilSeconds(retry), 10)
			msg = "You have exceeded a secondary rate limit (" + e.Limit + "). Please wait a few minutes before you try again."
		}
		s.wait(r.Context())
		writeJSON(w, e.Status, h, ghMessage(msg))
		return
	}
	win.used++
	k.inFlight++
	s.peakInFlight = max(s.peakInFlight, k.inFlight)
	k.points[e.Endpoint] = append(pts, ghStamp{now, e.Points})
	if e.Creates {
		k.creates = append(ch, ghStamp{now, 1})
	}
	e.Status = http.StatusOK
	switch r.Method {
	case http.MethodPost:
		e.Status = http.StatusCreated
	case http.MethodDelete:
		e.Status = http.StatusNoContent
	}
	if graphql {
		e.Status = http.StatusOK
	}
	idx := s.record(e)
	s.mu.Unlock()

	s.wait(r.Context())
	if s.cfg.ServerTime != nil {
		s.sleep(r.Context(), s.cfg.ServerTime(r))
	}

	s.mu.Lock()
	k.inFlight--
	done := s.now()
	s.log[idx].Done = done
	if s.cfg.CPUTime {
		k.cpu = append(k.cpu, ghSpan{end: done, d: max(done.Sub(now), 0), graphql: graphql})
	}
	h := s.primaryHeaders(limit, win, e.Resource)
	s.mu.Unlock()
	s.answer(w, r, e.Status, h, list)
}

// cpuLocked drops the spans of k that ended at or before now−w and
// returns the handler time of the rest, all and GraphQL's. The spans are
// appended in the order of their ends (under the server's lock, at the
// answer), so the ones to drop come first.
func (k *ghKey) cpuLocked(now time.Time, w time.Duration) (all, graphql time.Duration) {
	i := 0
	for i < len(k.cpu) && !k.cpu[i].end.After(now.Add(-w)) {
		i++
	}
	k.cpu = k.cpu[i:]
	for _, sp := range k.cpu {
		all += sp.d
		if sp.graphql {
			graphql += sp.d
		}
	}
	return all, graphql
}

// cpuFreeIn returns how long until the handler time sum of k's spans in
// the window w (GraphQL's only, when graphql) falls below limit as the
// oldest spans leave it.
func (k *ghKey) cpuFreeIn(sum, limit time.Duration, graphql bool, now time.Time, w time.Duration) time.Duration {
	for _, sp := range k.cpu {
		if graphql && !sp.graphql {
			continue
		}
		sum -= sp.d
		if sum < limit {
			return sp.end.Add(w).Sub(now)
		}
	}
	return 0
}

// PeakCPU returns the most handler time (Done − At) of one key's accepted
// requests that were answered in any window (t−minute, t] (minute divided
// by Scale), of all requests and of the GraphQL API's (POST /graphql),
// from the log; with CPUTime off as well, to show what the limit would
// have seen.
func (s *GitHubServer) PeakCPU() (all, graphql time.Duration) {
	type span struct {
		end time.Time
		d   time.Duration
	}
	every, gql := map[string][]span{}, map[string][]span{}
	for _, e := range s.Log() {
		if !e.Accepted() || e.Done.IsZero() {
			continue
		}
		sp := span{e.Done, max(e.Done.Sub(e.At), 0)}
		every[e.Key] = append(every[e.Key], sp)
		if e.Resource == "graphql" {
			gql[e.Key] = append(gql[e.Key], sp)
		}
	}
	w := s.scaled(time.Minute)
	peak := func(by map[string][]span) time.Duration {
		var p time.Duration
		for _, sps := range by {
			slices.SortStableFunc(sps, func(a, b span) int { return a.end.Compare(b.end) })
			var sum time.Duration
			lo := 0
			for _, x := range sps {
				sum += x.d
				for !sps[lo].end.After(x.end.Add(-w)) {
					sum -= sps[lo].d
					lo++
				}
				p = max(p, sum)
			}
		}
		return p
	}
	return peak(every), peak(gql)
}

// answer writes the fake resource of an accepted request.
func (s *GitHubServer) answer(w http.ResponseWriter, r *http.Request, status int, h map[string]string, list bool) {
	if status == http.StatusNoContent || r.Method == http.MethodHead || r.Method == http.MethodOptions {
		for k, v := range h {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		return
	}
	id := int64(hash64(1, []byte(r.URL.Path)) >> 33)
	if !list || r.Method != http.MethodGet {
		writeJSON(w, status, h, map[string]any{"id": id, "url": r.URL.Path})
		return
	}
	q := r.URL.Query()
	page, _ := strconv.Atoi(q.Get("page"))
	page = max(page, 1)
	per, _ := strconv.Atoi(q.Get("per_page"))
	if per < 1 {
		per = 30
	}
	per = min(per, 100)
	var items []any
	if page <= s.cfg.Pages {
		for i := range per {
			n := int64((page-1)*per + i + 1)
			items = append(items, map[string]any{"id": id + n, "number": n, "url": fmt.Sprintf("%s/%d", r.URL.Path, n)})
		}
	}
	if page < s.cfg.Pages {
		link := func(p int) string {
			u := url.URL{Scheme: "http", Host: r.Host, Path: r.URL.Path,
				RawQuery: url.Values{"page": {strconv.Itoa(p)}, "per_page": {strconv.Itoa(per)}}.Encode()}
			return "<" + u.String() + ">"
		}
		h["Link"] = link(page+1) + `; rel="next", ` + link(s.cfg.Pages) + `; rel="last"`
	}
	if items == nil {
		items = []any{}
	}
	if strings.HasPrefix(r.URL.Path, "/search/") {
		writeJSON(w, status, h, map[string]any{"total_count": s.cfg.Pages * per, "incomplete_results": false, "items": items})
		return
	}
	writeJSON(w, status, h, items)
}
