package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/obs"
	"github.com/ratesem/ratesem/window"
)

// Call is a call admitted by One.Begin (semaphore.Call): a small value.
type Call struct {
	o    *One
	n    int64
	at   int64  // the admission instant, ns since the epoch (in process)
	slot int    // its slot in o.calls
	gen  uint64 // the slot's generation while the call is live (odd)
}

// Weight returns the units the call holds.
func (c Call) Weight() int64 { return c.n }

// newCallLocked registers a live call of n units admitted at at and
// returns its Call.
func (o *One) newCallLocked(n, at int64) Call {
	var i int
	if k := len(o.freeCalls); k > 0 {
		i = o.freeCalls[k-1]
		o.freeCalls = o.freeCalls[:k-1]
	} else {
		i = len(o.calls)
		o.calls = append(o.calls, callSlot{})
	}
	sl := &o.calls[i]
	sl.gen++
	o.callUnits += n
	return Call{o: o, n: n, at: at, slot: i, gen: sl.gen}
}

// endCallLocked ends the live call c: its slot is free again. It returns
// its call in Redis, and false (changing nothing) when c is not live.
func (o *One) endCallLocked(c Call) (*Ticket, bool) {
	if c.slot < 0 || c.slot >= len(o.calls) || c.gen&1 == 0 || o.calls[c.slot].gen != c.gen {
		return nil, false
	}
	sl := &o.calls[c.slot]
	rc := sl.t
	sl.gen++
	sl.t = nil
	o.freeCalls = append(o.freeCalls, c.slot)
	o.callUnits -= c.n
	return rc, true
}

// Begin is semaphore.RateSemaphore.Begin.
func (o *One) Begin(ctx context.Context, n int64) (Call, error) {
	if o.rem != nil {
		return o.rem.beginCall(ctx, n)
	}
	if n < 0 {
		o.observeFailed(n, nil, ratesem.ErrNegativeWeight)
		return Call{}, fmt.Errorf("%w %d: Begin", ratesem.ErrNegativeWeight, n)
	}
	var c Call
	e := o.e
	e.mu.Lock()
	if err := ctx.Err(); err != nil {
		e.mu.Unlock()
		o.observeFailed(n, nil, err)
		return Call{}, err
	}
	// Decided on the clock, never on the cached state: the window must
	// know the instant of the start, which a settlement's refund needs.
	if _, err := o.acquireLocked(ctx, n, &c); err != nil {
		return Call{}, err
	}
	return c, nil
}

// End is semaphore.Call.End.
func (c Call) End(actual int64) {
	o := c.o
	if o == nil {
		panic("ratesem: End of the zero Call")
	}
	if actual < 0 {
		panic(fmt.Sprintf("ratesem: Call.End with negative weight %d", actual))
	}
	e := o.e
	e.mu.Lock()
	rc, ok := o.endCallLocked(c)
	if !ok {
		e.mu.Unlock()
		panic("ratesem: Call.End of a call already ended")
	}
	if o.rem != nil {
		e.mu.Unlock()
		o.rem.endCall(rc, c.n, actual)
		return
	}
	defer e.mu.Unlock()
	o.l.inflight -= c.n
	now := e.now()
	if st, ok := o.orig.(window.Settler); ok && o.per > 0 {
		st.Settle(now, e.instant(c.at), c.n, actual)
	} else {
		o.fast.Done(e.mono(now), c.n)
	}
	if o.l.q != nil {
		e.markPending(o.l.q)
		e.settleLocked(now)
	}
}

// observeAdmitted reports the admission at once of n units, which the
// caller now holds; c is its Call when Begin admitted it. When the
// observer panics (or calls runtime.Goexit), the admission is given back
// first, as a Release (the window counts a call that ended at once, on the
// safe side); the panic goes on unrecovered.
func (o *One) observeAdmitted(n int64, w *waiter, c *Call) {
	if o.obs != nil {
		o.emitHeld(n, w, c)
	}
}

//go:noinline
func (o *One) emitHeld(n int64, w *waiter, c *Call) {
	returned := false
	defer func() {
		if !returned {
			o.takeBack(n, w, c)
		}
	}()
	wait := time.Duration(0)
	if w != nil {
		wait = max(w.granted.Sub(w.since), 0)
	}
	o.emit(ratesem.Admitted, n, w, wait, nil)
	returned = true
}

// takeBack undoes the admission of n units whose observer panicked.
func (o *One) takeBack(n int64, w *waiter, c *Call) {
	e := o.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if c != nil {
		o.endCallLocked(*c)
	}
	o.admitted--
	if w != nil {
		e.undoLocked(w)
		e.settleLocked(e.now())
		return
	}
	o.l.inflight -= n
	now := e.now()
	var ns int64 // as in Release: 0 when the window does not read it
	if o.doneUsesTime && o.per > 0 {
		ns = e.mono(now)
	}
	o.fast.Done(ns, n)
	if o.l.q != nil {
		e.markPending(o.l.q)
		e.settleLocked(now)
	}
}

// observeQueued reports that w joined the queue. When the observer panics
// (or calls runtime.Goexit), w leaves the queue (or its admission, if it
// came meanwhile, is undone) first.
func (o *One) observeQueued(w *waiter) {
	if o.obs == nil {
		return
	}
	returned := false
	defer func() {
		if !returned {
			o.e.abandon(w)
		}
	}()
	o.emit(ratesem.Queued, w.held[0].n, nil, 0, nil)
	returned = true
}

// observeFailed reports the failure err of an Acquire of n units; w is
// its waiter when it had queued.
func (o *One) observeFailed(n int64, w *waiter, err error) {
	if o.obs != nil {
		o.emit(obs.FailKind(err), n, w, -1, err)
	}
}

//go:noinline
func (o *One) emit(kind ratesem.EventKind, n int64, w *waiter, wait time.Duration, err error) {
	ev := ratesem.Event{Kind: kind, Weight: n, Err: err}
	if w != nil {
		if wait < 0 {
			wait = max(o.e.now().Sub(w.since), 0)
		}
		ev.Queued, ev.Wait = true, wait
	}
	o.obs(ev)
}
