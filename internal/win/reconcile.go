package win

import (
	"time"

	"github.com/ratesem/ratesem/internal/sat"
)

// The completion, sliding log, fixed window, token bucket, leaky bucket and
// GCRA windows of this package implement window.Reconciler, which documents
// Used and Consume (window/policy.go asserts it).

// Used implements window.Reconciler: units in flight plus units of calls that ended
// in (now−Per, now].
func (c *Completion) Used(now time.Time) int64 {
	c.log.expire(c.log.clamp(now) - int64(c.limit.Per))
	return c.inflight + c.log.units
}

// Consume implements window.Reconciler: n units logged as ended at now, but at
// most N at one instant (n ≥ N keeps the window full for Per from now) and
// never so many that the count would pass math.MaxInt64.
func (c *Completion) Consume(now time.Time, n int64) {
	if per := int64(c.limit.Per); per > 0 && n > 0 {
		at := c.log.clamp(now)
		c.log.expire(at - per)
		c.log.pushReport(at, n, c.limit.N, c.inflight)
	}
}

// Used implements window.Reconciler: units recorded in (now−Per, now].
func (w *SlidingLog) Used(now time.Time) int64 {
	w.log.expire(w.log.clamp(now) - int64(w.limit.Per))
	return w.log.units
}

// Consume implements window.Reconciler: n units recorded as started at now (plus
// the margin), but at most N at one instant (n ≥ N keeps the window full
// for Per + Margin from now) and never so many that the count would pass
// math.MaxInt64.
func (w *SlidingLog) Consume(now time.Time, n int64) {
	if w.limit.Per > 0 && n > 0 {
		at := w.log.clamp(now)
		w.log.expire(at - int64(w.limit.Per))
		w.log.pushReport(sat.Add(at, w.margin), n, w.limit.N, 0)
	}
}

// Used implements window.Reconciler: units counted in now's window.
func (w *FixedWindow) Used(now time.Time) int64 {
	if w.limit.Per == 0 {
		return 0
	}
	w.roll(now.UnixNano())
	return w.used
}

// Consume implements window.Reconciler: n more units in now's window, the count
// stopping at N (the window is then full until the next one begins) or
// where it already is if above.
func (w *FixedWindow) Consume(now time.Time, n int64) {
	if w.limit.Per > 0 && n > 0 {
		w.Used(now)
		before := w.used
		if n <= w.limit.N-w.used { // w.used ≤ N here: no overflow
			w.used += n
		} else {
			w.used = max(w.used, w.limit.N)
		}
		w.taken += w.used - before // ≤ N per call, and reset with the window
		if w.carry {
			// For the usage reports that follow (report): a count of the
			// whole window, every call of it counted, so that a report of
			// a lower count, earlier at the server, never gives these back.
			w.floor = max(w.floor, w.taken)
		}
	}
}

// Used implements window.Reconciler: the units missing from the bucket at now
// (burst − tokens).
func (b *TokenBucket) Used(now time.Time) int64 {
	if b.limit.Per == 0 {
		return 0
	}
	b.refill(now)
	return b.burst - b.tokens
}

// Consume implements window.Reconciler: n units taken from the bucket at now,
// below empty if need be (the refill pays the debt first), but never deeper
// than N units of debt: a report of any size beyond the bucket leaves it
// refusing for one whole Per, "full until the window moves", and never
// wraps. A bucket already deeper in debt (SetLimit lowered its burst) stays
// as it is. n ≤ 0 changes nothing.
func (b *TokenBucket) Consume(now time.Time, n int64) {
	if b.limit.Per > 0 && n > 0 {
		b.refill(now)
		// A report beyond the bucket goes into debt, but at most one Per's
		// refill deep (N units): "full until the window moves", as the
		// other windows, and burst − tokens still fits an int64.
		b.debit(n)
	}
}

// Used implements window.Reconciler: the units the TAT is ahead of now, rounded up.
func (g *GCRA) Used(now time.Time) int64 {
	if g.emit == 0 || !g.started {
		return 0
	}
	t := g.clamp(now)
	if g.tat <= t {
		return 0
	}
	return ceilDiv(g.tat-t, g.emit)
}

// Consume implements window.Reconciler: the TAT moves on n·I from now at least,
// but not beyond now + Capacity·I (a full bucket), unless it already is.
func (g *GCRA) Consume(now time.Time, n int64) {
	if g.emit == 0 || n <= 0 {
		return
	}
	t := g.clamp(now)
	if !g.started {
		g.tat, g.admitted, g.started = t, t, true
	}
	full := sat.Add(t, sat.Mul(g.Capacity(), g.emit))
	g.tat = max(g.tat, min(sat.Add(max(g.tat, t), sat.Mul(n, g.emit)), full))
}
