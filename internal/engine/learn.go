package engine

import (
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/rspec"
	"github.com/ratesem/ratesem/internal/sat"
	"github.com/ratesem/ratesem/window"
)

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
// the response body's last 1 MiB for SettleResponse. It never
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

// learn takes in what a response's headers say about the limit of one
// charge's rule (Rule.Learn); see ObserveHeaders. date is the response's
// Date header (zero when absent or malformed). It returns the units the
// window took in on the server's word, and a non-nil error when the report
// contradicted the key's window and was not taken at its word (for a
// ratesem.Distrusted event).
func (p *Engine) learn(hd *held, in Learned, date time.Time) (int64, error) {
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
		if l.ad != nil {
			// The published limit is the law's ceiling, and the N of the
			// key's windows once the rule counts in the server's (quota):
			// each new window of the key allows it until a reply says
			// what remains (budgetAdmits), as for a rule without Adapt.
			if !rs.quota {
				p.adaptLearnedLocked(l, lim.N, now)
			}
			l.feedback().n = lim.N
		} else if l.unknown || lim != l.limit() {
			first = l.unknown
			p.setKeyLimitLocked(l, lim, now)
		}
	}
	if l.unknown || in.Remaining < 0 {
		return 0, nil
	}
	if !in.Reset.IsZero() {
		if !rs.quota {
			p.quotaLocked(rs, now)
		}
		reset, epoch := in.Reset, int64(0)
		if in.Epoch {
			reset = reset.Add(rs.skewLocked(date, now))
			epoch = max(in.Reset.UnixNano(), 1)
		}
		return 0, p.budgetLocked(hd, in.Remaining, p.mono(reset.Add(ResetMargin)), epoch, now)
	}
	if rs.quota {
		return 0, nil // a report without its window, under a rule counted by windows
	}
	used := usedOf(l.limit().N, in.Remaining)
	if first {
		// The window kept its record under a limit it did not know:
		// count what the server counts, and this key's calls in flight
		// again (on the safe side), from now on.
		if r, ok := l.policy.(window.Reconciler); ok {
			return p.consumeLocked(l, r, sat.Add(used, l.inflight), now), nil
		}
		return 0, nil
	}
	return p.observeLocked(hd, used, now), nil
}

// skewLocked returns how far the host's clock is taken to be ahead of the
// server's of rs (see ResetMargin): the largest of the measures taken from
// the Date of the rule's responses within a Per, one of them date (zero:
// none), the Date of a response that arrived at now; 0 before any.
func (rs *ruleState) skewLocked(date, now time.Time) time.Duration {
	if date.IsZero() {
		return rs.skew
	}
	// Bounded so that Reset + skew stays a sane instant; a window never
	// ends more than Per (and the margins) from now anyway (budgetLocked).
	m := min(max(now.Sub(date), 0), maxLearnedPer)
	// A lower measure replaces a higher one only once that one is a Per
	// old: one reply's Date (a far-future one) cannot undo the others.
	if m >= rs.skew || now.Sub(rs.skewAt) > rs.limit.Per {
		rs.skew, rs.skewAt = m, now
	}
	return rs.skew
}

