package window

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
// ended at the same instant share one log entry, so memory is at most one
// 16-byte entry per distinct completion instant within the last Per.
//
// The zero Completion is not usable; call NewCompletion. A Completion is not
// safe for concurrent use (see Policy).
type Completion struct {
	limit    Limit
	inflight int64 // units admitted and not yet Done
	log      stamps
}

// NewCompletion returns a completion window for l with nothing in flight and
// an empty log. It panics if l.N or l.Per is negative.
func NewCompletion(l Limit) *Completion {
	l.check("NewCompletion")
	return &Completion{limit: l}
}

// Limit returns the limit the window enforces.
func (c *Completion) Limit() Limit { return c.limit }

// Capacity implements Policy: it returns N.
func (c *Completion) Capacity() int64 { return c.limit.N }

// SetLimit replaces the limit at the instant now, keeping the units in flight
// and the completions still inside the old window at now: they count against
// the new N at once, and against the new Per from their end. Completions that
// left the old window stay gone. With Per 0 nothing is logged, so a switch
// from Per 0 to a positive Per starts with an empty log (units in flight
// still count). It panics on a negative limit.
func (c *Completion) SetLimit(now time.Time, l Limit) {
	l.check("Completion.SetLimit")
	c.log.expire(c.log.clamp(now) - int64(c.limit.Per))
	c.limit = l
}

// InFlight returns the units admitted and not yet Done.
func (c *Completion) InFlight() int64 { return c.inflight }

// free is a lower bound of the units admissible now: expired log entries are
// dropped lazily, so they may still be counted here.
func (c *Completion) free() int64 { return c.limit.N - c.inflight - c.log.units }

// AdmitCached implements Policy.
func (c *Completion) AdmitCached(n int64) bool {
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
	if n < 0 {
		return time.Time{}, false
	}
	if c.AdmitCached(n) {
		return time.Time{}, true
	}
	per := int64(c.limit.Per)
	c.log.expire(c.log.clamp(now) - per)
	if c.AdmitCached(n) {
		return time.Time{}, true
	}
	if n > c.limit.N-c.inflight {
		return time.Time{}, false
	}
	// n − free units must leave the log; the last of them ends at stampOf.
	return c.log.instant(sat.Add(c.log.stampOf(n-c.free()), per)), false
}

// Cancel implements Policy: the n units go back without a completion stamp,
// since the call never reached the server.
func (c *Completion) Cancel(_ time.Time, n int64) {
	c.release(n, "Cancel")
}

// Done implements Policy: n units leave flight and are logged as ended at
// now. It panics if more units are Done than are in flight.
func (c *Completion) Done(now time.Time, n int64) {
	c.release(n, "Done")
	if per := int64(c.limit.Per); per > 0 {
		at := c.log.clamp(now)
		c.log.expire(at - per)
		c.log.push(at, n)
	}
}

func (c *Completion) release(n int64, what string) {
	if n < 0 || n > c.inflight {
		panic(fmt.Sprintf("ratesem: Completion.%s(%d) with %d units in flight", what, n, c.inflight))
	}
	c.inflight -= n
}

// DoneUsesTime implements Policy: the completion instant is the whole point.
func (c *Completion) DoneUsesTime() bool { return true }
