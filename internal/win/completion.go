package win

import (
	"fmt"
	"time"

	"github.com/ratesem/ratesem/internal/sat"
)

// Completion is the completion window, the OKEx scheme: a call's units count
// against the limit from the moment it is admitted until Per after it ended.
// At every instant t it keeps
//
//	units in flight at t + units of calls that ended in (t−Per, t] ≤ N.
//
// Think of a ring of N completion timestamps: a new call takes the oldest
// completed slot and may start once that slot's end + Per has passed. Because
// the clock starts at completion, a server that counts arrivals sees at most
// N in any window of length Per, whatever the network latency: each arrival
// lies between its call's start and end. The price is throughput of about
// N/(Per + latency) rather than N/Per.
//
// Weights are units: a call of weight w takes w slots. Units of calls that
// ended at the same instant share one log entry, so memory is 112 bytes plus at
// most one 16-byte entry per distinct completion instant within the last Per,
// never more than N. Past 1024 entries (16 KiB), units of calls that ended
// within the same 1.024 µs share one entry stamped with the latest of their
// ends: they count up to 1.024 µs longer than they must (never less), and the
// log stays within one entry per 1.024 µs of Per. A window of N < 1024 never
// gets there and is exact to the nanosecond.
//
// The zero Completion is not usable; call NewCompletion. A Completion is not
// safe for concurrent use (see Policy).
type Completion struct {
	limited
	inflight int64 // units admitted and not yet Done
	log      stamps
}

// NewCompletion returns a completion window for l with nothing in flight and
// an empty log. It panics if l.N or l.Per is negative.
func NewCompletion(l Limit) *Completion {
	l.check("NewCompletion")
	return &Completion{limited: limited{l}}
}

// SetLimit replaces the limit at the instant now, keeping the units in flight
// and the completions still inside the old window at now: they count against
// the new N at once, and against the new Per from their end. Completions that
// left the old window stay gone. With Per 0 nothing is logged, so a switch
// from Per 0 to a positive Per starts with an empty log (units in flight
// still count). It panics on a negative limit.
func (c *Completion) SetLimit(now time.Time, l Limit) { c.setLimit(c.log.ns(now), l) }

func (c *Completion) setLimit(now int64, l Limit) {
	l.check("Completion.SetLimit")
	c.log.expire(c.log.clampNs(now) - int64(c.limit.Per))
	c.limit = l
}

// free is a lower bound of the units admissible now: expired log entries are
// dropped lazily, so they may still be counted here.
func (c *Completion) free() int64 { return c.limit.N - c.inflight - c.log.units }

// admitCached is Window.AdmitCached.
func (c *Completion) admitCached(n int64) bool {
	if n == 0 || n > 0 && n <= c.free() {
		c.inflight += n
		return true
	}
	return false
}

// Admit implements Policy. A call of n units is admitted at now when
// n ≤ N − in flight − units that ended in (now−Per, now]. Otherwise the
// instant returned is when enough of those completions reach end + Per; it is
// the zero time.Time when n > N − in flight, since then only a Done can help.
func (c *Completion) Admit(now time.Time, n int64) (time.Time, bool) {
	t := c.log.ns(now)
	at, ok := c.admit(t, n)
	return timeOf(now, t, at), ok
}

func (c *Completion) admit(now, n int64) (int64, bool) {
	if n < 0 {
		return None, false
	}
	if c.admitCached(n) {
		return None, true
	}
	per := int64(c.limit.Per)
	c.log.expire(c.log.clampNs(now) - per)
	if c.admitCached(n) {
		return None, true
	}
	if n > c.limit.N-c.inflight {
		return None, false
	}
	// n − free units must leave the log; the last of them ends at stampOf.
	return sat.Add(c.log.stampOf(n-c.free()), per), false
}

// Cancel implements Policy: the n units go back without a completion stamp,
// since the call never reached the server.
func (c *Completion) Cancel(_ time.Time, n int64) { c.release(n, "Cancel") }

// Done implements Policy: n units leave flight and are logged as ended at
// now. It panics if more units are Done than are in flight.
func (c *Completion) Done(now time.Time, n int64) { (*fastCompletion)(c).Done(c.log.ns(now), n) }

func (c *Completion) release(n int64, what string) {
	if n < 0 || n > c.inflight {
		c.overRelease(n, what)
	}
	c.inflight -= n
}

// overRelease panics for a Done or Cancel of n units that are not in
// flight. It is out of line so that release stays small enough to inline.
func (c *Completion) overRelease(n int64, what string) {
	panic(fmt.Sprintf("ratesem: Completion.%s(%d) with %d units in flight", what, n, c.inflight))
}

// fastCompletion is the engine's form of a Completion (Window).
type fastCompletion Completion

func (f *fastCompletion) c() *Completion { return (*Completion)(f) }

// Start implements Window (the engine's form of the window).
func (f *fastCompletion) Start(e time.Time) time.Time { return f.log.start(e) }

// AdmitCached implements Window (the engine's form of the window).
func (f *fastCompletion) AdmitCached(n int64) bool { return f.c().admitCached(n) }

// Admit implements Window (the engine's form of the window).
func (f *fastCompletion) Admit(now, n int64) (int64, bool) { return f.c().admit(now, n) }

// Cancel implements Window (the engine's form of the window).
func (f *fastCompletion) Cancel(_, n int64) { f.c().release(n, "Cancel") }

// DoneUsesTime implements Window (the engine's form of the window).
func (f *fastCompletion) DoneUsesTime() bool { return true } // the completion instant is the whole point

// SetLimit implements Window (the engine's form of the window).
func (f *fastCompletion) SetLimit(now, n int64, per time.Duration) {
	f.c().setLimit(now, Limit{N: n, Per: per})
}

// Done is the engine's fast path, once per admitted call: Completion.Done
// at now in nanoseconds since the epoch. It makes no call on its common
// path (push's common case, a stamp later than the newest and room in the
// ring, is written out here).
func (f *fastCompletion) Done(now, n int64) {
	if n < 0 || n > f.inflight {
		f.c().overRelease(n, "Done")
	}
	f.inflight -= n
	per := int64(f.limit.Per)
	if per <= 0 {
		return
	}
	q := &f.log
	at := q.clampNs(now)
	q.expire(at - per)
	if n > 0 && q.len > 0 {
		mask := len(q.buf) - 1
		tail := &q.buf[(q.head+q.len-1)&mask]
		if q.len >= coalesceMin && at>>coalesceShift == tail.at>>coalesceShift { // at ≥ tail.at: at is clamped
			tail.at = max(tail.at, at)
			tail.n += n
			q.units += n
			return
		}
		if q.len <= mask {
			q.buf[(q.head+q.len)&mask] = entry{at: at, n: n}
			q.len++
			q.units += n
			return
		}
	}
	q.push(at, n)
}

// A log of coalesceMin entries or more (16 KiB) is kept in slots of
// 2^coalesceShift ns = 1.024 µs, aligned to the window's epoch: a completion
// in the same slot as the newest entry joins it and moves its stamp on to
// the later end, so those units count at most 1.024 µs longer than they
// must (never less: the window stays safe), and the log holds at most one
// entry per slot of the last Per, which keeps it in cache at millions of
// calls per second (benchmarks/README.md, "Hot path vs the floor"). A
// shorter log, and so any window of N < coalesceMin, is exact: one entry
// per distinct completion instant.
const (
	coalesceMin   = 1024
	coalesceShift = 10
)
