package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/rspec"
	"github.com/ratesem/ratesem/window"
)

// Adaptive limits in Redis mode (Rule.Adapt with redisrate.Shared).
//
// The fleet shares one level per key, kept in Redis by internal/rstore's
// Store.Adapt (internal/adapt's law, in Lua, exactly) and stored there as
// the key's limit (as SetLimit stores one), which every admission of every
// process adopts, atomically. Each process reports its calls' ends
// (internal/remote's Engine.AdaptSuccess and AdaptThrottle): a success at
// each Release of a call not throttled (batched: at most one round trip
// per key per eighth of the rule's Per, and one when they prove the
// level), a throttle at once
// (ThrottledTicket, OverloadedTicket, ThrottledTargets), each with the
// call's admission on Redis's clock (remote.Call.Start), so that the
// hysteresis (throttles of calls admitted before the latest cut are
// ignored) holds across processes: three processes reporting one
// overload cut once. Calls are charged under the rule's Spec (the same in
// every process of one configuration: no limit mismatch), which Redis
// replaces with the stored level; l.ad keeps the level Redis last answered
// (AdaptLevel, KeyState's Limit).
//
// The ceilings are the fleet's, kept with each key's level in Redis
// (rspec.AdaptBounds.Set and Learned): SetLimit (adaptSetLimit) and a
// limit learned from a reply (adaptLearn) reach every process at once.
// A bucket's or GCRA's level is its N, its burst kept (burstKept).
//
// With Rule.Learn, a reply that names the server's window (Learned.Reset,
// with a remaining count) makes the rule count in the server's windows,
// as in process (quotaLocked): rs.adQuota is set, every key is charged
// under an rspec.Quota (the limit it learned, else the rule's starting
// level: rs.adQuota), stored in Redis for the fleet (adaptQuota; a
// process that adopts one, adaptAdoptLocked, follows), and its budget is
// the server's, shared (remote.Engine.BudgetThen); the level is no longer
// reported (the adaptive script would refuse a quota's hash anyway).
//
// What Redis mode refuses: at New, an adaptive token bucket whose burst
// follows N (Redis keeps the burst given); at SetLimit, a Per other than
// the rule's.

