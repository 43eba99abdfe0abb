package win

import (
	"math"
	"time"

	"github.com/ratesem/ratesem/internal/sat"
)

// Policy is the bookkeeping of one rate window: what a RateSemaphore
// (package github.com/ratesem/ratesem/semaphore, NewWithPolicy), a Limiter
// or a clientpool.Rule asks of it. Every window of this package implements
// it; implement it to bring a window of your own. It is pure state that
// takes the current instant as an argument and owns no goroutines or timers.
//
// The instants passed to one Policy come from one clock and do not go
// backwards; an implementation must treat an instant earlier than one
// already seen as that later one. Implementations need not be safe for
// concurrent use: the caller serialises every call (a RateSemaphore holds
// its mutex), and owns the Policy.
type Policy interface {
	// Limit returns the limit the policy enforces: N units per Per.
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
	// allows it: it records the start and reports true. Otherwise it
	// changes nothing and returns the earliest instant at which n units
	// could be admitted if nothing else changed, and false. That instant is
	// the zero time.Time when it does not depend on time alone: n exceeds
	// Capacity, or only calls in flight ending (Done) or a larger limit
	// could make room. A negative n is refused (false, the zero time.Time)
	// and changes nothing: it would credit the window.
	Admit(now time.Time, n int64) (at time.Time, ok bool)

	// Cancel undoes an Admit of n units at the instant at, for a call that
	// was admitted but never started (its caller gave up). Afterwards the
	// window is as if that Admit had not happened, or counts more (on the
	// safe side) when later admissions make an exact undo impossible. n
	// must be what was admitted; n ≤ 0 changes nothing, except that the
	// completion window panics on a negative n (a caller's bug).
	Cancel(at time.Time, n int64)

	// Done records that a call of n units admitted earlier ended at now.
	// The windows that count starts only ignore it; the completion windows
	// (NewCompletion, NewFixedCompletion) need it. n ≤ 0 changes nothing,
	// except that the completion window panics on a negative n, or on more
	// units than are in flight (a caller's bug).
	Done(now time.Time, n int64)
}

// The engine's way into the windows (Window, Of): the same bookkeeping as
// window.Policy, with instants as int64 nanoseconds since an epoch instead
// of time.Time, plus the two fast-path hooks the engine needs. It is
// internal so that none of it is part of package window's exported API: a
// user who writes a window implements window.Policy only, and Of adapts it.
//
// Why nanoseconds: the engine reads its clock as time.Since(epoch), a
// monotonic subtraction, and the windows count in int64 nanoseconds; passing
// a time.Time between the two costs a time.Time.Add on one side and a
// time.Time.Sub on the other for every admitted call (about a sixth of an
// admitted Acquire+Release).

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

// BurstFollowsN reports whether p, a window.Policy, is a token or leaky
// bucket or a GCRA of package window whose burst was left at 0 when it was
// made, so that its SetLimit sets the burst to the new N; false for any
// other.
func BurstFollowsN(p any) bool {
	switch w := p.(type) {
	case *TokenBucket:
		return !w.burstSet
	case *LeakyBucket:
		return !w.burstSet
	case *GCRA:
		return !w.burstSet && !w.pacer
	}
	return false
}

// Mark reports, for a fixed completion window of package window (p, a
// window.Policy; ok false for any other), at the instant now: the index of
// the window current at now, the units of the calls that ended in it, and
// the units window.Reconciler.Consume added to it. A usage report of a call
// admitted in window win, against the units that had ended by its
// admission, bounds the units the server counted from elsewhere (see
// clientpool's Ticket.ObserveHeaders).
func Mark(p any, now time.Time) (win, ended, taken int64, ok bool) {
	if w, is := p.(*FixedWindow); is {
		return w.mark(now.UnixNano())
	}
	return 0, 0, 0, false
}

// Report takes in, for a fixed completion window of package window (p, a
// window.Policy; ok false for any other), a server's count used read at
// now: with marked, from the response to a call of n units admitted in
// window win when ended units of it had ended (Mark at the admission);
// without, from no call in particular (win, ended and n unused). It
// returns the change in the units the window counts: the window counts
// its own calls plus the bound on the units from elsewhere that its
// reports give, which can be lower than an earlier one (see
// clientpool's Ticket.ObserveHeaders).
func Report(p any, now time.Time, win, used, ended, n int64, marked bool) (delta int64, ok bool) {
	if w, is := p.(*FixedWindow); is {
		return w.report(now.UnixNano(), win, used, ended, n, marked)
	}
	return 0, false
}

// Of returns the engine's form of p, a window.Policy: for the windows of
// this package, a Window that works on their state directly; for a Policy
// of another package, an adapter that converts instants to time.Time and
// calls p's methods (AdmitCached always false, DoneUsesTime always true).
// It returns nil if p is nil. It matches the exact types of this package:
// a type of another package that embeds one of them may override its
// methods, so it gets the adapter, which calls them.
func Of(p any) Window {
	switch w := p.(type) {
	case nil:
		return nil
	case *Completion:
		return (*fastCompletion)(w)
	case *SlidingLog, *FixedWindow, *SlidingWindowCounter, *SubWindowCounter, *TokenBucket, *LeakyBucket, *GCRA:
		return &fast{w: p.(core)}
	case Policy:
		return &foreign{p: w}
	}
	return nil
}

