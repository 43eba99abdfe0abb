package window

import (
	"time"

	"github.com/ratesem/ratesem/internal/win"
)

// Limit is a rate limit of N units per Per: N calls per interval when every
// call has weight 1, or N weight units when calls carry weights (a Binance
// request of weight 20 spends 20 of its IP's 6000 units per minute).
//
//	type Limit struct {
//		N   int64         // units admitted per Per, ≥ 0
//		Per time.Duration // the length of the window, ≥ 0
//	}
//
// The zero Limit admits nothing but zero-weight calls. A Limit with N > 0
// and Per == 0 limits only how many units may be in flight at once (no rate).
// Negative fields are invalid; ParseLimit never returns them and the
// constructors in this package panic on them. Its String method formats it
// as ParseLimit reads it ("10/2s", "6000/1m").
type Limit = win.Limit

// ParseLimit parses a limit in the form people write in configuration files:
// a positive decimal count of units, a slash, and a positive Go duration,
// as in "10/2s", "6000/1m", "100/10s", "1/500ms" or "200000/24h". The
// duration may be a bare unit, so "10/s" means 10 per second. Surrounding
// white space is ignored.
//
// It returns an error that quotes the input and matches ratesem.ErrInvalidLimit
// (errors.Is) when the count is zero, negative, signed or not a number,
// when it overflows int64, when the duration is missing, not positive,
// lacks a unit or overflows time.Duration, or when the text is not of that
// form. ParseLimit(l.String()) == l for every Limit it returns.
func ParseLimit(s string) (Limit, error) { return win.ParseLimit(s) }

// Policy is the bookkeeping of one rate window: what a RateSemaphore
// (package github.com/ratesem/ratesem/semaphore, NewWithPolicy), a Limiter
// or a clientpool.Rule asks of it. Every constructor of this package returns
// one; implement it to bring a window of your own. It is pure state that
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

// Settler is implemented by every Policy of this package: it ends a call
// whose weight is known only after the call (an LLM API's tokens, read from
// the response's usage) with the weight it really had. A RateSemaphore
// (Begin, Call.End) and a clientpool.Pool settle through it; a Policy of
// your own that does not implement it cannot settle.
//
// Settle records that the call admitted at the instant at for n units (its
// estimate) ended at now, instead of Done(now, n), and that it really cost
// actual units (actual < 0 is taken as 0). Where actual < n the difference is
// refunded: taken back from the window wherever it still counts the call,
// exactly where Cancel(at, n−actual) would take it (a fixed window only while
// at's window is now's; a sliding log from the call's own entry; a bucket
// gets the tokens back, never beyond full; GCRA moves its theoretical arrival
// time back, never before now; the completion windows log actual units at
// the call's end instead of n). Where actual > n the difference is debited:
// counted at now, even beyond the limit.
//
// A debit saturates at "full until the window moves", so that no reply can
// hold a window for longer than about one Per, whatever actual it reports
// (2^62 tokens, a broken or hostile usage object): the counting windows
// count the whole debit (saturating only where int64 would wrap) and drop it
// when it leaves the window, after Per (2·Per for the sliding window
// counter); the buckets and GCRA go into debt by at most one Per's refill (N
// units) below empty. Below that cap the debt is exact, so a server that
// charges the estimate at a call's arrival and corrects it at the call's end
// (Anthropic's token buckets, OpenAI's tokens per minute) never holds more
// than the window does.
//
// Like Policy it is not safe for concurrent use; the same panics as Done
// apply to n (the completion window panics on more units than are in
// flight).
type Settler interface {
	Settle(now, at time.Time, n, actual int64)
}

// Reconciler is implemented by the windows that can take in what a server
// reports about its own count (a usage header such as Binance's
// X-MBX-USED-WEIGHT-1M or X-RateLimit-Remaining): package clientpool uses it
// to shrink the local budget when another client spends from the same limit.
// The completion, sliding log, fixed window, token bucket, leaky bucket and
// GCRA policies of this package implement it; the sliding window and
// sub-window counters do not. Like Policy, it is not safe for concurrent use.
type Reconciler interface {
	// Used returns the units the window counts against its limit at now.
	Used(now time.Time) int64
	// Consume counts n more units at now, as if a call of n units had
	// started (and, for the completion window, ended) at now, even beyond
	// the limit: the window then stays full until they leave it. A report
	// beyond the limit means "full until the window moves", never more: the
	// count saturates instead of wrapping, and the window recovers as it
	// would after a full window's worth of calls. n ≤ 0 changes nothing. It
	// never panics.
	Consume(now time.Time, n int64)
}
