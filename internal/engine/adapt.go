package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/adapt"
	"github.com/ratesem/ratesem/window"
)

// Adaptive makes a rule's limit adaptive (clientpool.Adaptive, field for
// field): each key's window N is the level of an internal/adapt law,
// raised while the key's calls succeed and cut on throttles.
type Adaptive struct {
	// Floor is the lowest level, in units per the rule's Per (≥ 1).
	Floor int64
	// Ceiling is the highest level (0: no ceiling but MaxLearnedN; else ≥
	// Floor). A limit the key learns (Rule.Learn) lowers it.
	Ceiling int64
}

// errAdaptiveRedis is New's error for an adaptive rule in Redis mode over a
// store that cannot keep adaptive levels (not an rspec.Adapter).
var errAdaptiveRedis = errors.New("ratesem: this Redis store cannot keep adaptive levels (Rule.Adapt): use the rule in process, or give it a fixed Limit")

// checkAdapt validates r.Adapt.
func (r *Rule) checkAdapt() error {
	a := r.Adapt
	if a == nil {
		return nil
	}
	switch {
	case a.Floor < 1 || a.Floor > MaxLearnedN:
		return fmt.Errorf("%w: rule %q: Adapt.Floor %d: want 1 ≤ Floor ≤ %d", ratesem.ErrInvalidLimit, r.Name, a.Floor, int64(MaxLearnedN))
	case a.Ceiling != 0 && (a.Ceiling < a.Floor || a.Ceiling > MaxLearnedN):
		return fmt.Errorf("%w: rule %q: Adapt.Ceiling %d: want 0 or Floor ≤ Ceiling ≤ %d", ratesem.ErrInvalidLimit, r.Name, a.Ceiling, int64(MaxLearnedN))
	case r.Limit.Per < time.Microsecond:
		return fmt.Errorf("%w: rule %q: adaptive, Per %v: want ≥ 1µs", ratesem.ErrInvalidLimit, r.Name, r.Limit.Per)
	}
	return nil
}

// adaptInit sets an adaptive rule up at New: its rule-wide limit is the
// initial level (Limit.N clamped to [Floor, Ceiling]; Floor when Limit.N is
// 0), the level every new key starts at; its capacity (the heaviest charge
// it admits, tooHeavyLocked) is the floor's, since a key's level may fall
// there.
func (rs *ruleState) adaptInit() {
	a := rs.Adapt
	rs.adCeil = a.Ceiling
	if rs.adCeil == 0 {
		rs.adCeil = MaxLearnedN
	}
	n := rs.Limit.N
	if n < a.Floor || n > rs.adCeil {
		n = a.Floor
	}
	rs.learning, rs.unknown = false, false
	rs.setLimit(window.Limit{N: n, Per: rs.Limit.Per})
}

// adaptCapacity lowers rs.capacity to the floor's (setLimit calls it).
func (rs *ruleState) adaptCapacity() {
	if rs.Adapt != nil {
		rs.capacity = min(rs.capacity, rs.newPolicy(window.Limit{N: rs.Adapt.Floor, Per: rs.limit.Per}).Capacity())
	}
}

// micros converts an instant of the engine (ns since its epoch) to the
// law's unit, µs (the unit the Redis scripts use too).
func micros(ns int64) int64 { return max(ns, 0) / 1000 }

// newLaw returns the law of a new key of rs.
func (rs *ruleState) newLaw() *adapt.Law {
	l := adapt.New(adapt.Params{Floor: rs.Adapt.Floor, Ceiling: rs.adCeil, W: micros(int64(rs.limit.Per))}, rs.limit.N)
	return &l
}

// adaptSuccess is the in-process hook of a call of units units on l
// (its settled weight), admitted at start (ns since the epoch), that
// ended at now without a throttle.
func (b *inProc) adaptSuccess(l *limiter, start, units int64, now time.Time) {
	if l.rule.quota {
		return // the server's budget governs: the level stays (as over Redis)
	}
	p := (*Engine)(b)
	l.ad.SuccessUnits(micros(start), micros(p.mono(now)), units)
	p.adaptedLocked(l, now)
}

// adaptThrottle is the in-process hook of a throttle of a call on l
// admitted at start.
func (b *inProc) adaptThrottle(l *limiter, _ *Ticket, start int64, now time.Time) {
	if l.rule.quota {
		return // the server's budget governs: the level stays (as over Redis)
	}
	p := (*Engine)(b)
	l.ad.Throttle(micros(start), micros(p.mono(now)))
	p.adaptedLocked(l, now)
}

