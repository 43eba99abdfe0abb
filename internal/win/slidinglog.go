package win

import (
	"fmt"
	"time"

	"github.com/ratesem/ratesem/internal/sat"
)

// SlidingLog is the start window with a margin: a sliding log of start
// instants, each recorded as start + Margin (articles on client-side rate
// limits call the margin buffer time). A call may start at t once the units
// recorded after t − Per leave room for it, so at every instant t
//
//	units of calls that started in (t − Per − Margin, t] ≤ N:
//
// call k+N starts at least Per + Margin after call k. It ignores how long
// calls take, so it reaches about N/(Per+Margin) rather than the completion
// window's N/(Per + latency). A server that counts arrivals sees at most N in
// any window of Per as long as the spread of one-way latency (jitter) is at
// most Margin; with more jitter it may reject. It limits nothing about calls
// in flight; a RateSemaphore adds its concurrency cap for that.
//
// Memory: 112 bytes plus one 16-byte entry per distinct start instant within
// the last Per + Margin. The zero SlidingLog is not usable; call NewSlidingLog.
// A SlidingLog is not safe for concurrent use (see Policy).
type SlidingLog struct {
	limited
	margin int64 // nanoseconds
	log    stamps
}

// NewSlidingLog returns a start window for l whose starts are recorded margin
// late. It panics if l.N, l.Per or margin is negative.
func NewSlidingLog(l Limit, margin time.Duration) *SlidingLog {
	l.check("NewSlidingLog")
	if margin < 0 {
		panic(fmt.Sprintf("ratesem: NewSlidingLog: negative margin %v", margin))
	}
	return &SlidingLog{limited: limited{l}, margin: int64(margin)}
}

// Margin returns the margin added to every recorded start.
func (w *SlidingLog) Margin() time.Duration { return time.Duration(w.margin) }

// SetLimit replaces the limit at the instant now, keeping the starts still
// inside the old window at now: they count against the new N at once, and
// against the new Per from their recorded start. With Per 0 nothing is
// recorded, so a switch from Per 0 to a positive Per starts with an empty
// log. It panics on a negative limit.
func (w *SlidingLog) SetLimit(now time.Time, l Limit) { w.setLimit(w.log.ns(now), l) }

func (w *SlidingLog) setLimit(now int64, l Limit) {
	l.check("SlidingLog.SetLimit")
	w.log.expire(w.log.clampNs(now) - int64(w.limit.Per))
	w.limit = l
}

// Admit implements Policy. A call of n units is admitted at now when
// n ≤ N − units recorded in (now−Per, now], and is then recorded at
// now + Margin. Otherwise the instant returned is when enough recorded starts
// reach start + Margin + Per; it is the zero time.Time when n > N. With
// Per == 0 there is no rate: every call of at most N units is admitted and
// nothing is recorded.
func (w *SlidingLog) Admit(now time.Time, n int64) (time.Time, bool) {
	t := w.log.ns(now)
	at, ok := w.admit(t, n)
	return timeOf(now, t, at), ok
}

func (w *SlidingLog) start(e time.Time) time.Time { return w.log.start(e) }
func (w *SlidingLog) ns(t time.Time) int64        { return w.log.ns(t) }

func (w *SlidingLog) admit(now, n int64) (int64, bool) {
	if done, ok := trivial(n, w.limit.N, w.limit.Per); done {
		return None, ok
	}
	per := int64(w.limit.Per)
	at := w.log.clampNs(now)
	w.log.expire(at - per)
	free := w.limit.N - w.log.units
	if n <= free {
		w.log.push(sat.Add(at, w.margin), n)
		return None, true
	}
	return sat.Add(w.log.stampOf(n-free), per), false
}

// Cancel implements Policy: it erases the n units recorded for an Admit at
// the instant at (or, if that Admit's start was raised to a later recorded
// one, n units recorded between the two, which errs on the safe side).
func (w *SlidingLog) Cancel(at time.Time, n int64) {
	if n > 0 { // else nothing to undo: at must not fix the epoch
		w.cancel(w.log.ns(at), n)
	}
}

func (w *SlidingLog) cancel(at, n int64) {
	if n <= 0 {
		return
	}
	from := sat.Add(at, w.margin)
	if w.log.seen && from <= w.log.latest-int64(w.limit.Per) {
		return // its record has left the window already: nothing of it to erase
	}
	w.log.remove(from, n)
}

// Done implements Policy. It does nothing: the window counts starts only.
func (w *SlidingLog) Done(time.Time, int64) {}
func (w *SlidingLog) done(int64, int64)     {}
