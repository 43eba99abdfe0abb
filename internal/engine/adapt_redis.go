package engine

import (
	"context"
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
// a key l of an adaptive rule, a report in: the limit it names (capped at
// MaxLearnedN) is the key's ceiling for the fleet, a published limit
// (AdaptBounds.Learned, stored with the key's level in Redis: one round
// trip, bounded by the Redis timeout, on the caller's goroutine, when it
// differs from the last this process stored; the level comes down to it
// at once if above), as the learned limit is the ceiling of the key's law
// in process (adaptLearnedLocked). The remaining count, when given, is
// the server's count (the level in force less remaining), reconciled into
// the key's window in Redis in the background, as in process. A report's
// Reset does not make the key an rspec.Quota as it makes the rule a quota
// in process: over Redis the level stays the window's N (its count is
// reconciled as without a Reset).
func (m *redisMode) adaptLearn(l *limiter, in Learned) {
	p := m.p
	p.mu.Lock()
	rs := l.rule
	var b rspec.AdaptBounds
	send := false
	if in.Limit.N > 0 {
		n := min(in.Limit.N, MaxLearnedN, rspec.MaxN)
		if fb := l.feedback(); fb.adLearned != n {
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
	if in.Remaining < 0 {
		return
	}
	p.mu.Lock()
	lvl, key := l.ad.N(), l.key
	p.mu.Unlock()
	m.reconcileAt(rs, key, usedOf(lvl, in.Remaining), rspec.Read{})
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
// is not reported. p.mu must be held.
func (m *redisMode) adaptReleasedLocked(l *limiter, t *Ticket, units int64, now time.Time) {
	if t.rcall == nil {
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
	var start time.Time
	switch {
	case t == nil:
		start = time.Now().Add(-l.rule.limit.Per)
	case t.rcall != nil:
		start = t.rcall.Start()
	}
	_ = m.eng.AdaptThrottle(m.scope, m.adaptCharge(l), adaptBounds(l.rule), start, m.adapted(l))
}
