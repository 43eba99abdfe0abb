package win

import (
	"time"

	"github.com/ratesem/ratesem/internal/sat"
)

// FixedWindow is the fixed window counter: time is cut into windows of Per
// aligned to the Unix epoch (a 1-minute window starts at every full minute
// UTC, a 24-hour window at midnight UTC, as Binance counts its
// REQUEST_WEIGHT and ORDERS limits), and at most N units may start in each.
// The count resets at each boundary.
//
// Exact guarantee: at most N units start in every aligned window, but up to
// 2N in a window of length Per that straddles a boundary (N at the end of
// one window, N at the start of the next). It counts starts at the client: a
// server that counts arrivals in the same aligned windows may see a call
// started just before a boundary arrive just after it, so the client's N per
// window is not the server's unless the latency never crosses a boundary.
// Pair it with a concurrency cap, or pick the completion window, when the
// server must never see more than N.
//
// NewFixedCompletion makes the variant that holds at the server whatever the
// latency: a call counts in every aligned window from its start to its end.
//
// Memory: 96 bytes, whatever N. The zero FixedWindow is not usable; call
// NewFixedWindow or NewFixedCompletion. A FixedWindow is not safe for
// concurrent use (see Policy).
type FixedWindow struct {
	unix
	limited
	win      int64 // index of the current window: floor(Unix ns / Per)
	used     int64 // units counted in window win
	inflight int64 // units admitted and not yet Done; counted only with carry
	carry    bool  // NewFixedCompletion: calls in flight count in every window they touch
	// With carry, for usage reports (Mark): the units of the calls
	// that ended in window win, and the units Consume added in it.
	ended, taken int64
	// With carry, for usage reports (Report) in window win: the
	// highest count a server reported for a call (marked), the most units
	// of this window's calls that report showed the server had counted,
	// and the units of the calls whose reports were taken in; floor, the
	// units from elsewhere a count with no call at hand (or Consume)
	// showed, which a give-back never goes below.
	top, known, reported, floor int64
}

// NewFixedWindow returns a fixed window counter for l with nothing counted.
// Its windows are aligned to the Unix epoch, so the instants passed to it
// must carry the wall clock (time.Now does; so does a clock.Mock). It panics
// if l.N or l.Per is negative. With Per 0 there is no rate: every call of at
// most N units is admitted and nothing is counted.
func NewFixedWindow(l Limit) *FixedWindow {
	l.check("NewFixedWindow")
	return &FixedWindow{limited: limited{l}}
}

// NewFixedCompletion returns a fixed window counter for l in which a call
// counts in every aligned window its [start, end] touches: it counts in its
// start's window, and calls still in flight when a new window begins are
// counted in that window too, as is a call that ends in it. Since a call
// reaches the server between its start and its end, a server that counts
// arrivals in the same aligned windows (Binance) never sees more than N in
// one of them, whatever the latency — the completion window's idea applied
// to fixed windows. The price: a call that straddles a boundary spends from
// both windows. The caller must report every end with Done (a RateSemaphore
// and a clientpool.Pool do). It panics if l.N or l.Per is negative.
func NewFixedCompletion(l Limit) *FixedWindow {
	w := NewFixedWindow(l)
	w.carry = true
	return w
}

// roll moves the count on to the window containing the Unix instant t: a new
// window starts with the units in flight (with carry) or with none. With
// Per 0 (no windows) it does nothing.
func (w *FixedWindow) roll(t int64) {
	if w.limit.Per == 0 {
		return
	}
	if idx := floorDiv(t, int64(w.limit.Per)); idx > w.win {
		w.win, w.used, w.ended, w.taken = idx, 0, 0, 0
		w.top, w.known, w.reported, w.floor = 0, 0, 0, 0
		if w.carry {
			w.used = w.inflight
		}
	}
}

// SetLimit implements Policy. Units already counted in the window current at
// now stay counted against the new N, in the new window containing now. It
// panics on a negative limit.
func (w *FixedWindow) SetLimit(now time.Time, l Limit) { w.setLimit(w.ns(now), l) }

func (w *FixedWindow) setLimit(t int64, l Limit) {
	l.check("FixedWindow.SetLimit")
	w.roll(t) // the count of the window current at now, not an earlier one's
	w.limit = l
	if l.Per > 0 {
		w.win = floorDiv(t, int64(l.Per))
	}
}

// Admit implements Policy. A call of n units is admitted at now when the
// units counted in now's window plus n are at most N. Otherwise the instant
// returned is the start of the next window; it is the zero time.Time when n
// exceeds N.
func (w *FixedWindow) Admit(now time.Time, n int64) (time.Time, bool) {
	t := w.ns(now)
	at, ok := w.admit(t, n)
	return timeOf(now, t, at), ok
}

