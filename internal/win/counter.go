package win

import (
	"fmt"
	"time"

	"github.com/ratesem/ratesem/internal/sat"
)

// SlidingWindowCounter is the sliding window counter that Cloudflare
// describes ("How we built rate limiting capable of scaling to millions of
// domains", 2017): two fixed windows of Per aligned to the Unix epoch, the
// current one counted exactly and the previous one weighted by how much of it
// still overlaps the window (now−Per, now]. A call of n units is admitted at
// now when
//
//	prev·(Per − elapsed)/Per + cur + n ≤ N
//
// where elapsed is the time since the current window began; the test is done
// in exact integer arithmetic.
//
// Exact guarantee: it approximates a sliding window, assuming the previous
// window's calls were spread evenly. In the worst case (N units at the very
// end of one window, then a steady stream in the next) it admits 2N−1 units
// in a window of length Per; it never admits more than N in one aligned
// window, so never 2N. Like every start counter it counts at the client.
//
// Memory: 48 bytes, whatever N. The zero SlidingWindowCounter is not usable;
// call NewSlidingWindowCounter. It is not safe for concurrent use (see
// Policy).
type SlidingWindowCounter struct {
	unix
	limited
	win       int64 // index of the current window: floor(Unix ns / Per)
	prev, cur int64 // units started in windows win−1 and win
	latest    int64 // the latest Unix ns seen: time never goes back
}

// NewSlidingWindowCounter returns a sliding window counter for l with
// nothing counted. Its windows are aligned to the Unix epoch, so instants
// must carry the wall clock. It panics if l.N or l.Per is negative. With Per
// 0 there is no rate: every call of at most N units is admitted.
func NewSlidingWindowCounter(l Limit) *SlidingWindowCounter {
	l.check("NewSlidingWindowCounter")
	return &SlidingWindowCounter{limited: limited{l}}
}

// SetLimit implements Policy: both counts are kept and count against the new
// N; the windows are re-cut at the new Per, the current count staying in the
// window containing now. It panics on a negative limit.
func (w *SlidingWindowCounter) SetLimit(now time.Time, l Limit) { w.setLimit(w.ns(now), l) }

func (w *SlidingWindowCounter) setLimit(t int64, l Limit) {
	l.check("SlidingWindowCounter.SetLimit")
	w.limit = l
	if l.Per > 0 {
		w.latest = max(w.latest, t)
		w.win = floorDiv(w.latest, int64(l.Per))
	}
}

// roll moves the windows on to the one with index idx.
func (w *SlidingWindowCounter) roll(idx int64) {
	switch {
	case idx <= w.win:
	case idx == w.win+1:
		w.prev, w.cur, w.win = w.cur, 0, idx
	default:
		w.prev, w.cur, w.win = 0, 0, idx
	}
}

// Admit implements Policy. Otherwise the instant returned is the earliest at
// which the weighted count leaves room for n units if nothing else is
// admitted; it is the zero time.Time when n exceeds N.
func (w *SlidingWindowCounter) Admit(now time.Time, n int64) (time.Time, bool) {
	t := w.ns(now)
	at, ok := w.admit(t, n)
	return timeOf(now, t, at), ok
}

// admit decides at the Unix instant real (nanoseconds) and returns the Unix
// instant at which the call could start, or None.
func (w *SlidingWindowCounter) admit(real, n int64) (at int64, ok bool) {
	if done, ok := trivial(n, w.limit.N, w.limit.Per); done {
		return None, ok
	}
	w.latest = max(w.latest, real)
	w.roll(floorDiv(w.latest, int64(w.limit.Per)))
	// The window containing latest is now win, so n fits at latest iff it
	// fits at all before the window's end.
	if at := w.nextFit(n); at > w.latest {
		return at, false
	}
	w.cur += n
	return None, true
}

// nextFit returns the earliest Unix instant, in nanoseconds, at which n
// units fit given the current counts, for 0 < n ≤ N.
func (w *SlidingWindowCounter) nextFit(n int64) int64 {
	per, n0 := int64(w.limit.Per), w.limit.N
	start, prev, cur := w.win*per, w.prev, w.cur
	for range 3 { // the current window, the next, and the one after
		// Smallest elapsed e with prev·(per − e) ≤ (N − cur − n)·per.
		if room := n0 - n - cur; room >= 0 { // n ≤ n0: no wrap
			e := int64(0)
			if prev > 0 {
				q, _ := mulDiv(room, per, 0, prev, false)
				e = max(per-q, 0)
			}
			if e < per {
				return sat.Add(start, e)
			}
		}
		start, prev, cur = sat.Add(start, per), cur, 0 // Per may be math.MaxInt64
	}
	return start // unreachable for n ≤ N: a window with prev 0 admits at once
}

// Cancel implements Policy: the n units come off the count of the window of
// at, if that window is still one of the two counted.
func (w *SlidingWindowCounter) Cancel(at time.Time, n int64) { w.cancel(w.ns(at), n) }

func (w *SlidingWindowCounter) cancel(at, n int64) {
	if w.limit.Per == 0 || n <= 0 {
		return
	}
	switch floorDiv(at, int64(w.limit.Per)) {
	case w.win:
		w.cur -= min(n, w.cur)
	case w.win - 1:
		w.prev -= min(n, w.prev)
	}
}

// Done implements Policy. It does nothing: the counter counts starts only.
func (w *SlidingWindowCounter) Done(time.Time, int64) {}
func (w *SlidingWindowCounter) done(int64, int64)     {}

