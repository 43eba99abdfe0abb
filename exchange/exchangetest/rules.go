package exchangetest

import (
	"cmp"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ratesem/ratesem"
)

// Rule is one rate limit a server enforces: at most Limit units per window
// per key. Servers return their rules from their Rules method; the values
// are fixed when the server is created.
type Rule struct {
	// Name identifies the rule within its server, e.g.
	// "GET /api/v5/market/books" (an OKX endpoint's own limit),
	// OKXSubAccountRule or BinanceRequestWeight.
	Name string
	// Limit is the number of units admitted per window per key (requests,
	// request weight or orders, as the rule counts them).
	Limit int64
	// Per is the window length the exchange documents, e.g. 2 s for OKX or
	// one minute for Binance's REQUEST_WEIGHT.
	Per time.Duration
	// Window is the length the server really counts in: Per divided by the
	// server's time scale (equal to Per when the scale is 1), on the
	// server's clock.
	Window time.Duration
	// Fixed reports how the window moves. false: a sliding window; a request
	// arriving at t is admitted iff the units accepted in (t−Window, t] plus
	// its own are at most Limit (OKX). true: fixed windows aligned to the
	// clock, [k·Window, (k+1)·Window) counted from the Unix epoch (window
	// index k = floor(UnixNano / Window)); the count restarts at every
	// boundary (Binance).
	Fixed bool
	// KeyedBy names what the rule counts per, as the exchange documents it:
	// "IP", "IP+instType", "IP+instId", "UID", "UID+instId" (OKX) or
	// "IP", "account" (Binance). The parts appear in the RuleKey fields.
	KeyedBy string
	// Doc is the URL of the documentation page the rule was read from.
	Doc string
}

// RuleKey identifies one counter: a rule together with the parts of the
// request it is keyed by. Fields the rule is not keyed by are empty, so a
// RuleKey is directly comparable and usable as a map key.
type RuleKey struct {
	Rule     string // Rule.Name
	IP       string // client IP: host part of the request's RemoteAddr
	APIKey   string // OKX: header OK-ACCESS-KEY (taken as the UID); Binance: header X-MBX-APIKEY (the account)
	InstID   string // OKX instId
	InstType string // OKX instType
}

// String returns the rule name followed by the non-empty key parts, e.g.
// "GET /api/v5/public/funding-rate ip=127.0.0.1 instId=BTC-USDT-SWAP".
func (k RuleKey) String() string {
	var b strings.Builder
	b.WriteString(k.Rule)
	for _, p := range [...]struct{ name, v string }{
		{"ip", k.IP}, {"apiKey", k.APIKey}, {"instId", k.InstID}, {"instType", k.InstType},
	} {
		if p.v != "" {
			b.WriteString(" " + p.name + "=" + p.v)
		}
	}
	return b.String()
}

// Charge is what one request counts under one rule: Units units on the
// counter Key.
type Charge struct {
	// Key is the counter charged: a rule and the request's key parts.
	Key RuleKey
	// Units is what the request counts under the rule (requests, request
	// weight or orders, as Rule.Limit counts them).
	Units int64
}

// Outcome classifies a logged request.
type Outcome uint8

const (
	// OutcomeInvalid: answered before any rate limit was consulted (unknown
	// path, wrong method, missing parameter or API key, malformed body).
	// Such requests are not counted by any rule.
	OutcomeInvalid Outcome = iota
	// OutcomeAccepted: admitted by every rule; its Charges were counted.
	OutcomeAccepted
	// OutcomeRateLimited: rejected by the rule named in Entry.Rule (OKX
	// 50011 or 50061, Binance HTTP 429); nothing was counted.
	OutcomeRateLimited
	// OutcomeBanned: Binance only; answered HTTP 418 because the IP is, or
	// by this request becomes, banned; nothing was counted.
	OutcomeBanned
)

