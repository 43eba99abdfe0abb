// Package winfast is the waiting engine's way into the windows of package
// window (github.com/ratesem/ratesem/window): the same bookkeeping as
// window.Policy, with instants as int64 nanoseconds since an epoch instead of
// time.Time, plus the two fast-path hooks the engine needs. It is internal so
// that none of it is part of package window's exported API: a user who
// writes a window implements window.Policy only, and Of adapts it.
//
// Why nanoseconds: the engine reads its clock as time.Since(epoch), a
// monotonic subtraction, and the windows count in int64 nanoseconds; passing
// a time.Time between the two costs a time.Time.Add on one side and a
// time.Time.Sub on the other for every admitted call (about a sixth of an
// admitted Acquire+Release).
package winfast

import (
	"math"
	"time"
)

// None is the instant Admit returns when the window cannot say when n units
// could be admitted by time alone: n exceeds its capacity, or only a Done or
// a larger limit can make room. Every real instant of a window is later than
// its epoch's distant past, so None is never one of them.
const None int64 = math.MinInt64

// Window is a window of package window as the engine drives it. Instants
// are nanoseconds since the epoch that Start returned, read from one clock,
// and must not go backwards (an earlier one is taken as the latest seen).
// It is not safe for concurrent use: the engine holds its mutex around
// every call.
type Window interface {
	// Start fixes the window's epoch at epoch unless it has one already
	// (it was used through window.Policy before), and returns the epoch in
	// use: instants passed afterwards are nanoseconds since it. Call it
	// once, before any method that takes an instant (Capacity and
	// DoneUsesTime need none).
	Start(epoch time.Time) time.Time

	// Capacity is window.Policy.Capacity.
	Capacity() int64

	// SetLimit is window.Policy.SetLimit at the instant now, for a limit
	// of n units per per (both ≥ 0; it panics otherwise).
	SetLimit(now, n int64, per time.Duration)

	// AdmitCached admits n units, and reports true, if the state already
	// shows them free at any instant from the latest one seen on. It reads
	// no clock; false means only that Admit must decide. A negative n is
	// refused.
	AdmitCached(n int64) bool

	// Admit is window.Policy.Admit at now; the instant returned is None
	// where window.Policy.Admit returns the zero time.Time.
	Admit(now, n int64) (at int64, ok bool)

	// Cancel is window.Policy.Cancel of an Admit at the instant at.
	Cancel(at, n int64)

	// Done is window.Policy.Done at now.
	Done(now, n int64)

	// DoneUsesTime reports whether Done reads its now argument. When it is
	// false the engine passes 0 and skips a clock read.
	DoneUsesTime() bool
}

// Foreign is implemented by the Window that Of returns for a Policy of
// another package: its methods run the caller's code, which may panic, so
// the engine guards them (the windows of package window do not implement
// it, and cost the engine nothing more).
type Foreign interface {
	Window
	// ForeignPolicy marks the adapter; it does nothing.
	ForeignPolicy()
}

// Of returns the engine's form of p, a window.Policy: for the windows of
// package window, a Window that works on their state directly; for a Policy
// of another package, an adapter that converts instants to time.Time and
// calls p's methods (AdmitCached always false, DoneUsesTime always true).
// It returns nil if p is nil. Package window sets it when it is
// initialised, so it is set in every program that has a window.Policy.
var Of func(p any) Window

// BurstFollowsN reports whether p, a window.Policy, is a token or leaky
// bucket or a GCRA of package window whose burst was left at 0 when it was
// made, so that its SetLimit sets the burst to the new N; false for any
// other. Package window sets it.
var BurstFollowsN func(p any) bool

// Mark reports, for a fixed completion window of package window (p, a
// window.Policy; ok false for any other), at the instant now: the index of
// the window current at now, the units of the calls that ended in it, and
// the units window.Reconciler.Consume added to it. A usage report of a call
// admitted in window win, against the units that had ended by its
// admission, bounds the units the server counted from elsewhere (see
// clientpool's Ticket.ObserveHeaders). Package window sets it.
var Mark func(p any, now time.Time) (win, ended, taken int64, ok bool)

// Report takes in, for a fixed completion window of package window (p, a
// window.Policy; ok false for any other), a server's count used read at
// now: with marked, from the response to a call of n units admitted in
// window win when ended units of it had ended (Mark at the admission);
// without, from no call in particular (win, ended and n unused). It
// returns the change in the units the window counts: the window counts
// its own calls plus the bound on the units from elsewhere that its
// reports give, which can be lower than an earlier one (see
// clientpool's Ticket.ObserveHeaders). Package window sets it.
var Report func(p any, now time.Time, win, used, ended, n int64, marked bool) (delta int64, ok bool)
