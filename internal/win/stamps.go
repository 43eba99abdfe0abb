package win

import (
	"math"
	"time"
)

// entry is n units stamped at the instant at, in nanoseconds since the
// queue's epoch.
type entry struct {
	at int64
	n  int64
}

// stamps is a FIFO of time-stamped units in non-decreasing stamp order: the
// log of a sliding window. Units with equal stamps share one entry, so its
// length is at most the number of distinct instants that still count,
// never more than the limit's N. It is a ring buffer that grows by doubling
// and never shrinks, so a steady state allocates nothing.
//
// Instants are stored as int64 nanoseconds since epoch, the first instant
// the queue saw; time.Time.Sub on two monotonic readings is a subtraction.
type stamps struct {
	base
	buf   []entry
	head  int
	len   int
	units int64 // sum of n over the entries
}

// base converts instants to int64 nanoseconds since an epoch, the first
// instant it saw, so that the windows do integer arithmetic on time: on two
// monotonic readings time.Time.Sub is a subtraction.
type base struct {
	epoch    time.Time
	hasEpoch bool
	seen     bool  // clamp has been called: latest is set
	latest   int64 // the latest offset clamp has returned
}

// ns converts t to nanoseconds since the epoch, fixing the epoch at the
// first call.
func (b *base) ns(t time.Time) int64 { return int64(t.Sub(b.start(t))) }

// start is Window.Start: it fixes the epoch at e unless one is set
// and returns the epoch in use.
func (b *base) start(e time.Time) time.Time {
	if !b.hasEpoch {
		b.epoch, b.hasEpoch = e, true
	}
	return b.epoch
}

// clamp is ns for an instant that moves the window on: an instant earlier
// than the latest one seen is taken as that latest one (the Policy contract),
// so instants that reach a window slightly out of order (callers that read
// the clock before taking a lock) never make it forget what it counted.
func (b *base) clamp(t time.Time) int64 { return b.clampNs(b.ns(t)) }

// clampNs is clamp for an instant already in nanoseconds since the epoch.
// The first instant it sees is taken as it is, even if earlier than the
// epoch: the epoch is only an origin (a call refused before the window read
// the time, or the engine's construction, may have set it), never an
// instant seen.
func (b *base) clampNs(off int64) int64 {
	if off > b.latest || !b.seen {
		b.latest, b.seen = off, true
	}
	return b.latest
}

func (q *stamps) at(i int) *entry {
	return &q.buf[(q.head+i)&(len(q.buf)-1)]
}

// push appends n units stamped at. A stamp earlier than the newest one is
// raised to it: the window then counts those units a little longer, which
// errs on the safe side and keeps the queue sorted.
func (q *stamps) push(at, n int64) {
	if n == 0 {
		return
	}
	q.units += n
	if q.len > 0 {
		tail := q.at(q.len - 1)
		if at <= tail.at {
			tail.n += n
			return
		}
	}
	if q.len == len(q.buf) {
		q.grow()
	}
	*q.at(q.len) = entry{at: at, n: n}
	q.len++
}

// pushReport pushes the units of a server's report (window.Reconciler.Consume): at
// most n0 of them (a report beyond the limit means a full window from at,
// no more), fewer if units stamped at or after at already reach n0, and
// never so many that q.units + extra (extra ≥ 0: units in flight) would
// pass math.MaxInt64.
func (q *stamps) pushReport(at, n, n0, extra int64) {
	k := min(n, n0)
	if q.len > 0 {
		if tail := q.at(q.len - 1); tail.at >= at {
			k = min(k, n0-tail.n)
		}
	}
	q.pushSat(at, k, extra)
}

// pushSat pushes n units stamped at, fewer only where q.units + extra
// (extra ≥ 0: units in flight) would pass math.MaxInt64.
func (q *stamps) pushSat(at, n, extra int64) {
	if k := min(n, math.MaxInt64-extra-q.units); k > 0 {
		q.push(at, k)
	}
}

func (q *stamps) grow() {
	buf := make([]entry, max(2*len(q.buf), 8))
	for i := 0; i < q.len; i++ {
		buf[i] = *q.at(i)
	}
	q.buf, q.head = buf, 0
}

// expire drops the entries stamped at or before cutoff.
func (q *stamps) expire(cutoff int64) {
	for q.len > 0 {
		e := q.at(0)
		if e.at > cutoff {
			return
		}
		q.units -= e.n
		q.head = (q.head + 1) & (len(q.buf) - 1)
		q.len--
	}
}

// stampOf returns the stamp of the k-th oldest unit, 1 ≤ k ≤ q.units: once
// that stamp has expired, k units have left the window.
func (q *stamps) stampOf(k int64) int64 {
	for i := 0; i < q.len; i++ {
		e := q.at(i)
		if k <= e.n {
			return e.at
		}
		k -= e.n
	}
	panic("ratesem: internal error: stampOf beyond the queue")
}

// remove takes n units out of the queue for a call recorded at a stamp of at
// least from: the oldest such units first. The call's own units were pushed
// at from, or raised to a later tail stamp, so units stamped between from and
// them come out instead of them: the queue then holds later stamps than the
// truth, which errs on the safe side. Units already expired are not there to
// remove. An emptied entry stays until it expires; it holds no units, so it
// changes no decision.
func (q *stamps) remove(from, n int64) {
	i := q.len
	for i > 0 && q.at(i-1).at >= from {
		i--
	}
	for ; i < q.len && n > 0; i++ {
		e := q.at(i)
		k := min(n, e.n)
		e.n -= k
		q.units -= k
		n -= k
	}
}