// String returns "invalid", "accepted", "rate-limited" or "banned".
func (o Outcome) String() string {
	switch o {
	case OutcomeInvalid:
		return "invalid"
	case OutcomeAccepted:
		return "accepted"
	case OutcomeRateLimited:
		return "rate-limited"
	case OutcomeBanned:
		return "banned"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Entry is a server's record of one request.
type Entry struct {
	// At is the arrival time: read once from the server's clock, under the
	// server's lock, when the decision was made and before any configured
	// latency. It carries a monotonic reading when the clock is time.Now.
	At time.Time
	// Method and Path are the request's method and URL path.
	Method, Path string
	// IP is the host part of the request's RemoteAddr.
	IP string
	// APIKey is the value of the exchange's API-key header ("" if absent).
	APIKey string
	// Charges lists what the request counts under each rule it falls
	// under. For an accepted request they were counted; for a rate-limited
	// or banned one they are what it would have counted (nothing was); for
	// an invalid one they are nil.
	Charges []Charge
	// Outcome says whether the request was counted, and if not why.
	Outcome Outcome
	// Rule is the name of the rule that rejected the request when Outcome
	// is OutcomeRateLimited, otherwise "".
	Rule string
	// Status is the HTTP status answered. It is recorded even if the
	// client went away before the answer was written.
	Status int
	// Code is the exchange's code in the JSON body: OKX "0" on success,
	// "50011", "50061", "50014", ...; Binance "" on success, "-1003",
	// "-1015", ...
	Code string
	// RetryAfter is the value, in whole seconds, of the Retry-After header
	// sent (Binance 429 and 418), or 0 when none was sent or it was not a
	// whole number of seconds (the hostile mode may send anything).
	RetryAfter int
	// Hostile reports that the hostile mode (Hostile) altered the answer:
	// its headers, its Retry-After, a spurious throttle (Rule HostileRule)
	// or a stalled body.
	Hostile bool
}

// Stats counts the requests of a log by outcome and status.
type Stats struct {
	Requests    int // every logged request
	Accepted    int // OutcomeAccepted
	RateLimited int // OutcomeRateLimited, whatever the HTTP status (OKX may answer 200 with 50011)
	Banned      int // OutcomeBanned
	Invalid     int // OutcomeInvalid
	Status429   int // answered HTTP 429
	Status418   int // answered HTTP 418
	Hostile     int // answers the hostile mode altered (Entry.Hostile)
	// LimitedBy counts the rate-limited requests by the rule that rejected
	// them. It is never nil.
	LimitedBy map[string]int
}

// Summarize counts the entries of log. It does not modify log.
func Summarize(log []Entry) Stats {
	s := Stats{Requests: len(log), LimitedBy: map[string]int{}}
	for _, e := range log {
		switch e.Outcome {
		case OutcomeAccepted:
			s.Accepted++
		case OutcomeRateLimited:
			s.RateLimited++
			s.LimitedBy[e.Rule]++
		case OutcomeBanned:
			s.Banned++
		default:
			s.Invalid++
		}
		if e.Hostile {
			s.Hostile++
		}
		switch e.Status {
		case http.StatusTooManyRequests:
			s.Status429++
		case StatusBanned:
			s.Status418++
		}
	}
	return s
}

// Offered returns a copy of log in which every rate-limited or banned
// request counts as accepted, with the charges it would have counted: the
// load the clients offered, rather than the load the server let through.
// Violations(Offered(log), rules) lists where a client sent more than a
// rule allows in one window, whether or not the server turned the excess
// away; it is empty for a client that never calls too fast. Invalid
// requests stay as they are (they count under no rule). log is not
// modified.
func Offered(log []Entry) []Entry {
	out := make([]Entry, len(log))
	for i, e := range log {
		e.Charges = slices.Clone(e.Charges)
		if e.Outcome == OutcomeRateLimited || e.Outcome == OutcomeBanned {
			e.Outcome = OutcomeAccepted
		}
		out[i] = e
	}
	return out
}

// StatusBanned is HTTP 418, the status Binance answers to a banned IP.
const StatusBanned = http.StatusTeapot

// PeakUsage returns, for every RuleKey charged by an accepted entry of log
// whose rule is in rules, the most units accepted in any one window of that
// rule:
//   - sliding rules (Fixed false): the maximum over all instants t of the
//     units of accepted entries with At in (t−Window, t] (entries with equal
//     At all count);
//   - fixed rules: the maximum over the aligned windows
//     [k·Window, (k+1)·Window) since the Unix epoch.
//
// These are exactly the quantities the servers bound by Limit, so on a
// server's own log every value is at most its rule's Limit; compare with
// Violations. Entries that were not accepted, and charges of rules not in
// rules, are ignored. log need not be sorted and is not modified. The
// computation is exact and takes O(n log n) time.
func PeakUsage(log []Entry, rules []Rule) map[RuleKey]int64 {
	byName := make(map[string]Rule, len(rules))
	for _, r := range rules {
		byName[r.Name] = r
	}
	type use struct {
		at    time.Time
		units int64
	}
	byKey := make(map[RuleKey][]use)
	for _, e := range log {
		if e.Outcome != OutcomeAccepted {
			continue
		}
		for _, c := range e.Charges {
			if _, ok := byName[c.Key.Rule]; ok {
				byKey[c.Key] = append(byKey[c.Key], use{e.At, c.Units})
			}
		}
	}
	out := make(map[RuleKey]int64, len(byKey))
	for k, us := range byKey {
		r := byName[k.Rule]
		var best int64
		if r.Fixed {
			sums := make(map[int64]int64)
			for _, u := range us {
				i := windowIndex(u.at, r.Window)
				sums[i] += u.units
				best = max(best, sums[i])
			}
		} else {
			slices.SortStableFunc(us, func(a, b use) int { return a.at.Compare(b.at) })
			var sum int64
			i := 0
			for j, u := range us {
				sum += u.units
				for u.at.Sub(us[i].at) >= r.Window {
					sum -= us[i].units
					i++
				}
				// The window ending at u.at is complete once every entry
				// with the same instant has been added.
				if j == len(us)-1 || !us[j+1].at.Equal(u.at) {
					best = max(best, sum)
				}
			}
		}
		out[k] = best
	}
	return out
}

// Violation reports a counter whose peak usage exceeds its rule's limit.
type Violation struct {
	// Key is the counter over its limit, and Rule the rule it counts for.
	Key  RuleKey
	Rule Rule
	// Peak is the most units accepted in one window (see PeakUsage).
	Peak int64
	// Limit is Rule.Limit, in the same units.
	Limit int64
}

// String describes the violation, e.g.
// "REQUEST_WEIGHT 1m ip=127.0.0.1: 6005 units in one fixed window of 3s, limit 6000".
func (v Violation) String() string {
	kind := "sliding"
	if v.Rule.Fixed {
		kind = "fixed"
	}
	return fmt.Sprintf("%v: %d units in one %s window of %v, limit %d", v.Key, v.Peak, kind, v.Rule.Window, v.Limit)
}

// Violations returns the counters of PeakUsage(log, rules) whose peak
// exceeds their rule's Limit, sorted by rule name and then key. On a
// server's own log it is always empty (the server enforces the rules); on
// a log built or filtered by hand, or checked against tighter rules, it
// shows where a rule was broken.
func Violations(log []Entry, rules []Rule) []Violation {
	byName := make(map[string]Rule, len(rules))
	for _, r := range rules {
		byName[r.Name] = r
	}
	var out []Violation
	for k, peak := range PeakUsage(log, rules) {
		if r := byName[k.Rule]; peak > r.Limit {
			out = append(out, Violation{Key: k, Rule: r, Peak: peak, Limit: r.Limit})
		}
	}
	slices.SortFunc(out, func(a, b Violation) int {
		return cmp.Or(cmp.Compare(a.Key.Rule, b.Key.Rule), cmp.Compare(a.Key.String(), b.Key.String()))
	})
	return out
}

// windowIndex returns floor(t.UnixNano() / w), the index of the fixed window
// [k·w, (k+1)·w) since the Unix epoch that holds t.
func windowIndex(t time.Time, w time.Duration) int64 {
	n, d := t.UnixNano(), int64(w)
	q := n / d
	if n%d != 0 && n < 0 {
		q--
	}
	return q
}

// untilWindowEnd returns the time from t to the end of its fixed window.
func untilWindowEnd(t time.Time, w time.Duration) time.Duration {
	return time.Duration((windowIndex(t, w)+1)*int64(w) - t.UnixNano())
}

// scaleOf validates a configured time scale; 0 means 1.
func scaleOf(scale float64, who string) float64 {
	if scale == 0 {
		return 1
	}
	if !(scale > 0) || math.IsInf(scale, 1) {
		panic(fmt.Sprintf("exchangetest: %s: Scale must be positive and finite, got %v", who, scale))
	}
	return scale
}

// scaled returns d divided by scale, rounded to the nearest nanosecond and
// at least 1 ns.
func scaled(d time.Duration, scale float64) time.Duration {
	if scale == 1 {
		return d
	}
	return max(time.Duration(math.Round(float64(d)/scale)), 1)
}

// ruleSpec is a rule as documented, before scaling and overrides.
type ruleSpec struct {
	name    string
	limit   int64
	per     time.Duration
	fixed   bool
	keyedBy string
	doc     string
}

// buildRules applies the scale and the limit overrides to specs. It panics
// if an override names no rule or is not positive.
func buildRules(specs []ruleSpec, scale float64, overrides map[string]int64, who string) []Rule {
	rules := make([]Rule, len(specs))
	known := make(map[string]bool, len(specs))
	for i, s := range specs {
		rules[i] = Rule{
			Name: s.name, Limit: s.limit, Per: s.per, Window: scaled(s.per, scale),
			Fixed: s.fixed, KeyedBy: s.keyedBy, Doc: s.doc,
		}
		known[s.name] = true
	}
	for name, limit := range overrides {
		if !known[name] {
			names := make([]string, len(specs))
			for i, s := range specs {
				names[i] = fmt.Sprintf("%q", s.name)
			}
			panic(fmt.Sprintf("exchangetest: %s: Limits names unknown rule %q; the rules are %s", who, name, strings.Join(names, ", ")))
		}
		if limit <= 0 {
			panic(fmt.Sprintf("exchangetest: %s: Limits[%q] must be positive, got %d", who, name, limit))
		}
		for i := range rules {
			if rules[i].Name == name {
				rules[i].Limit = limit
			}
		}
	}
	return rules
}

// limiter counts accepted units per RuleKey, for every rule of a server.
// It is not safe for concurrent use; the servers guard it with their lock.
type limiter struct {
	rules map[string]*ruleState
}

type ruleState struct {
	Rule
	sliding   map[RuleKey]*slidingLog
	fixed     map[RuleKey]*fixedCount
	lastSweep time.Time
}

// slidingLog holds the accepted units of one key inside the current window,
// oldest first, and their sum.
type slidingLog struct {
	at    []time.Time
	units []int64
	sum   int64
}

// fixedCount holds the units accepted for one key in window index.
type fixedCount struct {
	index int64
	used  int64
}

func newLimiter(rules []Rule) *limiter {
	l := &limiter{rules: make(map[string]*ruleState, len(rules))}
	for _, r := range rules {
		l.rules[r.Name] = &ruleState{
			Rule:    r,
			sliding: make(map[RuleKey]*slidingLog),
			fixed:   make(map[RuleKey]*fixedCount),
		}
	}
	return l
}

// prune drops the units outside (now−w, now].
func (s *slidingLog) prune(now time.Time, w time.Duration) {
	i := 0
	for i < len(s.at) && now.Sub(s.at[i]) >= w {
		s.sum -= s.units[i]
		i++
	}
	if i == len(s.at) {
		s.at, s.units = s.at[:0], s.units[:0]
		return
	}
	s.at, s.units = s.at[i:], s.units[i:]
}

// used returns the units counted for k in the window that holds now.
func (l *limiter) used(k RuleKey, now time.Time) int64 {
	rs := l.rules[k.Rule]
	if rs == nil {
		return 0
	}
	if rs.Fixed {
		if c := rs.fixed[k]; c != nil && c.index == windowIndex(now, rs.Window) {
			return c.used
		}
		return 0
	}
	if s := rs.sliding[k]; s != nil {
		s.prune(now, rs.Window)
		return s.sum
	}
	return 0
}

// admit checks every charge at instant now; if all fit it counts them all
// and returns nil, otherwise it counts nothing and returns the rule of the
// first charge (in order) that does not fit. The charges of one request
// must have distinct keys (the servers merge units per key).
func (l *limiter) admit(charges []Charge, now time.Time) *Rule {
	if r := l.check(charges, now); r != nil {
		return r
	}
	for _, c := range charges {
		rs := l.rules[c.Key.Rule]
		if rs.Fixed {
			i := windowIndex(now, rs.Window)
			cnt := rs.fixed[c.Key]
			if cnt == nil {
				cnt = &fixedCount{index: i}
				rs.fixed[c.Key] = cnt
			} else if cnt.index != i {
				*cnt = fixedCount{index: i}
			}
			cnt.used += c.Units
			continue
		}
		s := rs.sliding[c.Key]
		if s == nil {
			s = &slidingLog{}
			rs.sliding[c.Key] = s
		}
		s.at = append(s.at, now)
		s.units = append(s.units, c.Units)
		s.sum += c.Units
	}
	return nil
}

// check returns nil if every charge fits at instant now, otherwise the rule
// of the first charge (in order) that does not fit. It counts nothing.
func (l *limiter) check(charges []Charge, now time.Time) *Rule {
	for _, c := range charges {
		rs := l.rules[c.Key.Rule]
		if rs == nil {
			panic("exchangetest: internal error: charge for unknown rule " + c.Key.Rule)
		}
		rs.sweep(now)
		if l.used(c.Key, now)+c.Units > rs.Limit {
			return &rs.Rule
		}
	}
	return nil
}

// sweep forgets, at most once per window, the keys with nothing counted in
// the current window, bounding memory by the keys active within a window.
func (rs *ruleState) sweep(now time.Time) {
	if now.Sub(rs.lastSweep) < rs.Window {
		return
	}
	rs.lastSweep = now
	if rs.Fixed {
		i := windowIndex(now, rs.Window)
		for k, c := range rs.fixed {
			if c.index != i {
				delete(rs.fixed, k)
			}
		}
		return
	}
	for k, s := range rs.sliding {
		if s.prune(now, rs.Window); len(s.at) == 0 {
			delete(rs.sliding, k)
		}
	}
}

// nowOf returns clk's Now, or nil (time.Now) for a nil clk.
func nowOf(clk ratesem.Clock) func() time.Time {
	if clk == nil {
		return nil
	}
	return clk.Now
}
