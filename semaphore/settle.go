package semaphore

import (
	"context"

	"github.com/ratesem/ratesem/internal/engine"
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
type Call struct{ c engine.Call }

// Begin is Acquire for a call whose weight is known only after it (an LLM
// API's tokens): it admits n units (n ≥ 0, the estimate), blocking like
// Acquire, with the same errors and events, and returns the Call, whose End
// releases the units and settles the call to the weight it really had.
// Prefer an estimate that bounds the truth from above (a prompt's tokens
// plus max_tokens): the window then never counts less than the server.
func (s *RateSemaphore) Begin(ctx context.Context, n int64) (Call, error) {
	c, err := s.o.Begin(ctx, n)
	return Call{c}, err
}

// End ends the call now: its units (the estimate Begin admitted) are
// released, as Release would, and the rate window counts the call as actual units (actual ≥ 0)
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
func (c Call) End(actual int64) { c.c.End(actual) }
