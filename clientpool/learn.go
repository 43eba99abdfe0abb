package clientpool

import (
	"fmt"
	"net/http"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/sat"
	"github.com/ratesem/ratesem/window"
)

// MaxSettleBody is the most bytes of a response body a Rule.Settle
// function is shown: package httpclient keeps the last MaxSettleBody bytes
// the caller read (1 MiB, the whole of most LLM replies; of a longer one,
// its end, where the usage object is).
const MaxSettleBody = 1 << 20

// Settle sets the true weight, in units, of the ticket's charges under rule
// (each of them: a call charges one key per rule in the presets): when the
// ticket is released they end with units instead of the weight they were
// charged (window.Settler: a refund where the window still counts the call,
// a debit from then on). The last Settle before Release wins. It returns an
// error matching ratesem.ErrNegativeWeight for a negative units, one matching
// ratesem.ErrUnknownRule when the ticket holds no charge under rule, and an
// error after Release. In Redis mode the settled weight reaches Redis with
// the release (redisrate.Shared). It never blocks and is safe for concurrent
// use.
func (t *Ticket) Settle(rule string, units int64) error {
	if units < 0 {
		return fmt.Errorf("%w %d: Settle(%q)", ratesem.ErrNegativeWeight, units, rule)
	}
	p := t.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if t.released.Load() {
		return fmt.Errorf("ratesem: Settle(%q) after Release", rule)
	}
	found := false
	for i := range t.held {
		if h := &t.held[i]; h.lim.rule.Name == rule {
			h.settled, h.actual, found = true, units, true
		}
	}
	if !found {
		return fmt.Errorf("%w %q: the ticket holds no charge under it", ratesem.ErrUnknownRule, rule)
	}
	return nil
}

// WantsBody reports whether a rule of the ticket's charges reads the call's
// true weight from its response (Rule.Settle): a transport should then keep
// the response body's last MaxSettleBody bytes for SettleResponse. It never
// blocks.
func (t *Ticket) WantsBody() bool {
	for i := range t.held {
		if t.held[i].lim.rule.Settle != nil {
			return true
		}
	}
	return false
}

// SettleResponse settles each of the ticket's charges whose rule has a
// Settle function with the weight that function reads from the call's
// response headers and body (nil when there was none); a function that
// returns false, or a negative weight, leaves the charge as it was. Package
// httpclient calls it before Release. It never blocks and is safe for
// concurrent use.
func (t *Ticket) SettleResponse(h http.Header, body []byte) {
	for i := range t.held {
		rs := t.held[i].lim.rule
		if rs.Settle == nil {
			continue
		}
		if units, ok := rs.Settle(h, body); ok && units >= 0 {
			t.Settle(rs.Name, units) // the rule is the ticket's: only an error after Release, which then changes nothing
		}
	}
}

// releaseRedisAny is Release in Redis mode: settled when Settle named a
// charge's rule (the settled weights are read under the lock Settle takes).
func (t *Ticket) releaseRedisAny() {
	p := t.pool
	p.mu.Lock()
	var actual []int64
	for i := range t.held {
		if h := &t.held[i]; h.settled {
			if actual == nil {
				actual = make([]int64, len(t.held))
				for j := range actual {
					actual[j] = -1
				}
			}
			actual[i] = h.actual
		}
	}
	p.mu.Unlock()
	if actual == nil {
		t.releaseRedis()
		return
	}
	t.releaseRedisSettled(actual)
}

// learn takes in what a response's headers say about the limit of one
// charge's rule (Rule.Learn); see ObserveHeaders. It returns the units the
// window took in on the server's word.
func (p *Pool) learn(hd *held, in Learned) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	rs, l := hd.lim.rule, hd.lim
	now := p.now()
	first := false
	if in.Limit.N > 0 {
		lim := window.Limit{N: min(in.Limit.N, MaxLearnedN), Per: in.Limit.Per}
		if lim.Per <= 0 || lim.Per > maxLearnedPer {
			lim.Per = rs.limit.Per
		}
		if l.unknown || lim != l.limit() {
			first = l.unknown
			p.setKeyLimitLocked(l, lim, now)
		}
	}
	if l.unknown || in.Remaining < 0 {
		return 0
	}
	if !in.Reset.IsZero() {
		if !rs.quota {
			p.quotaLocked(rs, now)
		}
		p.budgetLocked(hd, in.Remaining, p.mono(in.Reset), now)
		return 0
	}
	if rs.quota {
		return 0 // a report without its window, under a rule counted by windows
	}
	used := RateLimitInfo{Limit: l.limit().N, Remaining: in.Remaining}.Used()
	if first {
		// The window kept its record under a limit it did not know:
		// count what the server counts, and this key's calls in flight
		// again (on the safe side), from now on.
		if r, ok := l.policy.(window.Reconciler); ok {
			return p.consumeLocked(l, r, sat.Add(used, l.inflight), now)
		}
		return 0
	}
	return p.observeLocked(hd, used, now)
}

// limit returns the limit l's key is held to: its window's, or, for a key
// of a quota rule, the N its budget refills to.
func (l *limiter) limit() window.Limit {
	if l.rule.quota {
		if fb := l.fb; fb != nil && fb.n > 0 {
			return window.Limit{N: fb.n, Per: l.rule.limit.Per}
		}
		return l.rule.limit
	}
	return l.policy.Limit()
}

