package win

import (
	"fmt"
	"time"

	"github.com/ratesem/ratesem/internal/sat"
)

// GCRA is the generic cell rate algorithm, the token bucket kept as one
// instant: the theoretical arrival time (TAT) at which the bucket would be
// full again. Each unit moves the TAT on by the emission interval
// I = Per/N (rounded up to a whole nanosecond, which errs on the slow side);
// a call of n units is admitted at t when
//
//	max(TAT, t) + n·I − t ≤ Burst·I
//
// and then TAT = max(TAT, t) + n·I. It makes the token bucket's decisions
// (exactly, when N divides Per in nanoseconds) with one int64 of state, which
// is why Redis limiters such as go-redis/redis_rate use it.
//
// Exact guarantee (as the token bucket): at most Burst + N − 1 units start
// in any window of length Per; Burst = N admits 2N−1 across a refill.
//
// A GCRA made by NewPacer is the leaky bucket as a pacer instead: it admits a
// call only once the TAT has passed, so calls start at least n·I apart
// (after a call of n units the next waits n·I), with no burst. The zero GCRA
// is not usable; call NewGCRA or NewPacer. A GCRA is not safe for concurrent
// use (see Policy).
type GCRA struct {
	base
	limited
	burst    int64
	burstSet bool  // burst given to NewGCRA; else it follows N
	pacer    bool  // admit only when TAT ≤ t: no tolerance
	emit     int64 // I, ns per unit; 0 when Per is 0 (no rate)
	tat      int64 // offset of the theoretical arrival time
	admitted int64 // offset of the latest admission, for Cancel
	started  bool
}

// NewGCRA returns a GCRA limiter of l.N units per l.Per with bursts of up to
// burst units, idle (a full bucket). A burst of 0 means l.N (and then follows
// N through SetLimit). It panics if l.N, l.Per or burst is negative. With Per
// 0 there is no rate: every call of at most burst units is admitted; with N
// 0 and Per > 0 nothing is.
func NewGCRA(l Limit, burst int64) *GCRA {
	l.check("NewGCRA")
	if burst < 0 {
		panic(fmt.Sprintf("ratesem: NewGCRA: negative burst %d", burst))
	}
	g := &GCRA{limited: limited{l}, burst: burst, burstSet: burst > 0}
	g.setRate(l)
	return g
}

// NewPacer returns the leaky bucket as a pacer (a queue that leaks at a
// constant rate): calls start evenly spaced, one unit every Per/N, with no
// burst; a call of n units holds the next one back n·Per/N. A call arriving
// after an idle spell starts at once. This is uber-go/ratelimit without
// slack (ratelimit.WithoutSlack).
//
// Exact guarantee: with unit weights, at most N starts in any window of
// length Per; with weights up to w, at most N − 1 + w units. Its capacity is
// N: a heavier call is refused. It panics if l.N or l.Per is negative.
func NewPacer(l Limit) *GCRA {
	l.check("NewPacer")
	g := &GCRA{limited: limited{l}, pacer: true}
	g.setRate(l)
	return g
}

func (g *GCRA) setRate(l Limit) {
	g.limit = l
	if !g.burstSet {
		g.burst = l.N
	}
	g.emit = 0
	if l.Per > 0 && l.N > 0 {
		g.emit = ceilDiv(int64(l.Per), l.N) // not (Per+N−1)/N: that wraps near math.MaxInt64
	}
}

// Burst returns the most units admitted at once from idle: the burst for
// NewGCRA; for NewPacer, 1 unit (or one call of up to N units).
func (g *GCRA) Burst() int64 {
	if g.pacer {
		return min(1, g.limit.N)
	}
	return g.burst
}

// Capacity implements Policy: the burst for NewGCRA, N for NewPacer.
func (g *GCRA) Capacity() int64 {
	if g.pacer {
		return g.limit.N
	}
	return g.burst
}