// SubWindowCounter is the sliding window counter built from sub-window
// blocks, the variant most write-ups describe: Per is cut into Blocks blocks of
// Per/Blocks (rounded up to a whole nanosecond), aligned to the Unix epoch,
// and a call of n units is admitted when the units started in the current
// block and the Blocks−1 before it, plus n, are at most N.
//
// Exact guarantee: at most N units start in any Blocks consecutive blocks,
// hence in any window of length Per − Per/Blocks; a window of length Per
// can straddle Blocks+1 blocks and hold up to 2N (N at the end of one
// block, N at the start of the block Blocks later). More blocks shrink the
// span over which the 2N can happen, not the 2N. It counts at the client.
//
// Memory: 72 bytes plus 8 bytes per block. The zero SubWindowCounter is not
// usable; call NewSubWindowCounter. It is not safe for concurrent use (see
// Policy).
type SubWindowCounter struct {
	unix
	limited
	blocks int64
	size   int64   // block length in nanoseconds
	counts []int64 // ring: counts[i % blocks] for block index i
	cur    int64   // index of the newest block: floor(Unix ns / size)
	sum    int64   // units in blocks cur−blocks+1 .. cur
}

// NewSubWindowCounter returns a sub-window counter for l with blocks blocks
// per window and nothing counted. Instants must carry the wall clock. It
// panics if l.N or l.Per is negative or blocks < 1. With Per 0 there is no
// rate: every call of at most N units is admitted.
func NewSubWindowCounter(l Limit, blocks int) *SubWindowCounter {
	l.check("NewSubWindowCounter")
	if blocks < 1 {
		panic(fmt.Sprintf("ratesem: NewSubWindowCounter: %d blocks, want at least 1", blocks))
	}
	w := &SubWindowCounter{limited: limited{l}, blocks: int64(blocks), counts: make([]int64, blocks)}
	w.size = w.blockSize(l.Per)
	return w
}

func (w *SubWindowCounter) blockSize(per time.Duration) int64 {
	return ceilDiv(int64(per), w.blocks) // not (per+blocks−1)/blocks: that wraps for a Per near math.MaxInt64
}

// Blocks returns the number of blocks per window.
func (w *SubWindowCounter) Blocks() int { return int(w.blocks) }

// SetLimit implements Policy. A change of N keeps the blocks. A change of
// Per re-cuts the blocks: every unit still counted moves into the block
// containing now, which counts it for a whole new window (on the safe
// side). It panics on a negative limit.
func (w *SubWindowCounter) SetLimit(now time.Time, l Limit) { w.setLimit(w.ns(now), l) }

func (w *SubWindowCounter) setLimit(t int64, l Limit) {
	l.check("SubWindowCounter.SetLimit")
	old := w.limit
	w.limit = l
	if l.Per == old.Per || l.Per == 0 {
		return
	}
	if old.Per > 0 {
		w.roll(floorDiv(t, w.size))
	}
	w.size = w.blockSize(l.Per)
	clear(w.counts)
	w.cur = floorDiv(t, w.size)
	w.counts[w.slot(w.cur)] = w.sum
}

func (w *SubWindowCounter) slot(i int64) int64 {
	s := i % w.blocks
	if s < 0 {
		s += w.blocks
	}
	return s
}

// roll moves the newest block on to idx, dropping the blocks that leave.
func (w *SubWindowCounter) roll(idx int64) {
	if idx <= w.cur {
		return
	}
	if idx-w.cur >= w.blocks {
		clear(w.counts)
		w.sum, w.cur = 0, idx
		return
	}
	for w.cur < idx {
		w.cur++
		s := w.slot(w.cur)
		w.sum -= w.counts[s]
		w.counts[s] = 0
	}
}

// Admit implements Policy. Otherwise the instant returned is the start of
// the first block at which enough old blocks have left the window; it is the
// zero time.Time when n exceeds N.
func (w *SubWindowCounter) Admit(now time.Time, n int64) (time.Time, bool) {
	t := w.ns(now)
	at, ok := w.admit(t, n)
	return timeOf(now, t, at), ok
}

// admit decides at the Unix instant t (nanoseconds) and returns the Unix
// instant at which the call could start, or None.
func (w *SubWindowCounter) admit(t, n int64) (at int64, ok bool) {
	if done, ok := trivial(n, w.limit.N, w.limit.Per); done {
		return None, ok
	}
	w.roll(floorDiv(t, w.size))
	if n <= w.limit.N-w.sum {
		w.counts[w.slot(w.cur)] += n
		w.sum += n
		return None, true
	}
	// Block cur+j starts once the j oldest blocks have left.
	left := w.sum
	for j := int64(1); j <= w.blocks; j++ {
		left -= w.counts[w.slot(w.cur-w.blocks+j)]
		if n <= w.limit.N-left {
			// Block cur+j starts at (cur+j)·size, saturating rather than
			// wrap for blocks near math.MaxInt64 ns long.
			return sat.Add(w.cur*w.size, sat.Mul(j, w.size)), false
		}
	}
	panic("ratesem: internal error: SubWindowCounter found no room after a whole window")
}

// Cancel implements Policy: the n units come off the block of at, if that
// block is still counted.
func (w *SubWindowCounter) Cancel(at time.Time, n int64) { w.cancel(w.ns(at), n) }

func (w *SubWindowCounter) cancel(at, n int64) {
	if w.limit.Per == 0 || n <= 0 {
		return
	}
	i := floorDiv(at, w.size)
	if i > w.cur || i <= w.cur-w.blocks {
		return
	}
	s := w.slot(i)
	k := min(n, w.counts[s])
	w.counts[s] -= k
	w.sum -= k
}

// Done implements Policy. It does nothing: the counter counts starts only.
func (w *SubWindowCounter) Done(time.Time, int64) {}
func (w *SubWindowCounter) done(int64, int64)     {}
