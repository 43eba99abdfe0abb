package engine

import (
	"fmt"
	"slices"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/backoff"
)

// Pause holds every new start on the limiter of (rule, key) until the
// instant until: calls that need it wait, calls in flight go on, other keys
// and rules are not affected. Overlapping pauses do not add up; the later
// end wins (a pause ending no later than the one in force sets nothing and
// reports no event). In process it is not capped (the cap of WithMaxPause applies to
// the pauses throttles cause); in Redis mode (redisrate.Shared), where it
// pauses every process, it is capped by WithMaxPause too and sent to Redis
// in the background. It never blocks. It returns an error matching
// ratesem.ErrUnknownRule for an unknown rule, and one matching
// ratesem.ErrTooManyKeys when the key is new and the pool is full
// (WithMaxKeys).
func (p *Engine) Pause(rule, key string, until time.Time) error {
	rs, ok := p.rules[rule]
	if !ok {
		return fmt.Errorf("%w %q", ratesem.ErrUnknownRule, rule)
	}
	until = p.book.pauseCap(until)
	paused, err := p.pause(rs, key, until)
	p.flushEvicted()
	if paused {
		p.book.paused(rule, key, until)
		p.emit(ratesem.Event{Kind: ratesem.Paused, Rule: rule, Key: key, Until: until, Pause: until.Sub(p.now()), Source: ratesem.SourceCaller})
	}
	return err
}

func (p *Engine) pause(rs *ruleState, key string, until time.Time) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock() // Rule.Window runs here: a panic must not leave the pool locked
	now := p.now()
	if !until.After(now) {
		return false, nil
	}
	l, err := p.limiterLocked(rs, key, now)
	if err != nil || l.state().paused >= p.mono(until) {
		return false, err // an earlier end than the pause in force sets nothing
	}
	p.pauseLocked(l, until, now)
	return true, nil
}

// pauseLocked extends l's pause to until. A later end only makes the
// limiter refuse longer, so no waiter needs a new try: the heads it
// refuses are tried again at their wake instant and told the new one.
func (p *Engine) pauseLocked(l *limiter, until, now time.Time) {
	fb := l.feedback()
	fb.paused = max(fb.paused, p.mono(until))
	p.touchLocked(l, now)
}

// ThrottledTargets reports that the server rejected a call for its rate (HTTP 429,
// or 418 for Binance's IP ban) and pauses the limiters of charges whose rule
// is marked PauseOnThrottle, or all of them when none is marked. With a
// server-given retryAfter > 0 each pauses for about retryAfter (lengthened
// by a random spread so that clients resume at different instants, never
// beyond the pool's cap, WithMaxPause). With retryAfter ≤ 0 (absent, zero,
// negative or unparsable) each pauses with exponential backoff: a random
// pause in [d/2, d] with d = 200 ms · 2^k for the k-th throttle in a row on
// that key, capped; a throttle that comes while the key is already paused
// belongs to the same episode (a call admitted before the pause) and adds
// nothing; and when the targets span rules of different windows, only
// those with the shortest Limit.Per are paused (the shortest window that
// can explain the rejection, not a daily one). A Release of a call on the
// key admitted after its latest throttle resets k. It never blocks.
// The targets are the front's choice (clientpool.Table.ThrottleTargets);
// nil targets: the marked rules.
//
// A throttle of a key of an adaptive rule (Rule.Adapt) among the targets
// also cuts its level, as a throttle of a call started one Per ago (at most
// one cut per window from such reports): ThrottledTicket, which knows the
// call's start, is the exact signal.
func (p *Engine) ThrottledTargets(charges, targets []Charge, status int, retryAfter time.Duration) {
	p.throttled(nil, charges, targets, status, retryAfter)
}

// ThrottledTicket is ThrottledTargets for the throttled call t (its charges):
// the same pauses, and, for the keys of adaptive rules among the targets
// (Rule.Adapt), a throttle of a call started at t's admission, after which
// t's Release is no success. A second report of t (the body after the
// headers) cuts nothing more; a report after Release only pauses. It never
// blocks.
//
// It panics if t is not a ticket this engine admitted.
func (p *Engine) ThrottledTicket(t *Ticket, targets []Charge, status int, retryAfter time.Duration) {
	p.mine(t, "ThrottledTicket")
	p.throttled(t, t.charges, targets, status, retryAfter)
}

