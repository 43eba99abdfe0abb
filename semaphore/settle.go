package semaphore

import (
	"context"
	"fmt"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/window"
)

// Call is a call admitted by Begin for an estimated weight, whose true
// weight is settled when it ends (End). It is a small value: Begin and End
// allocate nothing beyond what Acquire and Release do, and an Acquire or
// Release of the same semaphore pays nothing for them.
//
// The zero Call is not a call (End panics on it). A Call must be ended once;
// copies of a Call name the same call.
type Call struct {
	s  *RateSemaphore
	n  int64
	at int64 // the admission instant, ns since s.epoch
}

// Weight returns the units the call holds: the estimate it was admitted for.
func (c Call) Weight() int64 { return c.n }

// Begin is Acquire for a call whose weight is known only after it (an LLM
// API's tokens): it admits n units (n ≥ 0, the estimate), blocking like
// Acquire, with the same errors, and returns the Call, whose End releases
// the units and settles the call to the weight it really had. Prefer an
// estimate that bounds the truth from above (a prompt's tokens plus
// max_tokens): the window then never counts less than the server.
func (s *RateSemaphore) Begin(ctx context.Context, n int64) (Call, error) {
	if s.remote != nil {
		if err := s.remote.begin(ctx, n); err != nil {
			return Call{}, err
		}
		return Call{s: s, n: n}, nil
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
			s.mu.Unlock()
			s.observeAdmitted(n)
			return Call{s: s, n: n, at: s.nanosOf(now)}, nil
		}
	}
	w, err := s.queue(ctx, n, now)
	if err != nil {
		return Call{}, err
	}
	return Call{s: s, n: n, at: s.nanosOf(w.granted)}, nil
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
// the call's units were already released (End twice, or a Release of
// them): caller bugs, as in Release.
func (c Call) End(actual int64) {
	s := c.s
	if s == nil {
		panic("ratesem: End of the zero Call")
	}
	if actual < 0 {
		panic(fmt.Sprintf("ratesem: Call.End with negative weight %d", actual))
	}
	if s.remote != nil {
		s.remote.end(c.n, actual)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.n > s.cur {
		panic("semaphore: released more than held")
	}
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