// core is what the Policy methods of a window of this package (all but
// the completion window, which has its own fast form) and its engine form
// share: the bookkeeping on int64 instants, in the window's own
// nanoseconds. ns converts an instant to them: since the window's epoch
// (fixed by start, or at the first instant seen), or since the Unix epoch
// for the windows aligned to the clock, whose start changes nothing. admit
// returns an instant in them, or None. setLimit panics on a
// negative limit.
type core interface {
	Capacity() int64
	start(e time.Time) time.Time
	ns(t time.Time) int64
	admit(now, n int64) (at int64, ok bool)
	cancel(at, n int64)
	done(now, n int64)
	setLimit(now int64, l Limit)
}

// timeOf converts at, an instant of a window's core (None: the
// zero time.Time), to a time.Time on the clock of now, whose instant in
// the core is t: what Policy.Admit returns. The windows return an at no
// earlier than t, so at − t, read as unsigned, is exact: the wait
// saturates at math.MaxInt64 rather than wrap.
func timeOf(now time.Time, t, at int64) time.Time {
	if at == None {
		return time.Time{}
	}
	return now.Add(time.Duration(min(uint64(at-t), math.MaxInt64)))
}

// trivial decides the calls of n units that need no bookkeeping, under a
// capacity (Policy.Capacity) and a limit of Per per: done reports that it
// decided, ok the decision. A negative n, or one above the capacity, is
// refused; n == 0, or any n with no rate (Per 0), is admitted.
func trivial(n, capacity int64, per time.Duration) (done, ok bool) {
	switch {
	case n < 0 || n > capacity:
		return true, false
	case n == 0 || per == 0:
		return true, true
	}
	return false, false
}

// limited holds a window's limit: its Limit, and its Capacity for the
// windows whose capacity is N (the buckets and GCRA have their own).
type limited struct{ limit Limit }

// Limit implements Policy: it returns the limit the window enforces.
func (l *limited) Limit() Limit { return l.limit }

// Capacity implements Policy: it returns N.
func (l *limited) Capacity() int64 { return l.limit.N }

// unix gives the windows aligned to the clock their instants: Unix
// nanoseconds, with no epoch of their own.
type unix struct{}

func (unix) start(e time.Time) time.Time { return e }
func (unix) ns(t time.Time) int64        { return t.UnixNano() }

// fast is the engine's form (Window) of the windows of this
// package but the completion window: the engine's instants, nanoseconds
// since its epoch, are shift before the window's own. Taking tokens from a
// stale reading and refilling later would forget the cap a bucket hit
// meanwhile, a start is stamped with its instant, and whether a new
// aligned window has begun depends on the time: so AdmitCached is always
// false, and Admit decides.
type fast struct {
	w     core
	shift int64 // the engine's epoch in the window's nanoseconds
}

// Start implements Window (the engine's form of the window).
func (f *fast) Start(e time.Time) time.Time {
	e = f.w.start(e)
	f.shift = f.w.ns(e)
	return e
}

// Capacity implements Window (the engine's form of the window).
func (f *fast) Capacity() int64 { return f.w.Capacity() }

// AdmitCached implements Window (the engine's form of the window).
func (f *fast) AdmitCached(int64) bool { return false }

// Admit implements Window (the engine's form of the window).
func (f *fast) Admit(now, n int64) (int64, bool) {
	at, ok := f.w.admit(f.shift+now, n)
	if at == None {
		return None, ok
	}
	return sat.Sub(at, f.shift), ok
}

// Cancel implements Window (the engine's form of the window).
func (f *fast) Cancel(at, n int64) { f.w.cancel(f.shift+at, n) }

// Done implements Window (the engine's form of the window).
func (f *fast) Done(now, n int64) { f.w.done(f.shift+now, n) }

// DoneUsesTime implements Window (the engine's form of the window):
// only a fixed completion window reads Done's instant.
func (f *fast) DoneUsesTime() bool {
	w, ok := f.w.(*FixedWindow)
	return ok && w.carry
}

// SetLimit implements Window (the engine's form of the window).
func (f *fast) SetLimit(now, n int64, per time.Duration) {
	f.w.setLimit(f.shift+now, Limit{N: n, Per: per})
}

// foreign adapts a Policy of another package to Window: instants
// become time.Time again, on the epoch given to Start.
type foreign struct {
	p     Policy
	epoch time.Time
}

// ForeignPolicy implements Foreign: the methods run a caller's code.
func (f *foreign) ForeignPolicy() {}

// Start implements Window over the foreign Policy.
func (f *foreign) Start(e time.Time) time.Time { f.epoch = e; return e }
func (f *foreign) t(ns int64) time.Time        { return f.epoch.Add(time.Duration(ns)) }

// Capacity implements Window over the foreign Policy.
func (f *foreign) Capacity() int64 { return f.p.Capacity() }

// AdmitCached implements Window over the foreign Policy.
func (f *foreign) AdmitCached(int64) bool { return false }

// Admit implements Window over the foreign Policy.
func (f *foreign) Admit(now, n int64) (int64, bool) {
	at, ok := f.p.Admit(f.t(now), n)
	if at.IsZero() {
		return None, ok
	}
	return int64(at.Sub(f.epoch)), ok
}

// Cancel implements Window over the foreign Policy.
func (f *foreign) Cancel(at, n int64) { f.p.Cancel(f.t(at), n) }

// Done implements Window over the foreign Policy.
func (f *foreign) Done(now, n int64) { f.p.Done(f.t(now), n) }

// DoneUsesTime implements Window over the foreign Policy.
func (f *foreign) DoneUsesTime() bool { return true } // unknown: pass the instant

// SetLimit implements Window over the foreign Policy.
func (f *foreign) SetLimit(now, n int64, per time.Duration) {
	f.p.SetLimit(f.t(now), Limit{N: n, Per: per})
}