// serverDate returns the instant of a response's Date header (http.ParseTime's
// three forms), or zero when it is absent or malformed. It reads at most the
// header's first value, of at most 64 bytes.
func serverDate(h http.Header) time.Time {
	v := h["Date"]
	if len(v) == 0 || len(v[0]) > 64 {
		return time.Time{}
	}
	t, err := http.ParseTime(v[0])
	if err != nil {
		return time.Time{}
	}
	return t
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

// learnedFit returns the heaviest charge the key of l takes at its weight
// under the limit it learned (Rule.Learn): N for a key of a quota rule, its
// window's capacity for the others; math.MaxInt64 for a key that learned
// nothing (one call at a time then, admitLocked) and for a rule without
// Learn (the rule-wide check, tooHeavyLocked, holds there).
//
// A learned limit never refuses a call for good (a reply announcing a
// limit of 1 token would brick an LLM key: no later call would reach the
// server to correct it). A heavier call is admitted alone (nothing else
// in flight on the key) as a charge of exactly that limit, once the
// window has room for it: a full window, "full until the window moves",
// and its reply may correct the limit. The pool reports it
// (ratesem.Distrusted, KeyState.Distrusted).
func (l *limiter) learnedFit() int64 {
	if l.rule.Learn == nil || l.unknown {
		return math.MaxInt64
	}
	if l.rule.quota {
		return max(l.limit().N, 1)
	}
	return max(l.policy.Capacity(), 1)
}

// setKeyLimitLocked gives l's key the limit its server reported (Rule.Learn
// learns per key: two tokens, two models, may have two limits). The rule's
// limit becomes it too: the one Pool.Limit reports and new keys start from
// (one call at a time still, when the rule's limit was not given).
func (p *Engine) setKeyLimitLocked(l *limiter, lim window.Limit, now time.Time) {
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
	// Waiters heavier than the key's new limit wait to go alone
	// (learnedFit): none fails.
}

// quotaLocked turns rs into a rule counted in the server's own windows
// (Learned.Reset): from now on each key admits calls against the budget
// the server announced for its window (budgetLocked), and its window policy
// only caps the units in flight.
func (p *Engine) quotaLocked(rs *ruleState, now time.Time) {
	rs.quota = true
	for _, l := range rs.keys {
		p.quotaCarryLocked(l, now) // quota_carry.go
		l.policy = rs.policyFor()
		l.policy.Admit(now, l.inflight) // the calls in flight end on it
		if l.q != nil {
			p.markPending(l.q)
		}
	}
}

// budgetLocked takes in a report of remaining units (at most the key's N)
// in the server's window ending at reset (ns since the epoch, on the
// host's clock, margin included) for the key of hd; epoch is that end as the server named it
// (Learned.Epoch; 0 for a delay). A report of a window that has ended is
// stale and ignored. A report of a later window than the one known (a new
// window: one ending more than newWindowGap after it, and, when both the
// report and the report that set the key's window named their ends as
// epoch instants, a later instant) sets the budget, even higher than it
// was.
//
// Within a window the server's remaining only falls as requests arrive, so
// the report with the lowest remaining is the latest in the server's
// order: it counts every call of the key whose response reported a higher
// remaining, and may miss only the calls that have not reported yet
// (feedback.unreported: in flight, the server may count them after it). The
// budget is that remaining less those, at most: a report lower than every
// other sets it so (and may raise it: the calls counted since the last one
// have reported); a higher one gives back its own call's units, now known
// counted. (A call that ended without a report leaves unreported as it
// ends: taken as counted, as a call that ended always was.)
//
// A report whose window ends well before the one the key keeps (by more
// than ResetMargin and a second of the Date header's truncation), after
// the key had taken in a report, contradicts the key's window: the key
// started a window the server had not (a host clock ahead of the server's
// without a Date to correct it), or the server's windows moved. It is
// counted (the returned error, KeyState.Distrusted) and taken in on the
// safe side only: it lowers the budget, and moves the window's end earlier
// only with it (the server's own count of the window it says it is in);
// a report that would move the end earlier and leave no less budget is
// not trusted, though a remaining lower than the key's lowest is kept as
// the lowest (later reports with more give back only as earlier ones).
func (p *Engine) budgetLocked(hd *held, remaining, reset, epoch int64, now time.Time) error {
	l := hd.lim
	fb := l.feedback()
	nowNs := p.mono(now)
	fresh := hd.unrep // hd's units count in fb.unreported until now
	l.reported(hd)
	if reset <= nowNs {
		return nil
	}
	// A window lasts Per: one said to end later (a hostile or broken
	// header) ends Per from now, plus a second for resets rounded up to
	// whole seconds (GitHub's epoch seconds) and ResetMargin
	// (rspec.MaxResetOver: the same cap as over Redis).
	reset = min(reset, sat.Add(nowNs, int64(l.rule.limit.Per+rspec.MaxResetOver)))
	// A window allows the key's N at most: a report of more (a hostile
	// or broken header) is taken as N, as Redis takes it (rstore's
	// budget script).
	remaining = min(max(remaining, 0), max(l.limit().N, 0))
	var contra error
	if fb.reported && fb.budgeted && reset < fb.reset-int64(ResetMargin+time.Second) {
		fb.distrusted++
		contra = fmt.Errorf("ratesem: rule %q key %q: the server's window ends %v before the one the key keeps (%d units left there): a host clock ahead of the server's, or the server's windows moved",
			l.rule.Name, l.key, time.Duration(fb.reset-reset).Round(time.Millisecond), remaining)
	}
	fb.reported = true
	credit := int64(0)
	if fresh {
		credit = hd.n
	}
	// An epoch reset the key's window was set with names that window
	// itself: a reply with one no later is of it (or earlier), however
	// late it came back.
	sameEpoch := epoch != 0 && fb.epoch != 0 && epoch <= fb.epoch
	switch {
	case !fb.budgeted || !sameEpoch && reset > sat.Add(fb.reset, newWindowGap(l.rule.limit.Per)):
		// a new window
		fb.budget, fb.low, fb.reset, fb.budgeted = max(sat.Sub(remaining, fb.unreported), 0), remaining, reset, true
		fb.lowAdmits, fb.epoch = fb.admits, epoch
	case remaining < fb.low:
		// the latest report in the server's order
		b := max(min(sat.Add(fb.budget, credit), sat.Sub(remaining, fb.unreported)), 0)
		if contra != nil && b >= fb.budget {
			// an earlier end with no less budget: the key's window and
			// budget stand, but this is still the lowest remaining the
			// server counted, which a later report with more must not
			// read as the latest and give back from
			fb.low, fb.lowAdmits = remaining, fb.admits
			break
		}
		fb.budget, fb.low, fb.reset, fb.lowAdmits = b, remaining, reset, fb.admits
		if fb.epoch == 0 {
			fb.epoch = epoch // the window the key rolled to on its own, named
		}
	case contra != nil:
		// an earlier end, and not the latest report: the key's window stands
	default:
		// an earlier report in the server's order: its call is counted,
		// if it could have reached the server before the lowest report's
		// (admitted before that report was taken in; one admitted after
		// and reporting more is a server contradicting itself: no credit)
		if hd.usedAtAdmit <= fb.lowAdmits {
			fb.budget = max(min(sat.Add(fb.budget, credit), sat.Sub(fb.low, fb.unreported)), fb.budget)
		}
		fb.reset = reset
		if fb.epoch == 0 {
			fb.epoch = epoch
		}
	}
	if l.q != nil {
		p.markPending(l.q)
	}
	p.settleLocked(now)
	return contra
}

// newWindowGap returns how much later than the window a quota key keeps a
// reply's window must end to be a new one, for a rule of Per per: a
// second (resets rounded to whole seconds), and half of Per. One window's
// end, read on the host's clock, moves with each reply's latency (a delay
// reset is read on arrival; an epoch reset with the skew the Date shows,
// which grows with the latency) and with the Date's truncation, so a slow
// reply of the window already known reads it ending later; the next
// window of a server that counts in windows of Per ends a Per after it.
func newWindowGap(per time.Duration) int64 {
	return int64(max(time.Second, per/2))
}

// reported takes h out of its quota key's unreported units, once: its
// response reported, or it ended (or was taken back) without a report.
func (l *limiter) reported(h *held) {
	if !h.unrep {
		return
	}
	h.unrep = false
	if fb := l.fb; fb != nil {
		fb.unreported = max(fb.unreported-h.n, 0)
	}
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
		fb.low = math.MaxInt64 // no report in it yet
		fb.epoch = 0           // a window the server did not name
	}
	if n > fb.budget {
		return false, fb.reset
	}
	return true, 0
}

// maxLearnedPer is the longest window a Learn report is taken at; a longer
// one (a hostile header) leaves the rule's Per.
const maxLearnedPer = 366 * 24 * time.Hour

// usedOf is limit − remaining, in [0, limit] (as clientpool reads RateLimitInfo).
func usedOf(limit, remaining int64) int64 {
	switch {
	case limit <= 0 || remaining >= limit:
		return 0
	case remaining < 0:
		return limit
	}
	return limit - remaining
}
