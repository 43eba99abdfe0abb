package engine

import (
	"fmt"
	"time"

	"github.com/ratesem/ratesem"
)

// evictBudget is how many idle limiters one operation looks at, at most,
// to evict them: eviction is spread over the calls and never stalls one.
const evictBudget = 8

// refLocked fills hs with the limiters of charges, creating the missing
// ones, and takes a reference on each. When the pool is full (WithMaxKeys)
// it first evicts idle limiters whose windows have forgotten every call;
// if that is not enough it takes nothing and returns an error matching
// ratesem.ErrTooManyKeys.
func (p *Engine) refLocked(hs []held, charges []Charge, now time.Time) error {
	missing := 0
	for i, c := range charges {
		rs := p.rules[c.Rule]
		hs[i].n = c.Weight
		if l, ok := rs.keys[c.Key]; ok {
			hs[i].lim = l
			p.refOne(l)
		} else {
			missing++
		}
	}
	if err := p.roomLocked(missing, now); err != nil {
		for i := range hs {
			if hs[i].lim != nil {
				p.unrefLocked(hs[i].lim, now)
				hs[i].lim = nil
			}
		}
		return err
	}
	for i, c := range charges {
		if hs[i].lim == nil {
			hs[i].lim = p.newLimiterLocked(p.rules[c.Rule], c.Key, now)
			p.refOne(hs[i].lim)
		}
	}
	return nil
}

// refOne takes a reference on l: it leaves the idle list.
func (p *Engine) refOne(l *limiter) {
	if l.refs == 0 {
		l.rule.idleRemove(l)
	}
	l.refs++
}

// unrefLocked drops a reference on l; at zero it joins the back of its
// rule's idle list, last used now.
func (p *Engine) unrefLocked(l *limiter, now time.Time) {
	if l.refs--; l.refs == 0 {
		l.last = p.mono(now)
		l.rule.idlePush(l)
	}
}

// unrefHeldLocked drops the references of hs on their limiters (unrefLocked).
func (p *Engine) unrefHeldLocked(hs []held, now time.Time) {
	for i := range hs {
		p.unrefLocked(hs[i].lim, now)
	}
}

// touchLocked records activity on l at now (a pause or the server's word):
// an idle limiter moves to the back of its idle list.
func (p *Engine) touchLocked(l *limiter, now time.Time) {
	if l.refs == 0 {
		l.rule.idleRemove(l)
		l.last = p.mono(now)
		l.rule.idlePush(l)
	}
}

// limiterLocked returns the limiter of (rule, key), creating it, or an
// error matching ratesem.ErrTooManyKeys when it must be created and the pool is
// full. The limiter is idle unless the caller references it.
func (p *Engine) limiterLocked(rs *ruleState, key string, now time.Time) (*limiter, error) {
	if l, ok := rs.keys[key]; ok {
		return l, nil
	}
	if err := p.roomLocked(1, now); err != nil {
		return nil, err
	}
	return p.newLimiterLocked(rs, key, now), nil
}

// roomLocked makes room for missing new limiters when the pool is full
// (WithMaxKeys): it evicts idle limiters whose windows have forgotten
// every call; if that is not enough it returns an error matching
// ratesem.ErrTooManyKeys.
func (p *Engine) roomLocked(missing int, now time.Time) error {
	if missing > 0 && p.maxKeys > 0 && p.live+missing > p.maxKeys {
		p.evictLocked(now, evictBudget+missing, true)
		if p.live+missing > p.maxKeys {
			return fmt.Errorf("%w: %d live, cap %d, and no idle key could be evicted", ratesem.ErrTooManyKeys, p.live, p.maxKeys)
		}
	}
	return nil
}

func (p *Engine) newLimiterLocked(rs *ruleState, key string, now time.Time) *limiter {
	l := &limiter{rule: rs, key: key, last: p.mono(now), unknown: rs.unknown, policy: p.book.policyFor(rs)}
	if rs.Adapt != nil {
		l.ad = rs.newLaw()
	}
	rs.keys[key] = l
	rs.idlePush(l)
	p.live++
	return l
}

func (rs *ruleState) idlePush(l *limiter) {
	l.prevIdle, l.nextIdle = rs.idleTail, nil
	if rs.idleTail != nil {
		rs.idleTail.nextIdle = l
	} else {
		rs.idleHead = l
	}
	rs.idleTail = l
}

func (rs *ruleState) idleRemove(l *limiter) {
	if l.prevIdle != nil {
		l.prevIdle.nextIdle = l.nextIdle
	} else {
		rs.idleHead = l.nextIdle
	}
	if l.nextIdle != nil {
		l.nextIdle.prevIdle = l.prevIdle
	} else {
		rs.idleTail = l.prevIdle
	}
	l.prevIdle, l.nextIdle = nil, nil
}

// evictLocked looks at up to budget idle limiters, the least recently used
// first in each rule (a rotating rule first), and evicts those that are
// idle: no waiter or call (refs == 0), no pause running, and no activity
// for the rule's quiet time (its window has forgotten every call) and, but
// when force is set (the pool is full), for the idle time too. It returns
// how many it evicted. The idle lists are in order of last use, so the
// first limiter that is too recent ends a rule's turn.
func (p *Engine) evictLocked(now time.Time, budget int, force bool) int {
	nowNs, evicted := p.mono(now), 0
	n := len(p.ruleList)
	for i := 0; i < n && budget > 0; i++ {
		rs := p.ruleList[(p.evictNext+i)%n]
		wait := rs.quiet
		if !force {
			wait = max(wait, int64(p.idle))
		}
		for rotated := 0; budget > 0 && rs.idleHead != nil; {
			l := rs.idleHead
			budget--
			p.evictWork++
			if nowNs < l.state().paused {
				// Paused: look at it again after the others.
				if rotated++; rotated > 1 || l == rs.idleTail {
					break
				}
				rs.idleRemove(l)
				rs.idlePush(l)
				continue
			}
			if nowNs-l.last < wait {
				break
			}
			rs.idleRemove(l)
			delete(rs.keys, l.key)
			p.live--
			evicted++
			p.noteLocked(ratesem.Event{Kind: ratesem.Evicted, Rule: l.rule.Name, Key: l.key}) // reported by flushEvicted
		}
	}
	if n > 0 {
		p.evictNext = (p.evictNext + 1) % n
	}
	return evicted
}

// EvictWork returns how many idle limiters eviction has looked at so far
// (tests).
func (p *Engine) EvictWork() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.evictWork
}