// adaptedLocked makes l's window hold the law's level. A Rule.Window of
// the caller's that panics in SetLimit leaves the law as it is: the next
// signal sets the level again (the law, not the window, is the truth). A
// key of a rule counted in the server's windows (quota) keeps its window,
// which only caps the units in flight: the server's budget governs it.
func (p *Engine) adaptedLocked(l *limiter, now time.Time) {
	if l.rule.quota {
		return
	}
	lim := l.policy.Limit()
	if n := l.ad.N(); n != lim.N {
		l.policy.SetLimit(now, window.Limit{N: n, Per: l.rule.limit.Per})
		if l.q != nil {
			p.markPending(l.q)
		}
	}
}

// adaptLearnedLocked lowers the ceiling of l's law to a limit its key
// learned from a reply (Rule.Learn): the published limit is the ceiling.
func (p *Engine) adaptLearnedLocked(l *limiter, n int64, now time.Time) {
	l.unknown = false
	l.ad.SetCeiling(min(n, l.rule.adCeil))
	p.adaptedLocked(l, now)
}

// adaptSetLimitLocked is SetLimit on an adaptive rule: l.N becomes the
// ceiling of the rule and of every key (a level above it comes down to
// it), l.Per the window. The ceiling is held to [Floor, MaxLearnedN], the
// bounds New holds Adaptive.Ceiling to.
func (p *Engine) adaptSetLimitLocked(rs *ruleState, l window.Limit, now time.Time) {
	rs.adCeil = min(max(l.N, rs.Adapt.Floor), MaxLearnedN)
	rs.setLimit(window.Limit{N: min(rs.limit.N, rs.adCeil), Per: l.Per})
	for _, lim := range rs.keys {
		lim.ad.P.W = max(micros(int64(l.Per)), 1)
		lim.ad.SetCeiling(rs.adCeil)
		if !rs.quota {
			lim.policy.SetLimit(now, window.Limit{N: lim.ad.N(), Per: l.Per})
		}
	}
}

// throttleAdaptive feeds a throttle to the adaptive laws of the targets'
// keys: a call admitted at start (ns since the epoch); t, when not nil, is
// the throttled call, whose Release then reports no success. It never
// blocks.
func (p *Engine) throttleAdaptive(t *Ticket, targets []Charge, start int64) {
	p.mu.Lock()
	defer p.mu.Unlock() // a Rule.Window that panics must not leave the pool locked
	now := p.now()
	if t != nil {
		if t.throttled || t.released.Load() {
			return // reported already (headers, then body), or too late
		}
		t.throttled = true
	}
	for _, c := range targets {
		rs := p.rules[c.Rule]
		if rs == nil || rs.Adapt == nil {
			continue
		}
		l, ok := rs.keys[c.Key]
		if !ok || l.ad == nil {
			continue // evicted: the key starts over anyway
		}
		s := start
		if t == nil {
			// A throttle without its call: taken as a call started a
			// window ago, so that it cuts at most once per window
			// (hysteresis drops it after a cut in the last window).
			s = p.mono(now) - int64(rs.limit.Per)
		}
		p.book.adaptThrottle(l, t, s, now)
	}
	p.settleLocked(now)
}

// mine panics unless t is a ticket of p: a ticket of another engine (or
// one never admitted) is a caller's bug, and its state is guarded by its
// own engine's lock.
func (p *Engine) mine(t *Ticket, what string) {
	if t == nil || t.pool != p {
		panic("ratesem: " + what + " with a Ticket not admitted by this Pool")
	}
}

// anyAdaptive reports whether a rule of the charges is adaptive.
func (p *Engine) anyAdaptive(charges []Charge) bool {
	for _, c := range charges {
		if rs := p.rules[c.Rule]; rs != nil && rs.Adapt != nil {
			return true
		}
	}
	return false
}

// AdaptLevel returns the current adaptive level of (rule, key) and true,
// or false when the rule is not adaptive or the key is not live. It does
// not block but for the engine's lock. (Tests and Snapshot's Limit.N.)
func (p *Engine) AdaptLevel(rule, key string) (int64, bool) {
	rs, ok := p.rules[rule]
	if !ok || rs.Adapt == nil {
		return 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	l, ok := rs.keys[key]
	if !ok || l.ad == nil {
		return 0, false
	}
	return l.ad.N(), true
}