// adaptSetLimit is SetLimit on an adaptive rule in Redis mode: l.N
// becomes the fleet's ceiling of every key of the rule this process holds
// (stored with each key's level in Redis, AdaptBounds.Set forced: the
// level comes down to it at once if above, for every process, and no
// process's reports raise it above; the latest SetLimit of the fleet
// wins), and this process's ceiling of the keys it meets later (sent with
// its reports, stored for a key whose state keeps none), as SetLimit sets
// the ceiling of the rule and of every key in process. l.Per must be the
// rule's: the window is the fleet's, fixed by its configuration. One
// round trip per key held, on the caller's goroutine.
func (m *redisMode) adaptSetLimit(rs *ruleState, l window.Limit) error {
	p := m.p
	p.mu.Lock()
	if per := rs.limit.Per; l.Per != per {
		p.mu.Unlock()
		return fmt.Errorf("%w: SetLimit(%q, %v): an adaptive rule over Redis keeps its Per, %v (the fleet's window): SetLimit sets its ceiling", ratesem.ErrInvalidLimit, rs.Name, l, per)
	}
	rs.adCeil = min(max(l.N, rs.Adapt.Floor), MaxLearnedN)
	rs.adSet = true
	rs.setLimit(window.Limit{N: min(rs.limit.N, rs.adCeil), Per: rs.limit.Per})
	rs.quiet = 0 // the window lives in Redis
	lims := make([]*limiter, 0, len(rs.keys))
	if rs.adQuota != nil {
		return m.adaptQuotaSetLimitLocked(rs, l, false) // unlocks p.mu
	}
	for _, lim := range rs.keys {
		if lim.ad != nil {
			lims = append(lims, lim)
		}
	}
	b := adaptBounds(rs)
	b.Force = true
	p.mu.Unlock()
	for _, lim := range lims {
		n, err := m.eng.AdaptCeiling(context.Background(), m.scope, m.adaptCharge(lim), b)
		if me := (*rspec.MismatchError)(nil); errors.As(err, &me) && me.StoredSpec.Kind == rspec.Quota {
			// Another process made the rule count in the server's windows
			// (a reply to it named its window): take it in, as an
			// admission that adopts the quota would, and set the limit as
			// in one process after the switch.
			p.mu.Lock()
			p.adaptAdoptLocked(lim, me.StoredSpec)
			if rs.adQuota != nil {
				return m.adaptQuotaSetLimitLocked(rs, l, true) // unlocks p.mu
			}
			p.mu.Unlock()
		}
		if err != nil {
			return fmt.Errorf("%w (SetLimit(%q, %v): key %q)", err, rs.Name, l, lim.key)
		}
		m.adapted(lim)(n, nil)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refitLocked(rs, p.now())
	return nil
}

// adaptQuotaSetLimitLocked is adaptSetLimit on an adaptive rule counted
// in the server's windows (adaptQuota), as in process: the rule's limit
// (min of its N and the new ceiling, set by the caller) is the N of the
// windows of the keys that learned no limit of their own, stored in Redis
// for each such key this process holds (one round trip each, on the
// caller's goroutine), and for every process; the keys that learned one
// keep it. The levels stay (the server's budget governs). force stores
// the quotas even when the rule's did not change (the rule just became a
// quota here, from the rule's limit SetLimit set). p.mu must be held; it
// returns with p.mu unlocked.
func (m *redisMode) adaptQuotaSetLimitLocked(rs *ruleState, l window.Limit, force bool) error {
	p := m.p
	var lims []*limiter
	if s, ok := adaptQuotaSpec(rs, rs.limit.N); ok && (force || *s != *rs.adQuota) {
		rs.adQuota = s
		for _, lim := range rs.keys {
			if lim.ad != nil && (lim.fb == nil || lim.fb.spec == nil) {
				lim.feedback().adQuota, lim.fb.adFollow = true, false
				lims = append(lims, lim)
			}
		}
	}
	p.mu.Unlock()
	var err error
	for _, lim := range lims {
		p.mu.Lock()
		c := rspec.Charge{Rule: rs.Name, Key: redisKey(lim.key), Spec: lim.redisSpec()}
		p.mu.Unlock()
		if e := m.eng.SetLimit(context.Background(), m.scope, c); e != nil {
			p.mu.Lock()
			lim.feedback().adQuota, lim.fb.adFollow = false, true // stored again when an admission adopts the level
			p.mu.Unlock()
			if err == nil {
				err = fmt.Errorf("%w (SetLimit(%q, %v): key %q)", e, rs.Name, l, lim.key)
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refitLocked(rs, p.now())
	return err
}

// checkAdaptRedis is initRedis's check of the adaptive rules: st must
// keep adaptive limits, and each rule's window be one Redis can adapt.
func (p *Engine) checkAdaptRedis(st rspec.Store) error {
	for _, rs := range p.ruleList {
		if rs.Adapt == nil {
			continue
		}
		if _, ok := st.(rspec.Adapter); !ok {
			return fmt.Errorf("%w (rule %q)", errAdaptiveRedis, rs.Name)
		}
		switch rs.spec.Kind {
		case rspec.Completion, rspec.FixedCompletion, rspec.SlidingLog, rspec.FixedWindow, rspec.SlidingWindowCounter, rspec.SubWindowCounter:
		case rspec.TokenBucket, rspec.LeakyBucket, rspec.GCRA:
			if err := burstKept(rs); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: rule %q: an adaptive rule over Redis needs a window or a bucket, not a %s", ratesem.ErrInvalidLimit, rs.Name, rs.spec.Kind)
		}
	}
	return nil
}

// burstKept checks that the burst of rs's bucket or GCRA stays what it
// is when the level changes, as Redis keeps it (the adaptive script sets
// only N): a window made with an explicit burst (window.NewTokenBucket(l,
// b) with b > 0, NewLeakyBucket, NewGCRA, NewPacer) keeps it through
// SetLimit in process; a token bucket made with burst 0, whose burst
// follows N, is refused over Redis, with an error matching
// ratesem.ErrInvalidLimit.
func burstKept(rs *ruleState) error {
	n := rs.limit.N + 1
	if n > rs.adCeil {
		n = rs.Adapt.Floor
	}
	pol := rs.newPolicy(rs.limit)
	pol.SetLimit(time.Now(), window.Limit{N: n, Per: rs.limit.Per})
	s, err := rspec.SpecOf(pol)
	if err != nil || s.Kind != rs.spec.Kind || s.Burst != rs.spec.Burst {
		return fmt.Errorf("%w: rule %q: an adaptive %s over Redis needs a burst that stays put when the level moves (window.NewTokenBucket(l, b) with b > 0, NewLeakyBucket, NewGCRA, NewPacer): this one's follows N, which Redis does not keep", ratesem.ErrInvalidLimit, rs.Name, rs.spec.Kind)
	}
	return nil
}

// adaptLearn is the Rule.Learn part of ObserveHeaders in Redis mode for
// the charge hd of t on a key l of an adaptive rule, a report in; date is
// the reply's Date (zero when none). As in process (Engine.learn):
//
// Until the rule counts in the server's windows, the limit a report names
// (capped at MaxLearnedN) is the key's ceiling for the fleet, a published
// limit (AdaptBounds.Learned, stored with the key's level in Redis: one
// round trip, bounded by the Redis timeout, on the caller's goroutine,
// when it differs from the last this process stored; the level comes down
// to it at once if above), as the learned limit is the ceiling of the
// key's law in process (adaptLearnedLocked); the remaining count, when
// given without a Reset, is the server's count (the level in force less
// remaining), reconciled into the key's window in Redis in the
// background.
//
// A report with a remaining count and its window (Learned.Reset) makes
// the rule a quota (adaptQuota): its keys are charged against the budget
// the server announced, shared by the fleet, not the level.
func (m *redisMode) adaptLearn(t *Ticket, hd *held, in Learned, date time.Time) {
	p := m.p
	l := hd.lim
	p.mu.Lock()
	rs := l.rule
	var b rspec.AdaptBounds
	send := false
	n := int64(0)
	if in.Limit.N > 0 {
		n = min(in.Limit.N, MaxLearnedN, rspec.MaxN)
		if fb := l.feedback(); rs.adQuota == nil && fb.adLearned != n {
			fb.adLearned = n
			b = adaptBounds(rs)
			b.Learned, send = n, true
		}
	}
	c := m.adaptCharge(l)
	p.mu.Unlock()
	if send {
		n, err := m.eng.AdaptCeiling(context.Background(), m.scope, c, b)
		if err != nil {
			p.mu.Lock()
			l.feedback().adLearned = 0 // sent again with the next report
			p.mu.Unlock()
		}
		m.adapted(l)(n, err)
	}
	p.mu.Lock()
	quota := rs.adQuota != nil
	lvl, key := l.ad.N(), l.key
	p.mu.Unlock()
	if quota || in.Remaining >= 0 && !in.Reset.IsZero() {
		m.adaptQuota(t, hd, n, in, date)
		return
	}
	if in.Remaining < 0 {
		return
	}
	m.reconcileAt(rs, key, usedOf(lvl, in.Remaining), rspec.Read{})
}

// adaptQuotaSpec returns the rspec.Quota a key of the adaptive rule rs
// is charged under once rs counts in the server's windows: n units per
// the rule's Per (a window of the key that ended without a reply allows
// n), capped in flight at MaxUnitsInFlight; false when Redis cannot keep
// it.
func adaptQuotaSpec(rs *ruleState, n int64) (*rspec.Spec, bool) {
	s := rspec.Spec{Kind: rspec.Quota, Limit: window.Limit{N: min(max(n, 1), rspec.MaxN), Per: rs.limit.Per.Truncate(time.Microsecond)}, Concurrency: rs.MaxUnitsInFlight}
	return &s, s.Check() == nil
}

// adaptQuotaRuleLocked makes the adaptive rule rs count in the server's
// windows (a quota), as quotaLocked does in process: each key is charged
// under an rspec.Quota from now on (a key that learned no limit, under
// the rule's N), and no longer reports its calls to the level. It returns
// the keys this process holds (the callers leave each to store its quota
// in Redis at its next admission, adaptAdoptLocked); nil when Redis
// cannot keep one. p.mu must be held.
func (m *redisMode) adaptQuotaRuleLocked(rs *ruleState) []*limiter {
	s, ok := adaptQuotaSpec(rs, rs.limit.N)
	if !ok {
		return nil
	}
	rs.quota, rs.adQuota = true, s
	rs.quiet = 0 // the window lives in Redis
	var ls []*limiter
	for _, l := range rs.keys {
		if l.ad == nil {
			continue
		}
		if fb := l.feedback(); fb.adLearned > 0 && fb.spec == nil {
			if s, ok := adaptQuotaSpec(rs, fb.adLearned); ok {
				fb.spec = s // the limit the key learned: its windows' N (Engine.learn's fb.n)
			}
		}
		l.feedback().adQuota = true
		ls = append(ls, l)
		if l.q != nil {
			m.p.markPending(l.q)
		}
	}
	return ls
}

// quotaSpec returns the rspec.Quota the key of l, of an adaptive rule
// counted in the server's windows, is charged under once stored in Redis:
// the limit it learned or adopted, else its rule's (redisSpec without
// adFollow). p.mu must be held.
func (l *limiter) quotaSpec() *rspec.Spec {
	if fb := l.fb; fb != nil && fb.spec != nil {
		return fb.spec
	}
	return l.rule.adQuota
}

// storeQuotas stores in Redis the quota of each of ls, keys of an
// adaptive rule counted in the server's windows, for every process (one
// round trip each, bounded by the Redis timeout; a key whose store failed
// stores it again when an admission adopts its level, adaptAdoptLocked).
func (m *redisMode) storeQuotas(ls []*limiter) {
	p := m.p
	for _, l := range ls {
		p.mu.Lock()
		c := rspec.Charge{Rule: l.rule.Name, Key: redisKey(l.key), Spec: l.quotaSpec()}
		p.mu.Unlock()
		err := m.eng.SetLimit(context.Background(), m.scope, c)
		p.mu.Lock()
		fb := l.feedback()
		fb.adQuota, fb.adFollow = err == nil, err != nil
		p.mu.Unlock()
	}
}

// adaptQuota is adaptLearn for a report that names the server's window
// (or any report once the rule counts in the server's windows): as in
// process (Engine.learn, quotaLocked, budgetLocked), the rule becomes a
// quota (adaptQuotaRuleLocked: the key of the report stores its quota in
// Redis, one round trip on the caller's goroutine; the other keys this
// process holds store theirs at their next admission), the
// limit n the report names (0: none) becomes the N of the key's windows,
// and the remaining count until the reset (plus ResetMargin) the key's
// budget, shared by the fleet (remote.Engine.BudgetThen; waited for,
// one round trip, when the key's quota was just stored, as Rule.Learn
// without Adapt does). A report without its window under a quota changes
// the budget in no way.
func (m *redisMode) adaptQuota(t *Ticket, hd *held, n int64, in Learned, date time.Time) {
	p := m.p
	p.mu.Lock()
	l, rs := hd.lim, hd.lim.rule
	now := p.now()
	if rs.adQuota == nil {
		others := m.adaptQuotaRuleLocked(rs)
		if rs.adQuota == nil {
			p.mu.Unlock()
			return // a limit Redis cannot keep as a quota (New checked the rule's)
		}
		// The other keys follow at their next admission, as in a process
		// that adopts the quota (adaptAdoptLocked): storing theirs now
		// could store over the limit another process learned for one of
		// them meanwhile, and this reply costs its caller no round trip per
		// key held.
		for _, o := range others {
			o.feedback().adQuota, o.fb.adFollow = false, true
		}
	}
	fb := l.feedback()
	share := !fb.adQuota
	fb.adFollow = false // its quota is stored here, now
	if n > 0 && n != l.redisSpec().Limit.N {
		if s, ok := adaptQuotaSpec(rs, n); ok {
			fb.spec, share = s, true
		}
	}
	fb.adQuota = true
	if n > 0 {
		fb.adLearned = n
	}
	spec, key := l.redisSpec(), l.key
	resetIn, own, tok := reportLocked(rs, t, hd, in, date, now)
	p.mu.Unlock()
	c := rspec.Charge{Rule: rs.Name, Key: redisKey(key), Spec: spec}
	stored := false
	if share {
		stored = m.eng.SetLimit(context.Background(), m.scope, c) == nil
		if !stored {
			p.mu.Lock()
			fb.adQuota, fb.adFollow = false, true
			p.mu.Unlock()
		}
	}
	if in.Remaining < 0 || in.Reset.IsZero() || resetIn <= 0 {
		return
	}
	if !stored {
		m.eng.BudgetThen(m.scope, c, in.Remaining, resetIn, own, tok, nil)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.timeout+lateBudget)
	defer cancel()
	m.eng.BudgetThen(m.scope, c, in.Remaining, resetIn, own, tok, func(int64, error) { cancel() })
	<-ctx.Done() // as redisMode.learn: no admission of the fleet reads a budget the server never gave
}

// adaptAdoptLocked takes in the limit s Redis decided an admission on
// the adaptive key l under (stored by another process, or by the level):
// a quota makes l's rule count in the server's windows here too (the
// fleet learns together), with s as l's own; the other keys this process
// holds follow at their next admission (feedback.adFollow: charged under
// the rule's Spec, each adopts the quota stored for it, or stores one
// when Redis admitted it under the level it keeps, adoptLocked: none is
// stored over, so that no key loses the limit another process learned
// for it). A level while l's rule counts in the
// server's windows is a key whose quota Redis does not keep (stored by
// no process of the fleet, or lost): it is stored there, in the
// background, once at a time. p.mu must be held.
func (p *Engine) adaptAdoptLocked(l *limiter, s rspec.Spec) {
	m, ok := p.book.(*redisMode)
	if !ok || s == *unknownSpec {
		return
	}
	rs, fb := l.rule, l.feedback()
	if s.Kind == rspec.Quota {
		if rs.adQuota == nil {
			for _, o := range m.adaptQuotaRuleLocked(rs) {
				o.feedback().adQuota, o.fb.adFollow = false, true // not stored by this process
			}
		}
		fb.adFollow = false // Redis keeps its quota
		if *l.redisSpec() != s {
			fb.spec = &s
		}
		fb.adQuota = true
		return
	}
	if rs.adQuota != nil && !fb.adStoring {
		fb.adStoring = true
		go func() {
			m.storeQuotas([]*limiter{l})
			p.mu.Lock()
			fb.adStoring = false
			p.mu.Unlock()
		}()
	}
}

// adaptBounds returns the bounds of rs's adaptive level.
func adaptBounds(rs *ruleState) rspec.AdaptBounds {
	b := rspec.AdaptBounds{Floor: rs.Adapt.Floor, Ceiling: min(rs.adCeil, rspec.MaxN), Start: rs.limit.N}
	if rs.adSet {
		b.Set = b.Ceiling
	}
	return b
}

// adaptCharge returns the Redis charge of l's key for its adaptive
// reports: the rule's window (Adapt does not read its N).
func (m *redisMode) adaptCharge(l *limiter) rspec.Charge {
	return rspec.Charge{Rule: l.rule.Name, Key: redisKey(l.key), Spec: l.rule.spec}
}

// adapted returns the callback of l's reports: the level Redis answered
// becomes l's (l.ad, for AdaptLevel and KeyState); a level that changed
// makes the key's first waiter ask Redis again at once (remote forgot the
// refusals it remembered under the old level), as a level changed in
// process re-fits the window (adaptedLocked). It takes p.mu.
func (m *redisMode) adapted(l *limiter) func(int64, error) {
	return func(n int64, err error) {
		if err != nil || n < 1 {
			return
		}
		p := m.p
		p.mu.Lock()
		defer p.mu.Unlock()
		if l.ad == nil || l.ad.S.N == n {
			return
		}
		l.ad.S.N = n
		if l.q != nil {
			p.markPending(l.q)
			p.settleLocked(p.now())
		}
	}
}

// adaptSuccess: in Redis mode a Release does not run releaseLocked;
// redisMode.release reports the successes (adaptReleasedLocked).
func (m *redisMode) adaptSuccess(*limiter, int64, int64, time.Time) {}

// adaptReleasedLocked reports the success of t's call of units units on
// l, released at now, to the fleet's level (batched by remote; it never
// blocks). A call the fallback admitted (no admission on Redis's clock)
// is not reported, nor one of a rule counted in the server's windows
// (adaptQuota). p.mu must be held.
func (m *redisMode) adaptReleasedLocked(l *limiter, t *Ticket, units int64, now time.Time) {
	if t.rcall == nil || l.rule.adQuota != nil { // a quota: the server's budget governs, the level stays
		return
	}
	dur := time.Duration(m.p.mono(now) - t.at)
	_ = m.eng.AdaptSuccess(m.scope, m.adaptCharge(l), adaptBounds(l.rule), t.rcall.Start(), dur, units, m.adapted(l))
}

// adaptThrottle reports a throttle of t's call on l to the fleet's level
// (one round trip, on a goroutine of remote; it never blocks). Without
// the call (t nil: Pool.Throttled) it is a throttle of a call admitted a
// Per ago on this host's clock, taken as Redis's (the hosts' clocks'
// difference shifts it); a call the fallback admitted counts as admitted
// before any cut (it cuts only a level never cut).
func (m *redisMode) adaptThrottle(l *limiter, t *Ticket, _ int64, _ time.Time) {
	if l.rule.adQuota != nil {
		return // a quota: the server's budget governs, the level stays
	}
	var start time.Time
	switch {
	case t == nil:
		start = time.Now().Add(-l.rule.limit.Per)
	case t.rcall != nil:
		start = t.rcall.Start()
	}
	_ = m.eng.AdaptThrottle(m.scope, m.adaptCharge(l), adaptBounds(l.rule), start, m.adapted(l))
}
