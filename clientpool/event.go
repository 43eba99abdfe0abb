package clientpool

import (
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/obs"
)

// The Pool reports ratesem.Events to its observer (WithObserver), one per
// charge of a call: Queued (the call had to wait), then Admitted (with its
// wait), Refused or Cancelled for each charge, as the call ends its
// Acquire; Throttled (Status) for each charge of a throttled call and
// Paused (Pause, Until, Source) for each key a throttle or Pause paused;
// Reconciled when a usage header tightened a key's window; Evicted when an
// idle key is dropped; Unsettled for each charge a reply closed unread left
// at its estimate (Ticket.BodyUnread). An Acquire that fails before its charges are known
// (a negative weight, an unknown rule) reports one Refused event with no
// Rule. In Redis mode (redisrate.Shared) a call's wait is its round trips' and
// Queued is not reported.

func (p *Pool) emit(e ratesem.Event) {
	if p.observer != nil {
		p.observer(e)
	}
}

// emitCharges reports one event per charge, e with the charge's rule, key
// and weight; one event with no rule when there is no charge.
func (p *Pool) emitCharges(e ratesem.Event, charges []Charge) {
	if p.observer == nil {
		return
	}
	if len(charges) == 0 && e.Kind != ratesem.Admitted {
		p.observer(e)
		return
	}
	for _, c := range charges {
		e.Rule, e.Key, e.Weight = c.Rule, c.Key, c.Weight
		p.observer(e)
	}
}

func (p *Pool) emitAdmitted(charges []Charge, wait time.Duration, queued bool) {
	if p.observer != nil {
		p.emitCharges(ratesem.Event{Kind: ratesem.Admitted, Wait: wait, Queued: queued}, charges)
	}
}

// emitFailed reports the failure err of an Acquire of charges; w is its
// waiter when it had queued, else nil.
func (p *Pool) emitFailed(charges []Charge, w *waiter, err error) {
	if p.observer == nil {
		return
	}
	e := ratesem.Event{Kind: obs.FailKind(err), Err: err}
	if w != nil {
		e.Queued, e.Wait = true, max(p.now().Sub(w.since), 0)
	}
	p.emitCharges(e, charges)
}

// noteEvictedLocked keeps the (rule, key) of an evicted limiter for
// flushEvicted, when the pool has an observer: the observer must not run
// under the lock.
func (p *Pool) noteEvictedLocked(l *limiter) {
	if p.observer != nil {
		p.evicted = append(p.evicted, Charge{Rule: l.rule.Name, Key: l.key})
		p.evictedN.Store(int32(len(p.evicted)))
	}
}

// flushEvicted reports the evictions noted since the last flush. It takes
// the lock only when there are some.
func (p *Pool) flushEvicted() {
	if p.observer == nil || p.evictedN.Load() == 0 {
		return
	}
	p.mu.Lock()
	ev := p.evicted
	p.evicted = nil
	p.evictedN.Store(0)
	p.mu.Unlock()
	for _, c := range ev {
		p.observer(ratesem.Event{Kind: ratesem.Evicted, Rule: c.Rule, Key: c.Key})
	}
}