// keyTooHeavy returns an error matching ratesem.ErrWeightTooLarge when a
// charge of hs is heavier than the limit its key learned (Rule.Learn): the
// rule-wide check of tooHeavyLocked leaves learned limits out, since two
// keys may have learned two limits. A key that has learned nothing yet
// takes any weight (one call at a time).
func keyTooHeavy(hs []held) error {
	for i := range hs {
		h := &hs[i]
		l := h.lim
		if l.rule.Learn == nil || l.unknown {
			continue
		}
		fit := l.limit().N
		if !l.rule.quota {
			fit = l.policy.Capacity()
		}
		if h.n > fit {
			return fmt.Errorf("%w: weight %d can never start: rule %q key %q admits at most %d (%v)", ratesem.ErrWeightTooLarge, h.n, l.rule.Name, l.key, fit, l.limit())
		}
	}
	return nil
}

// setKeyLimitLocked gives l's key the limit its server reported (Rule.Learn
// learns per key: two tokens, two models, may have two limits). The rule's
// limit becomes it too: the one Pool.Limit reports and new keys start from
// (one call at a time still, when the rule's limit was not given).
func (p *Pool) setKeyLimitLocked(l *limiter, lim window.Limit, now time.Time) {
	rs := l.rule
	l.unknown = false
	if rs.quota {
		l.feedback().n = lim.N
	} else {
		l.policy.SetLimit(now, lim)
	}
	if rs.learning || lim != rs.limit {
		rs.learning = false
		rs.setLimit(lim)
	}
	if l.q != nil {
		p.markPending(l.q)
	}
	// Waiters heavier than the key can now ever admit fail, as SetLimit's.
	for e := p.waiters.Front(); e != nil; {
		next := e.Next()
		w := e.Value.(*waiter)
		if err := keyTooHeavy(w.held); err != nil {
			p.finishLocked(w, err)
		}
		e = next
	}
}

// quotaLocked turns rs into a rule counted in the server's own windows
// (Learned.Reset): from now on each key admits calls against the budget
// the server announced for its window (budgetLocked), and its window policy
// only caps the units in flight.
func (p *Pool) quotaLocked(rs *ruleState, now time.Time) {
	rs.quota = true
	for _, l := range rs.keys {
		l.policy = rs.policyFor()
		l.policy.Admit(now, l.inflight) // the calls in flight end on it
		if l.q != nil {
			p.markPending(l.q)
		}
	}
}

// budgetLocked takes in a report of remaining units in the server's window
// ending at reset (ns since the epoch) for the key of hd. A report of a
// window that has ended is stale and ignored. A report of a later window
// than the one known (a new window) sets the budget, even higher than it
// was; a report of the same window only lowers it. Either way the budget
// leaves out the key's calls admitted after hd's (the server may not have
// counted them yet) and those in flight (counting hd's own again: on the
// safe side).
func (p *Pool) budgetLocked(hd *held, remaining, reset int64, now time.Time) {
	l := hd.lim
	fb := l.feedback()
	nowNs := p.mono(now)
	if reset <= nowNs {
		return
	}
	// A window lasts Per: one said to end later (a hostile or broken
	// header) ends Per from now, plus a second for resets rounded up to
	// whole seconds (GitHub's epoch seconds).
	reset = min(reset, sat.Add(nowNs, int64(l.rule.limit.Per+time.Second)))
	left := sat.Sub(sat.Sub(remaining, max(fb.admits-hd.usedAtAdmit, 0)), l.inflight)
	left = max(left, 0)
	switch {
	case !fb.budgeted || reset > fb.reset+int64(time.Second):
		fb.budget, fb.reset, fb.budgeted = left, reset, true // a new window
	case left < fb.budget:
		fb.budget = left
		fb.reset = reset
	default:
		fb.reset = reset
	}
	if l.q != nil {
		p.markPending(l.q)
	}
	p.settleLocked(now)
}

// budgetAdmits reports whether the budget of quota key l lets n units start
// at now (ns since the epoch), rolling to the next window when the known
// one has ended: the server's next window starts then or later, so it
// allows N, and it ends at most Per from now. When it does not, it returns
// the instant the window ends.
func (l *limiter) budgetAdmits(now, n int64) (ok bool, until int64) {
	if l.unknown {
		return true, 0 // one call at a time (admitLocked) until a response says
	}
	fb := l.feedback()
	if !fb.budgeted {
		// A key of a rule whose limit was given (a guess): a window of N
		// from now, until a response says what remains.
		fb.budget, fb.reset, fb.budgeted = l.limit().N, now, true
	}
	if now >= fb.reset {
		// the calls still in flight may arrive in the new window
		fb.budget = max(l.limit().N-l.inflight, 0)
		fb.reset = sat.Add(now, int64(l.rule.limit.Per))
	}
	if n > fb.budget {
		return false, fb.reset
	}
	return true, 0
}

// maxLearnedPer is the longest window a Learn report is taken at; a longer
// one (a hostile header) leaves the rule's Per.
const maxLearnedPer = 366 * 24 * time.Hour

// LearnRateLimit returns a Rule.Learn function that reads the fields
// ParseRateLimitAt reads (prefix "X-RateLimit-", "RateLimit-" for the IETF
// drafts, or another API's prefix; policy as there): the limit, what
// remains and the reset. With fixedWindow, the reset is the end of the
// server's window (Learned.Reset, GitHub's and most X-RateLimit- APIs'); else
// it is left out (a token bucket's time to full). Headers that are absent
// or malformed (ratesem.ErrMalformedHeader) say nothing (false). The
// function is safe for concurrent use.
func LearnRateLimit(prefix, policy string, fixedWindow bool) func(h http.Header, now time.Time) (Learned, bool) {
	return func(h http.Header, now time.Time) (Learned, bool) {
		i, err := ParseRateLimitAt(h, prefix, policy, now)
		if err != nil || i.Limit <= 0 {
			return Learned{}, false
		}
		in := Learned{Limit: window.Limit{N: i.Limit}, Remaining: i.Remaining}
		if fixedWindow && i.Reset > 0 {
			in.Reset = now.Add(i.Reset)
		}
		return in, true
	}
}