func (p *Engine) throttled(t *Ticket, charges, targets []Charge, status int, retryAfter time.Duration) {
	if targets == nil {
		targets = p.marked(charges)
	}
	switch {
	case t != nil && p.anyAdaptive(charges):
		// Marked throttled even when the throttle is about other rules:
		// a rejected call is no success for any of them.
		p.throttleAdaptive(t, targets, t.at)
	case t == nil && p.anyAdaptive(targets):
		p.throttleAdaptive(nil, targets, 0)
	}
	src := ratesem.SourceBackoff
	if retryAfter > 0 {
		src = ratesem.SourceRetryAfter
	}
	p.emitCharges(ratesem.Event{Kind: ratesem.Throttled, Status: status, Source: src}, charges)
	for _, e := range p.throttleKeys(targets, retryAfter, src) {
		p.book.paused(e.Rule, e.Key, e.Until)
		p.emit(e)
	}
	p.flushEvicted()
}

// marked returns the charges whose rule is marked PauseOnThrottle, or all of
// them when none is.
func (p *Engine) marked(charges []Charge) []Charge {
	targets := slices.DeleteFunc(slices.Clone(charges), func(c Charge) bool {
		rs := p.rules[c.Rule]
		return rs == nil || !rs.PauseOnThrottle
	})
	if len(targets) == 0 {
		return charges
	}
	return targets
}

// shortestLocked keeps the targets whose rule has the shortest window.
func (p *Engine) shortestLocked(targets []Charge) []Charge {
	var per time.Duration
	for _, c := range targets {
		if rs := p.rules[c.Rule]; rs != nil && (per == 0 || rs.limit.Per < per) {
			per = rs.limit.Per
		}
	}
	return slices.DeleteFunc(slices.Clone(targets), func(c Charge) bool {
		rs := p.rules[c.Rule]
		return rs == nil || rs.limit.Per != per
	})
}

// throttleKeys pauses the targets (see ThrottledTargets) and returns the
// Paused events of the pauses it set (from src), under the lock.
func (p *Engine) throttleKeys(targets []Charge, retryAfter time.Duration, src string) []ratesem.Event {
	limit := backoff.Cap(p.maxPause)
	var paused []ratesem.Event
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if retryAfter <= 0 {
		targets = p.shortestLocked(targets)
	}
	for _, c := range targets {
		rs := p.rules[c.Rule]
		if rs == nil {
			continue
		}
		l, err := p.limiterLocked(rs, c.Key, now)
		if err != nil {
			continue // a full pool: the key has no call in flight to pause
		}
		fb := l.feedback()
		fb.throttles++
		var d time.Duration
		switch {
		case retryAfter > 0:
			d = backoff.Spread(retryAfter, limit)
		case p.mono(now) < fb.paused:
			continue // same episode: a call admitted before the pause
		default:
			d = backoff.Exp(int(fb.streak), backoff.DefaultMin, limit)
			if fb.streak < 62 {
				fb.streak++
			}
		}
		until := now.Add(d)
		p.pauseLocked(l, until, now)
		paused = append(paused, ratesem.Event{Kind: ratesem.Paused, Rule: c.Rule, Key: c.Key, Until: until, Pause: d, Source: src})
	}
	return paused
}

// OverloadedTicket reports that the server answered the call t with an
// overload (HTTP 503) rather than a throttle of its quota: it pauses
// nothing (as before adaptive limits: an overloaded or failing server is
// not a client over its limit) and is, for the keys of adaptive rules
// among the targets (nil: the marked ones, see ThrottledTargets), a
// throttle of t; after it t's Release is no success. It never blocks.
//
// It panics if t is not a ticket this engine admitted.
func (p *Engine) OverloadedTicket(t *Ticket, targets []Charge) {
	p.mine(t, "Overloaded")
	if targets == nil {
		targets = p.marked(t.charges)
	}
	if p.anyAdaptive(t.charges) {
		p.throttleAdaptive(t, targets, t.at)
	}
}
