package win

import (
	"time"

	"github.com/ratesem/ratesem/internal/winfast"
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

var (
	_ Policy = (*Completion)(nil)
	_ Policy = (*SlidingLog)(nil)
	_ Policy = (*FixedWindow)(nil)
	_ Policy = (*SlidingWindowCounter)(nil)
	_ Policy = (*SubWindowCounter)(nil)
	_ Policy = (*TokenBucket)(nil)
	_ Policy = (*LeakyBucket)(nil)
	_ Policy = (*GCRA)(nil)

	_ winfast.Window  = (*fastCompletion)(nil)
	_ winfast.Window  = (*fastSlidingLog)(nil)
	_ winfast.Window  = (*fastFixed)(nil)
	_ winfast.Window  = (*fastSlidingCounter)(nil)
	_ winfast.Window  = (*fastSubWindow)(nil)
	_ winfast.Window  = (*fastTokenBucket)(nil)
	_ winfast.Window  = (*fastGCRA)(nil)
	_ winfast.Foreign = (*foreign)(nil)
)

func init() {
	winfast.Of = fastOf
	winfast.BurstFollowsN = func(p any) bool {
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
	winfast.Mark = func(p any, now time.Time) (win, ended, taken int64, ok bool) {
		if w, is := p.(*FixedWindow); is {
			return w.mark(now.UnixNano())
		}
		return 0, 0, 0, false
	}
	winfast.Report = func(p any, now time.Time, win, used, ended, n int64, marked bool) (int64, bool) {
		if w, is := p.(*FixedWindow); is {
			return w.report(now.UnixNano(), win, used, ended, n, marked)
		}
		return 0, false
	}
}

// fastOf is winfast.Of. It matches the exact types of this package: a type
// of another package that embeds one of them may override its methods, so
// it gets the adapter, which calls them.
func fastOf(p any) winfast.Window {
	switch w := p.(type) {
	case nil:
		return nil
	case *Completion:
		return (*fastCompletion)(w)
	case *SlidingLog:
		return (*fastSlidingLog)(w)
	case *FixedWindow:
		return &fastFixed{FixedWindow: w}
	case *SlidingWindowCounter:
		return &fastSlidingCounter{SlidingWindowCounter: w}
	case *SubWindowCounter:
		return &fastSubWindow{SubWindowCounter: w}
	case *TokenBucket:
		return (*fastTokenBucket)(w)
	case *LeakyBucket:
		return (*fastTokenBucket)(&w.TokenBucket)
	case *GCRA:
		return (*fastGCRA)(w)
	case Policy:
		return &foreign{p: w}
	}
	return nil
}

// foreign adapts a Policy of another package to winfast.Window: instants
// become time.Time again, on the epoch given to Start.
type foreign struct {
	p     Policy
	epoch time.Time
}

// ForeignPolicy implements winfast.Foreign: the methods run a caller's code.
func (f *foreign) ForeignPolicy() {}

// Start implements winfast.Window over the foreign Policy.
func (f *foreign) Start(e time.Time) time.Time { f.epoch = e; return e }
func (f *foreign) t(ns int64) time.Time        { return f.epoch.Add(time.Duration(ns)) }

// Capacity implements winfast.Window over the foreign Policy.
func (f *foreign) Capacity() int64 { return f.p.Capacity() }

// AdmitCached implements winfast.Window over the foreign Policy.
func (f *foreign) AdmitCached(int64) bool { return false }

// Admit implements winfast.Window over the foreign Policy.
func (f *foreign) Admit(now, n int64) (int64, bool) {
	at, ok := f.p.Admit(f.t(now), n)
	if at.IsZero() {
		return winfast.None, ok
	}
	return int64(at.Sub(f.epoch)), ok
}

// Cancel implements winfast.Window over the foreign Policy.
func (f *foreign) Cancel(at, n int64) { f.p.Cancel(f.t(at), n) }

// Done implements winfast.Window over the foreign Policy.
func (f *foreign) Done(now, n int64) { f.p.Done(f.t(now), n) }

// DoneUsesTime implements winfast.Window over the foreign Policy.
func (f *foreign) DoneUsesTime() bool { return true } // unknown: pass the instant

// SetLimit implements winfast.Window over the foreign Policy.
func (f *foreign) SetLimit(now, n int64, per time.Duration) {
	f.p.SetLimit(f.t(now), Limit{N: n, Per: per})
}
