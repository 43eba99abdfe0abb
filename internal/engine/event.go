package engine

import (
	"fmt"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/obs"
)

// The Pool reports ratesem.Events to its observer (WithObserver), one per
// charge of a call: Queued (the call had to wait), then Admitted (with its
// wait), Refused or Cancelled for each charge, as the call ends its
// Acquire; Throttled (Status) for each charge of a throttled call and
// Paused (Pause, Until, Source) for each key a throttle or Pause paused;
// Reconciled when a usage header tightened a key's window; Distrusted when
// a call heavier than its key's learned limit was admitted alone (after
// its Admitted event) or a reply's window contradicted the key's; Evicted
// when an idle key is dropped; Unsettled for each charge a reply closed
// unread left at its estimate (Ticket.BodyUnread). An Acquire that fails
// before its charges are known
// (a negative weight, an unknown rule) reports one Refused event with no
// Rule. In Redis mode (redisrate.Shared) the same events are reported: a
// call is Queued from its first refusal by Redis (or when it queues behind
// another).

func (p *Engine) emit(e ratesem.Event) {
	if p.observer != nil {
		p.observer(p.named(e))
	}
}

// named returns e as the front reports it: a semaphore over Redis names
// itself in Key, with no Rule.
func (p *Engine) named(e ratesem.Event) ratesem.Event {
	if p.one != nil {
		e.Rule, e.Key = "", p.one.name
	}
	return e
}

// emitCharges reports one event per charge, e with the charge's rule, key
// and weight; one event with no rule when there is no charge.
func (p *Engine) emitCharges(e ratesem.Event, charges []Charge) {
	if len(charges) == 0 && e.Kind != ratesem.Admitted {
		p.emit(e)
	}
	for _, c := range charges {
		e.Rule, e.Key, e.Weight = c.Rule, c.Key, c.Weight
		p.emit(e)
	}
}

// emitAdmitted reports the admission of t, then a Distrusted event for
// each charge admitted above its key's learned limit. If the observer panics (or
// calls runtime.Goexit), t's admission is taken back first (book.takeBack): the
// caller gets the panic, not the ticket, and holds nothing. The deferred
// call does not recover, so the panic keeps its stack.
func (p *Engine) emitAdmitted(t *Ticket, charges []Charge, wait time.Duration, queued bool) {
	if p.observer != nil {
		unwinding(func() {
			p.emitCharges(ratesem.Event{Kind: ratesem.Admitted, Wait: wait, Queued: queued}, charges)
			for i := range t.held { // t.held[i] is t.charges[i]'s
				if h := &t.held[i]; h.over { // above the limit its key learned (learnedFit)
					c := t.charges[i]
					p.observer(ratesem.Event{Kind: ratesem.Distrusted, Rule: c.Rule, Key: c.Key, Weight: c.Weight,
						Err: fmt.Errorf("%w: %s is heavier than the limit its key learned from the server: sent alone, charged as %d units, until a reply corrects the limit", ratesem.ErrWeightTooLarge, c, h.n)})
				}
			}
		}, func() { p.book.takeBack(t) })
	}
}

// emitQueued reports that the call of w joined the queues. If the observer
// panics (or calls runtime.Goexit), w gives up first (abandon: it leaves
// the queues, or its admission, if it came meanwhile, is undone), so that
// no admission is granted to a caller that is gone.
func (p *Engine) emitQueued(w *waiter, charges []Charge) {
	if p.observer != nil {
		unwinding(func() { p.emitCharges(ratesem.Event{Kind: ratesem.Queued}, charges) }, func() { p.abandon(w) })
	}
}

// unwinding runs do; if do panics (or calls runtime.Goexit), it runs undo
// first. It does not recover, so the panic keeps its stack.
func unwinding(do, undo func()) {
	returned := false
	defer func() {
		if !returned {
			undo()
		}
	}()
	do()
	returned = true
}

// takeBack undoes the admission of t, whose caller never got it (its
// observer panicked): in process exactly, as if it had never been admitted
// (undoLocked at its admission instant); in Redis mode t is released
// (the call ends at once in Redis, on the safe side).
func (b *inProc) takeBack(t *Ticket) {
	p := (*Engine)(b)
	if t.released.Swap(true) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.undoLocked(t.held, p.instant(t.at))
	now := p.now()
	p.unrefHeldLocked(t.held, now)
	p.settleLocked(now)
}

// emitFailed reports the failure err of an Acquire of charges; w is its
// waiter when it had queued, else nil.
func (p *Engine) emitFailed(charges []Charge, w *waiter, err error) {
	if p.observer == nil {
		return
	}
	e := ratesem.Event{Kind: obs.FailKind(err), Err: err}
	if w != nil {
		e.Queued, e.Wait = true, max(p.now().Sub(w.since), 0)
	}
	p.emitCharges(e, charges)
}

// noteLocked keeps e, an event of work done off a caller's goroutine (an
// eviction; a reconcile's answer from Redis, learn_redis.go), for
// flushEvicted: the observer runs on a caller's goroutine, never under the
// lock.
func (p *Engine) noteLocked(e ratesem.Event) {
	if p.observer != nil {
		p.evicted = append(p.evicted, e)
		p.evictedN.Store(int32(len(p.evicted)))
	}
}

// flushFor is flushEvicted for an Acquire whose call start has just
// admitted (w nil: t holds it) or queued (w). If the observer panics (or
// calls runtime.Goexit), the call lets go first, as in emitAdmitted and
// emitQueued: nothing stays held or queued for a caller that is gone.
func (p *Engine) flushFor(t *Ticket, w *waiter) {
	p.flushOr(func() {
		if w != nil {
			p.abandon(w)
		} else {
			p.book.takeBack(t)
		}
	})
}

// flushOr is flushEvicted that runs undo first when the observer panics
// (or calls runtime.Goexit); the panic goes on.
func (p *Engine) flushOr(undo func()) {
	if p.observer != nil && p.evictedN.Load() != 0 {
		unwinding(p.flushEvicted, undo)
	}
}

// flushEvicted reports the evictions (and other events noteLocked kept)
// noted since the last flush. It takes the lock only when there are some.
func (p *Engine) flushEvicted() {
	if p.observer == nil || p.evictedN.Load() == 0 {
		return
	}
	p.mu.Lock()
	ev := p.evicted
	p.evicted = nil
	p.evictedN.Store(0)
	p.mu.Unlock()
	for _, e := range ev {
		p.observer(e)
	}
}