// admit decides at the Unix instant t (nanoseconds) and returns the Unix
// instant at which the call could start, or None.
func (w *FixedWindow) admit(t, n int64) (at int64, ok bool) {
	if done, ok := trivial(n, w.limit.N, w.limit.Per); done {
		return None, ok
	}
	per := int64(w.limit.Per)
	w.roll(t)
	if n <= w.limit.N-w.used { // not used+n ≤ N: that wraps for a used near math.MaxInt64
		w.used += n
		if w.carry {
			w.inflight += n
		}
		return None, true
	}
	if w.carry && n > w.limit.N-w.inflight {
		return None, false // the next window starts with the calls in flight
	}
	// The next window starts at (win+1)·per, saturating rather than wrap.
	return sat.Add(w.win*per, per), false
}

// Cancel implements Policy: the n units come off the count if the window of
// at is still the current one (otherwise the count has reset already), and
// off flight.
func (w *FixedWindow) Cancel(at time.Time, n int64) { w.cancel(w.ns(at), n) }

func (w *FixedWindow) cancel(at, n int64) {
	if n <= 0 {
		return
	}
	if w.carry {
		w.inflight -= min(n, w.inflight)
	}
	if w.limit.Per > 0 && floorDiv(at, int64(w.limit.Per)) == w.win {
		w.used -= min(n, w.used)
	}
}

// Done implements Policy. For NewFixedWindow it does nothing: the window
// counts starts only. For NewFixedCompletion the call's units, counted in
// the window current at now, leave flight.
func (w *FixedWindow) Done(now time.Time, n int64) { w.done(w.ns(now), n) }

func (w *FixedWindow) done(t, n int64) {
	if !w.carry || n <= 0 {
		return
	}
	w.roll(t)
	d := min(n, w.inflight)
	w.inflight -= d
	w.ended += d // ≤ the units admitted: no overflow
}

// mark is Mark: the current window at t, the units of its calls
// that ended and the units Consume added in it; ok only for a fixed
// completion window with a rate.
func (w *FixedWindow) mark(t int64) (win, ended, taken int64, ok bool) {
	if !w.carry || w.limit.Per <= 0 {
		return 0, 0, 0, false
	}
	w.roll(t)
	return w.win, w.ended, w.taken, true
}

// report is Report: it takes in a server's count used of the
// window current at t, and returns the change in the units the window
// counts (negative when it gives units back); ok only for a fixed
// completion window with a rate.
//
// With marked, the count is the response to a call of n units admitted in
// window win when ended units of that window's calls had ended: the server
// had counted, besides units from elsewhere, that call, those calls, and
// every call whose own report was taken in before (the count only grows
// within a window, so a call reported at a count at most the highest one
// arrived before it). Of the highest count top, at most top − max(known,
// reported) units came from elsewhere, where known is the most
// ended + n of the reports at top and reported the units of every
// reported call: that bound holds for every earlier count too, since
// spending from elsewhere only grows within a window. The window counts
// its own calls plus that bound (capped so as not to pass N), giving back
// what an earlier, looser bound took. A report of an earlier window (win
// not the current one) is dropped. Each call must be reported marked at
// most once: a second report of a call would count it twice.
//
// Without marked (a count read with no call at hand: Reconcile, or a
// call's second report), the count is taken as window.Reconciler.Consume of
// used − Used would: every call of the window counted by the server; it
// never gives units back, and what it shows from elsewhere stays a floor
// that later give-backs never go below; but it leaves the bound of the
// calls' own reports as it was (its calls still on their way are not
// taken as counted there).
func (w *FixedWindow) report(t, win, used, ended, n int64, marked bool) (delta int64, ok bool) {
	if !w.carry || w.limit.Per <= 0 {
		return 0, false
	}
	w.roll(t)
	if used < 0 || marked && (win != w.win || ended < 0 || n < 0) {
		return 0, true
	}
	used = min(used, w.limit.N) // "full until the window moves", no more
	own := max(w.used-w.taken, 0)
	room := max(w.limit.N-own, 0)
	var take int64
	if !marked {
		// As window.Reconciler.Consume of used − Used: every call of the window
		// counted, those still on their way too. That bound stands as a
		// floor; it never loosens the one the calls' own reports set
		// (top, known), which a later report could give back from.
		w.floor = max(w.floor, min(max(used-own, 0), room))
		take = max(w.floor, w.taken) // a count with no call at hand never gives back
	} else {
		k := sat.Add(ended, n)
		switch {
		case used > w.top:
			w.top, w.known = used, k
		case used == w.top:
			w.known = max(w.known, k)
		}
		w.reported = sat.Add(w.reported, n)
		foreign := max(w.top-max(w.known, w.reported), w.floor, 0)
		take = min(foreign, room)
	}
	delta = take - w.taken
	w.used, w.taken = own+take, take
	return delta, true
}
