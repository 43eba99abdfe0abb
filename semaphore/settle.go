package semaphore

import (
	"context"
	"fmt"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/remote"
	"github.com/ratesem/ratesem/window"
)

// Call is a call admitted by Begin for an estimated weight, whose true
// weight is settled when it ends (End). It is a small value: Begin and End
// allocate nothing beyond what Acquire and Release do once the semaphore
// has seen as many calls in flight at once, and an Acquire or Release of the
// same semaphore pays nothing for them.
//
// The zero Call is not a call (End panics on it). A Call must be ended once;
// copies of a Call name the same call, and End on any of them after the
// first panics. Its units are End's alone to give back: Release does not
// take them (it panics rather than do so).
type Call struct {
	s    *RateSemaphore
	n    int64
	at   int64  // the admission instant, ns since s.epoch (in process)
	slot int    // its slot in s.calls
	gen  uint64 // the slot's generation while the call is live (odd)
}

// callSlot is the state of one Call, in RateSemaphore.calls.
type callSlot struct {
	gen uint64       // odd while a call is live in the slot; each Begin and End add 1
	rc  *remote.Call // over Redis: the call in Redis (nil for the fallback's 0 units)
}

// newCallLocked registers a live call of n units (rc its call in Redis, or
// nil) and returns its Call. s.mu must be held.
func (s *RateSemaphore) newCallLocked(n, at int64, rc *remote.Call) Call {
	var i int
	if k := len(s.freeCalls); k > 0 {
		i = s.freeCalls[k-1]
		s.freeCalls = s.freeCalls[:k-1]
	} else {
		i = len(s.calls)
		s.calls = append(s.calls, callSlot{})
	}
	sl := &s.calls[i]
	sl.gen++
	sl.rc = rc
	s.callUnits += n
	return Call{s: s, n: n, at: at, slot: i, gen: sl.gen}
}

// endCallLocked ends the live call c: its slot is free again. It returns
// the call's remote.Call, and false (changing nothing) when c is not live:
// ended already, through this copy or another. s.mu must be held.
func (s *RateSemaphore) endCallLocked(c Call) (*remote.Call, bool) {
	if c.slot < 0 || c.slot >= len(s.calls) || c.gen&1 == 0 || s.calls[c.slot].gen != c.gen {
		return nil, false
	}
	sl := &s.calls[c.slot]
	rc := sl.rc
	sl.gen++
	sl.rc = nil
	s.freeCalls = append(s.freeCalls, c.slot)
	s.callUnits -= c.n
	return rc, true
}

// Weight returns the units the call holds: the estimate it was admitted for.
func (c Call) Weight() int64 { return c.n }

// Begin is Acquire for a call whose weight is known only after it (an LLM
// API's tokens): it admits n units (n ≥ 0, the estimate), blocking like
// Acquire, with the same errors and events, and returns the Call, whose End
// releases the units and settles the call to the weight it really had.
// Prefer an estimate that bounds the truth from above (a prompt's tokens
// plus max_tokens): the window then never counts less than the server.
func (s *RateSemaphore) Begin(ctx context.Context, n int64) (Call, error) {
	if s.remote != nil {
		return s.beginRemote(ctx, n)
	}
	if n < 0 {
		s.observeFailed(n, nil, ratesem.ErrNegativeWeight)
		return Call{}, fmt.Errorf("%w %d: Begin", ratesem.ErrNegativeWeight, n)
	}
	s.mu.Lock()
	if err := ctx.Err(); err != nil {
		s.mu.Unlock()
		s.observeFailed(n, nil, err)
		return Call{}, err
	}
	if n > s.fit && s.interval > 0 {
		err := s.tooLargeLocked(n)
		s.mu.Unlock()
		s.observeFailed(n, nil, err)
		return Call{}, err
	}
	// Decide on the clock, never on the cached state: the window must know
	// the instant of the start, which a settlement's refund needs.
	now := s.now()
	if s.waiters.Len() == 0 {
		if _, ok := s.admitLocked(now, n); ok {
			c := s.newCallLocked(n, s.nanosOf(now), nil)
			s.mu.Unlock()
			s.observeAdmitted(n, nil, &c)
			return c, nil
		}
	}
	w, err := s.queue(ctx, n, now)
	if err != nil {
		return Call{}, err
	}
	s.mu.Lock()
	c := s.newCallLocked(n, s.nanosOf(w.granted), nil)
	s.mu.Unlock()
	s.observeAdmitted(n, w, &c)
	return c, nil
}

// beginRemote is Begin over Redis.
func (s *RateSemaphore) beginRemote(ctx context.Context, n int64) (Call, error) {
	rc, err := s.remote.begin(ctx, n)
	if err != nil {
		return Call{}, err
	}
	s.mu.Lock()
	c := s.newCallLocked(n, 0, rc)
	s.mu.Unlock()
	return c, nil
}

// End ends the call now: its Weight units are released, as Release(Weight)
// would, and the rate window counts the call as actual units (actual ≥ 0)
// instead of its estimate — a refund of the difference where the window
// still counts the call, a debit from now on (window.Settler). Built with
// NewWithPolicy on a window that does not implement window.Settler, or with
// no rate (interval 0), the estimate counts, as Release. Built with
// redisrate.NewSemaphore, the settlement reaches Redis in the background.
//
// It never blocks. It panics on a negative actual, on the zero Call, or when
// the call was already ended (End twice, on this copy or another): caller
// bugs, as in Release. Such a panic changes nothing, whatever other calls
// hold.
func (c Call) End(actual int64) {
	s := c.s
	if s == nil {
		panic("ratesem: End of the zero Call")
	}
	if actual < 0 {
		panic(fmt.Sprintf("ratesem: Call.End with negative weight %d", actual))
	}
	s.mu.Lock()
	rc, ok := s.endCallLocked(c)
	if !ok {
		s.mu.Unlock()
		panic("ratesem: Call.End of a call already ended")
	}
	if s.remote != nil {
		s.mu.Unlock()
		s.remote.endCall(rc, c.n, actual)
		return
	}
	s.deferredUnlock = true // a Policy that panics leaves the unlock to us (guarded)
	defer s.unlockDeferred()
	s.cur -= c.n
	now := s.now()
	if st, ok := s.settler(); ok && s.interval > 0 {
		st.Settle(now, s.instant(c.at), c.n, actual)
	} else {
		s.policy.Done(s.nanosOf(now), c.n)
	}
	if s.waiters.Len() > 0 {
		s.notifyLocked(now)
	}
}

// settler returns the policy's window.Settler, when it has one.
func (s *RateSemaphore) settler() (window.Settler, bool) {
	st, ok := s.orig.(window.Settler)
	return st, ok
}
