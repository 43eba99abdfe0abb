package window

import "time"

// Policy is the bookkeeping of one rate window, as a RateSemaphore
// (package github.com/ratesem/ratesem/semaphore) drives it: pure state that
// takes the current instant as an argument and owns no goroutines or timers.
//
// The instants passed to one Policy must come from one clock and must not go
// backwards; an instant earlier than one already seen is treated as that
// later one. Implementations are not safe for concurrent use: the caller
// serialises every call (a RateSemaphore holds its mutex).
type Policy interface {
	// Limit returns the limit the policy enforces.
	Limit() Limit

	// Capacity returns the largest weight, in units, that Admit can ever
	// admit under the current limit: N for the windows, the burst for the
	// buckets and GCRA. A call heavier than that can never start.
	Capacity() int64

	// SetLimit replaces the limit at the instant now. The record of calls
	// still inside the old window at now is kept and counted against the new
	// limit, so lowering it may leave the window over budget until enough of
	// them leave it. It panics on a negative limit.
	SetLimit(now time.Time, l Limit)

	// Admit admits a call of n units (n ≥ 0) starting at now, if the window
	// allows it, and reports true. A negative n is refused (false, the zero
	// time.Time) and changes nothing: it would credit the window. Otherwise it changes nothing and returns
	// the earliest instant at which n units could be admitted if nothing
	// else changed, and false. That instant is the zero time.Time when it
	// does not depend on time alone: n exceeds Limit().N, or only calls in
	// flight ending (Done) or a larger limit could make room.
	Admit(now time.Time, n int64) (at time.Time, ok bool)

	// AdmitCached admits n units, and reports true, if the state already
	// shows them free at any instant from the latest one seen on. It reads
	// no clock; false means only that Admit must decide. A negative n is
	// refused.
	AdmitCached(n int64) bool

	// Cancel undoes an Admit of n units at the instant at, for a call that
	// was admitted but never started (its caller gave up). Afterwards the
	// window is as if that Admit had not happened. n must be what was
	// admitted; n ≤ 0 changes nothing, except that the completion window
	// panics on a negative n (a caller's bug).
	Cancel(at time.Time, n int64)

	// Done records that a call of n units admitted earlier ended at now.
	// n ≤ 0 changes nothing, except that the completion window panics on a
	// negative n, or on more units than are in flight (a caller's bug).
	Done(now time.Time, n int64)

	// DoneUsesTime reports whether Done reads its now argument. When it is
	// false the caller may pass the zero time.Time and skip a clock read.
	DoneUsesTime() bool
}

var (
	_ Policy = (*Completion)(nil)
	_ Policy = (*SlidingLog)(nil)
	_ Policy = (*FixedWindow)(nil)
	_ Policy = (*SlidingWindowCounter)(nil)
	_ Policy = (*SubWindowCounter)(nil)
	_ Policy = (*TokenBucket)(nil)
	_ Policy = (*LeakyBucket)(nil)
	_ Policy = (*GCRA)(nil)
)