// EmissionInterval returns I, the time each unit moves the TAT on: Per/N
// rounded up to a whole nanosecond; 0 when Per or N is 0.
func (g *GCRA) EmissionInterval() time.Duration { return time.Duration(g.emit) }

// SetLimit implements Policy: the debt (TAT − now) is kept in units, so the
// calls already admitted count against the new rate, but at most (Burst +
// N)·I of the new rate past now (N·I for a pacer), as the token bucket's
// SetLimit keeps at most N units of debt below empty. A burst left at 0 in
// NewGCRA follows the new N. It panics on a negative limit.
func (g *GCRA) SetLimit(now time.Time, l Limit) { g.setLimit(g.ns(now), l) }

func (g *GCRA) setLimit(now int64, l Limit) {
	l.check("GCRA.SetLimit")
	t := g.clampNs(now)
	old := g.emit
	g.setRate(l)
	if g.started && g.tat > t && old > 0 && g.emit > 0 {
		debt, _ := mulDiv(g.tat-t, g.emit, 0, old, true)
		g.tat = sat.Add(t, debt)
		// As the token bucket's SetLimit: a debt kept in units is at most
		// one Per at the new rate past a full bucket.
		g.tat = min(g.tat, max(g.debtCap(t), t))
	}
}

// debtCap is the latest TAT a debt may set at t: a full bucket plus one
// Per's emission (N·I), the token bucket's debt of N units below empty
// ("full until the window moves"); for a pacer, t + N·I.
func (g *GCRA) debtCap(t int64) int64 {
	u := g.limit.N
	if !g.pacer {
		u = sat.Add(g.burst, u)
	}
	return sat.Add(t, sat.Mul(u, g.emit))
}

// tolerance is how far ahead of t the TAT may be for n units to start.
func (g *GCRA) tolerance(n int64) int64 {
	if g.pacer {
		return 0
	}
	return sat.Mul(g.burst-n, g.emit)
}

// Admit implements Policy. A call of n units is admitted at now when the TAT
// is at most tolerance ahead of now. Otherwise the instant returned is when
// it will be; it is the zero time.Time when n exceeds the capacity or N is 0.
func (g *GCRA) Admit(now time.Time, n int64) (time.Time, bool) {
	t := g.ns(now)
	at, ok := g.admit(t, n)
	return timeOf(now, t, at), ok
}

func (g *GCRA) admit(now, n int64) (int64, bool) {
	if done, ok := trivial(n, g.Capacity(), g.limit.Per); done {
		return None, ok
	}
	if g.emit == 0 {
		return None, false
	}
	t := g.clampNs(now)
	if !g.started {
		g.tat, g.admitted, g.started = t, t, true
	}
	tol := g.tolerance(n)
	if g.tat-t <= tol {
		g.tat = sat.Add(max(g.tat, t), sat.Mul(n, g.emit))
		g.admitted = max(g.admitted, t)
		return None, true
	}
	return g.tat - tol, false
}

// Cancel implements Policy: the TAT moves back n·I when no admission came
// after at, which makes the state exactly as if that Admit had not happened
// (a TAT in the past means idle, whatever its value). After a later
// admission nothing is given back, on the safe side.
func (g *GCRA) Cancel(at time.Time, n int64) {
	if n > 0 && g.started { // else nothing to undo: at must not fix the epoch
		g.cancel(g.ns(at), n)
	}
}

func (g *GCRA) cancel(at, n int64) {
	if n <= 0 || !g.started || at < g.admitted {
		return
	}
	// The Admit being undone moved the TAT on from max(TAT, admitted), so
	// the TAT never goes back before admitted: a Cancel heavier than any
	// admission (a caller's bug) cannot push it towards MinInt64, where
	// TAT − now would wrap.
	g.tat = max(g.tat-sat.Mul(n, g.emit), g.admitted)
}

// Done implements Policy. It does nothing: GCRA counts starts only.
func (g *GCRA) Done(time.Time, int64) {}
func (g *GCRA) done(int64, int64)     {}
