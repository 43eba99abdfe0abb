package win

import (
	"time"

	"github.com/ratesem/ratesem/internal/sat"
)

// Every window of this package implements window.Settler (window/policy.go
// asserts it): Settle ends a call whose weight is known only after the call
// (an LLM API's tokens, read from the response's usage) with the weight it
// really had.
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
// (2^62 tokens, a broken or hostile usage object):
//
//   - The counting windows (completion, sliding log, fixed, sliding and
//     sub-window counters) count the whole debit, saturating only where
//     int64 would wrap: a debit leaves them with the entry or the window it
//     was counted in, after Per (the sliding window counter weighs its
//     previous window in, so after at most 2·Per), however large it is. So
//     a refund of another call later cannot bring the count below the
//     truth while the debit is in the window.
//   - The token and leaky buckets go into debt by the debit, but at most
//     one Per's refill (N units) below empty, as window.Reconciler.Consume; GCRA
//     likewise moves its TAT at most (Burst + N)·I past now (N·I for a
//     pacer). The wait a debit causes is then at most about one Per plus
//     the call's own refill time (n·Per/N), never the 292 years a debit of
//     2^62 tokens would take to refill. Below that cap the debt is exact.
//
// So the window's record is the record of every call at its settled
// weight, with a debit counted from the moment it is known, as long as the
// debit stays below the cap: a server that charges the estimate at a call's
// arrival and corrects it at the call's end (Anthropic's token buckets,
// OpenAI's tokens per minute) never holds more than the window does.
//
// Like Policy, Settle is not safe for concurrent use; the same panics as Done
// apply to n (the completion window panics on more units than are in
// flight).

// Settle implements window.Settler: n units leave flight at now and actual units
// are logged as ended at now (at is not needed: the call counts from its
// end).
func (c *Completion) Settle(now, _ time.Time, n, actual int64) {
	actual = max(actual, 0)
	c.Done(now, n)
	switch {
	case c.limit.Per <= 0:
	case actual < n:
		// The units just logged carry the latest stamp: take the refund
		// from there (entries at the same stamp are alike).
		c.log.remove(c.log.clamp(now), n-actual)
	case actual > n:
		c.log.pushSat(c.log.clamp(now), actual-n, c.inflight)
	}
}

// Settle implements window.Settler: a refund comes out of the call's own entry
// (if it is still in the window), a debit is logged at now.
func (w *SlidingLog) Settle(now, at time.Time, n, actual int64) {
	switch actual = max(actual, 0); {
	case w.limit.Per == 0:
	case actual < n:
		w.Cancel(at, n-actual)
	case actual > n:
		t := w.log.clamp(now)
		w.log.expire(t - int64(w.limit.Per))
		w.log.pushSat(sat.Add(t, w.margin), actual-n, 0)
	}
}

// Settle implements window.Settler. A fixed window refunds only while at's window
// is now's; a fixed completion window (NewFixedCompletion), which carries a
// call in flight into every window it touches, refunds from now's window,
// where the call is still counted. A debit counts in now's window.
func (w *FixedWindow) Settle(now, at time.Time, n, actual int64) {
	actual = max(actual, 0)
	w.Done(now, n)
	if actual == n || w.limit.Per == 0 {
		return
	}
	w.roll(now.UnixNano())
	if actual > n {
		w.used = sat.Add(w.used, actual-n)
	} else if w.carry || floorDiv(at.UnixNano(), int64(w.limit.Per)) == w.win {
		w.used -= min(n-actual, w.used)
	}
}

// Settle implements window.Settler: a refund comes out of at's window when it is
// the current or the previous one, a debit counts in now's window.
func (w *SlidingWindowCounter) Settle(now, at time.Time, n, actual int64) {
	switch actual = max(actual, 0); {
	case actual < n:
		w.cancel(at.UnixNano(), n-actual)
	case actual > n && w.limit.Per > 0:
		w.roll(floorDiv(now.UnixNano(), int64(w.limit.Per)))
		w.cur = sat.Add(w.cur, actual-n)
	}
}

// Settle implements window.Settler: a refund comes out of at's block while it is
// in the window, a debit counts in now's block.
func (w *SubWindowCounter) Settle(now, at time.Time, n, actual int64) {
	switch actual = max(actual, 0); {
	case actual < n:
		w.cancel(at.UnixNano(), n-actual)
	case actual > n && w.limit.Per > 0:
		w.roll(floorDiv(now.UnixNano(), w.size))
		sum := sat.Add(w.sum, actual-n)
		w.counts[w.slot(w.cur)] += sum - w.sum // ≤ sum: no wrap
		w.sum = sum
	}
}

// Settle implements window.Settler: a refund puts tokens back, at most up to the
// burst, even after later admissions (tokens are alike); a debit takes
// tokens out at now, into debt if need be, but, as Consume, never more than
// N units (one Per's refill) below empty: "full until the window moves". A
// bucket already deeper in debt stays as it is.
func (b *TokenBucket) Settle(now, _ time.Time, n, actual int64) {
	if actual = max(actual, 0); b.limit.Per == 0 || actual == n {
		return
	}
	b.refill(now)
	if actual < n {
		b.give(n - actual)
	} else {
		b.debit(actual - n)
	}
}

// Settle implements window.Settler: a refund moves the theoretical arrival time back
// by the refund's emission intervals, never before now (a full bucket); a
// debit moves it on by the debit's emission intervals (from now when the
// bucket is full), but never beyond now + (Burst + N)·I (now + N·I for a
// pacer): the token bucket's debt of at most N units below empty, "full
// until the window moves". A TAT already beyond stays as it is.
func (g *GCRA) Settle(now, _ time.Time, n, actual int64) {
	if actual = max(actual, 0); g.emit == 0 || !g.started || actual == n {
		return
	}
	t := g.clamp(now)
	if actual > n {
		g.tat = max(g.tat, min(sat.Add(max(g.tat, t), sat.Mul(actual-n, g.emit)), g.debtCap(t)))
	} else if g.tat > t {
		g.tat = max(sat.Sub(g.tat, sat.Mul(n-actual, g.emit)), t)
	}
}
