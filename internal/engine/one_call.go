package engine

import (
	"context"
	"fmt"

	"github.com/ratesem/ratesem"
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
func (o *One) Begin(ctx context.Context, n int64) (c Call, err error) {
	if n < 0 {
		return c, o.negative(n, "Begin")
	}
	if o.one != nil {
		return o.one.begin(ctx, n)
	}
	o.mu.Lock()
	if err := ctx.Err(); err != nil {
		o.mu.Unlock()
		o.observeFailed(n, err)
		return c, err
	}
	// Decided on the clock, never on the cached state: the window must
	// know the instant of the start, which a settlement's refund needs.
	// c is set only on success.
	err = o.acquireLocked(ctx, n, &c)
	return c, err
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
	o.mu.Lock()
	rc, ok := o.endCallLocked(c)
	if !ok {
		o.mu.Unlock()
		panic("ratesem: Call.End of a call already ended")
	}
	if o.one != nil {
		// Over Redis rc is the call there: it leaves flight in the
		// background, never waiting on Redis.
		o.mu.Unlock()
		if actual != c.n {
			_ = rc.Settle(redisRule, actual) // a refund where the window still counts it, a debit from now on
		}
		rc.Release()
		return
	}
	defer o.mu.Unlock()
	now := o.now()
	o.endLocked(o.l, c.at, c.n, actual, o.rs.limit.Per > 0, now)
	if o.l.q != nil {
		o.settleLocked(now)
	}
}

// emitHeld reports the admission at once of n units, which the caller now
// holds (c: its Call, when Begin admitted it). When the observer panics
// (or calls runtime.Goexit), the admission is given back first, as a
// Release (the window counts a call that ended at once, on the safe side);
// the panic goes on unrecovered. A call that waited is reported by
// Engine.emitAdmitted, which takes its admission back exactly.
//
//go:noinline
func (o *One) emitHeld(n int64, c *Call) {
	ch := [1]Charge{{Rule: o.rs.Name, Weight: n}}
	unwinding(func() { o.e.emitCharges(ratesem.Event{Kind: ratesem.Admitted}, ch[:]) }, func() {
		o.e.mu.Lock()
		o.admitted--
		if c != nil {
			o.endCallLocked(*c)
		}
		o.e.mu.Unlock()
		o.Release(n)
	})
}

// observeFailed reports the failure err of a call of n units that did not
// queue (Engine.emitFailed).
func (o *One) observeFailed(n int64, err error) {
	if o.obs != nil {
		ch := [1]Charge{{Rule: o.rs.Name, Weight: n}}
		o.e.emitFailed(ch[:], nil, err)
	}
}
