package win_test

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/win"
	"github.com/ratesem/ratesem/window"
)

// Issue 9: a server's report of "used" beyond the limit (Consume with n up
// to math.MaxInt64, as from a hostile X-MBX-USED-WEIGHT-1M header) fills
// the window, never wraps, never panics ("stampOf beyond the queue" in the
// old code), and the window recovers once it has moved on.
func TestConsumeHugeFillsWindowAndRecovers(t *testing.T) {
	l := win.Limit{N: 10, Per: time.Second}
	for _, row := range rows {
		if _, ok := row.make(l).(window.Reconciler); !ok {
			continue
		}
		for _, n := range []int64{1, l.N, l.N + 1, math.MaxInt64 - 1, math.MaxInt64} {
			for _, before := range []int64{0, 3} { // an empty window, or one with calls in it
				p := row.make(l)
				r := p.(window.Reconciler)
				now := at(100 * ms)
				for range before {
					if _, ok := p.Admit(now, 1); ok {
						p.Done(now, 1)
					}
				}
				r.Consume(now, n)
				r.Consume(now, n) // twice: the second must not wrap what the first left
				if used := r.Used(now); used < 0 {
					t.Fatalf("%s: Used = %d after Consume(%d) twice", row.name, used, n)
				}
				if n >= l.N {
					// Full: nothing more until the window moves (the
					// buckets refill one unit every Per/N).
					hold := l.Per / 4
					switch p.(type) {
					case *win.TokenBucket, *win.LeakyBucket, *win.GCRA:
						hold = l.Per / time.Duration(l.N)
					}
					for d := time.Duration(0); d < hold; d += ms {
						if _, ok := p.Admit(now.Add(d), 1); ok {
							t.Fatalf("%s: admitted 1 at +%v after Consume(%d)", row.name, d, n)
						}
					}
				}
				// Recovers: within three windows a unit is admitted again.
				rec := false
				for d := l.Per / 4; d <= 3*l.Per; d += 10 * ms {
					if _, ok := p.Admit(now.Add(d), 1); ok {
						rec = true
						break
					}
				}
				if !rec {
					t.Fatalf("%s: no admission in 3 windows after Consume(%d)", row.name, n)
				}
			}
		}
	}
}

// Consume on windows of huge limits (N or Per near math.MaxInt64) never
// wraps or panics, and 0 or negative n changes nothing.
func TestConsumeHugeLimits(t *testing.T) {
	for _, l := range []win.Limit{
		{N: math.MaxInt64, Per: time.Second},
		{N: 10, Per: math.MaxInt64},
		{N: math.MaxInt64, Per: math.MaxInt64},
	} {
		for _, row := range rows {
			p := row.make(l)
			r, ok := p.(window.Reconciler)
			if !ok {
				continue
			}
			now := at(0)
			r.Consume(now, 0)
			r.Consume(now, -5)
			r.Consume(now, math.MinInt64)
			if u := r.Used(now); u != 0 {
				t.Fatalf("%s %v: Used = %d after Consume of 0 and negatives", row.name, l, u)
			}
			for _, n := range []int64{1, l.N, math.MaxInt64, math.MaxInt64} {
				r.Consume(now, n)
				if u := r.Used(now); u < 0 {
					t.Fatalf("%s %v: Used = %d after Consume(%d)", row.name, l, u, n)
				}
				if _, ok := p.Admit(now, 1); ok && n >= l.N {
					t.Fatalf("%s %v: admitted after Consume(%d)", row.name, l, n)
				}
			}
		}
	}
}

// The fixed window's used + n ≤ N wrapped negative for a huge n on the old
// code, admitting everything after one hostile header.
func TestFixedWindowConsumeHugeDoesNotWrap(t *testing.T) {
	w := win.NewFixedWindow(win.Limit{N: 3000, Per: time.Minute})
	now := at(time.Second)
	w.Consume(now, math.MaxInt64)
	admitted := 0
	for i := range 7000 {
		if _, ok := w.Admit(now.Add(time.Duration(i)*time.Microsecond), 2); ok {
			admitted++
		}
	}
	if admitted != 0 {
		t.Fatalf("%d calls admitted in a window reported full", admitted)
	}
}

// Policies refuse a negative weight and change nothing; Done and Cancel of
// n ≤ 0 change nothing (except the completion window's documented panic).
func TestNegativeWeightRefused(t *testing.T) {
	l := win.Limit{N: 10, Per: time.Hour}
	for _, row := range rows {
		p := row.make(l)
		now := at(0)
		for _, n := range []int64{-1, -1000, math.MinInt64} {
			if _, ok := p.Admit(now, n); ok {
				t.Fatalf("%s: Admit(%d) admitted", row.name, n)
			}
			if win.Of(p).AdmitCached(n) {
				t.Fatalf("%s: the engine's AdmitCached(%d) admitted", row.name, n)
			}
			if _, isCompletion := p.(*win.Completion); !isCompletion {
				p.Cancel(now, n)
				p.Done(now, n)
			}
		}
		got := int64(0)
		for range 100 {
			if _, ok := p.Admit(now, 1); ok {
				p.Done(now, 1)
				got++
			}
		}
		if want := min(l.N, p.Capacity()); got != want && !strings.Contains(row.name, "pacer") {
			t.Fatalf("%s: %d admitted after negative weights, want %d", row.name, got, want)
		}
	}
}

// window.Limiter.AllowN(-1000) returned true and credited the window on the
// old code (1010 admissions under 10 per hour followed).
func TestLimiterNegativeWeight(t *testing.T) {
	lim := window.NewLimiter(win.NewFixedWindow(win.Limit{N: 10, Per: time.Hour}))
	now := at(0)
	if lim.AllowN(now, -1000) {
		t.Fatal("AllowN(-1000) = true")
	}
	if _, err := lim.TryN(now, -1); !errors.Is(err, ratesem.ErrNegativeWeight) {
		t.Fatalf("TryN(-1) error = %v, want ratesem.ErrNegativeWeight", err)
	}
	mustPanic(t, func() { lim.DoneN(now, -1) })
	got := 0
	for range 2000 {
		if lim.AllowN(now, 1) {
			got++
		}
	}
	if got != 10 {
		t.Fatalf("%d admissions under 10 per hour after a negative weight", got)
	}
}

// Huge limits: (Per+N−1)/N wrapped for the GCRA's emission interval (every
// call refused) and (Per+blocks−1)/blocks for the sub-window counter's
// block size (negative blocks); the retry instants of the counters wrapped.
func TestHugeLimitsDoNotWrap(t *testing.T) {
	for _, l := range []win.Limit{
		{N: math.MaxInt64, Per: math.MaxInt64},
		{N: 1, Per: math.MaxInt64},
		{N: math.MaxInt64, Per: 1},
		{N: 3, Per: math.MaxInt64 - 1},
	} {
		for _, row := range rows {
			p := row.make(l)
			now := at(0)
			if _, ok := p.Admit(now, 1); !ok {
				t.Fatalf("%s %v: first unit refused", row.name, l)
			}
			p.Done(now, 1)
			if c := p.Capacity(); c < l.N {
				continue // a small bucket: refusals below are expected
			}
			retry, ok := p.Admit(now, l.N)
			if ok {
				if l.Per > time.Hour && l.N > 1 {
					t.Fatalf("%s %v: admitted N with one unit counted", row.name, l)
				}
				continue
			}
			if !retry.IsZero() && !retry.After(now) {
				t.Fatalf("%s %v: retry instant %v not after now %v", row.name, l, retry, now)
			}
		}
	}
}

// FuzzPolicy drives every policy of the guarantee table through a
// fuzzer-chosen sequence of Admit, Done, Cancel, Consume, SetLimit and time
// steps, with arbitrary int64 weights (negative and huge included), and
// asserts no panic, refusals of negative weights, retry instants after now,
// and the row's documented bound over the admissions of each stretch between
// two SetLimit calls.
func FuzzPolicy(f *testing.F) {
	seed := func(ops ...any) []byte {
		var b []byte
		for _, o := range ops {
			switch v := o.(type) {
			case byte:
				b = append(b, v)
			case int64:
				b = binary.LittleEndian.AppendUint64(b, uint64(v))
			}
		}
		return b
	}
	for row := range len(rows) {
		f.Add(uint8(row), int64(10), int64(time.Second), seed(byte(0), int64(3), byte(3), int64(math.MaxInt64), byte(0), int64(1), byte(5), int64(time.Second)))
		f.Add(uint8(row), int64(math.MaxInt64), int64(math.MaxInt64), seed(byte(0), int64(math.MaxInt64), byte(0), int64(-1000), byte(3), int64(math.MaxInt64), byte(4), int64(7)))
		f.Add(uint8(row), int64(5), int64(time.Minute), seed(byte(0), int64(2), byte(1), int64(0), byte(2), int64(0), byte(5), int64(-1), byte(4), int64(math.MinInt64), byte(0), int64(5)))
	}
	f.Fuzz(func(t *testing.T, rowIdx uint8, n, per int64, ops []byte) {
		row := rows[int(rowIdx)%len(rows)]
		nonNeg := func(v int64) int64 {
			if v < 0 {
				return -(v + 1)
			}
			return v
		}
		l := win.Limit{N: nonNeg(n), Per: time.Duration(nonNeg(per))}
		p := row.make(l)
		r, _ := p.(window.Reconciler)
		keepPer := strings.Contains(row.name, "sliding log") // its margin was cut from the first Per

		type call struct {
			at  time.Time
			n   int64
			idx int // in starts, or -1 once out of the checked stretch
		}
		var (
			inflight []call
			starts   []start
			maxW     int64
			now      = at(0)
			end      = at(100 * 365 * 24 * time.Hour) // instants stay where UnixNano is defined
		)
		check := func() {
			if l.N == 0 || l.Per == 0 || l.N > 1<<40 || len(starts) == 0 || row.span(l) <= 0 { // a span of Per+Per/10 may wrap: the harness's limit, not the policy's
				return
			}
			if got, bound := maxIn(starts, row.span(l)), row.bound(l, maxW); got > bound {
				t.Fatalf("%s, %v, weights ≤ %d: %d units in a window of %v, bound %d", row.name, l, maxW, got, row.span(l), bound)
			}
		}
		for len(ops) > 0 {
			kind := ops[0] % 6
			ops = ops[1:]
			var v int64
			if len(ops) >= 8 {
				v = int64(binary.LittleEndian.Uint64(ops))
				ops = ops[8:]
			}
			switch kind {
			case 0: // Admit of a weight v (any int64), or of a small one
				w := v
				if w > 0 && w&1 == 0 {
					w = 1 + w%max(min(p.Capacity(), 8), 1)
				}
				at, ok := p.Admit(now, w)
				switch {
				case ok && w < 0:
					t.Fatalf("%s: Admit(%d) admitted a negative weight", row.name, w)
				case ok:
					maxW = max(maxW, w)
					inflight = append(inflight, call{now, w, len(starts)})
					starts = append(starts, start{now, w})
				case !at.IsZero() && !at.After(now):
					t.Fatalf("%s %v: Admit(%v, %d) refused with retry at %v, not later", row.name, l, now.Sub(t0), w, at.Sub(t0))
				}
			case 1: // Done of the oldest call in flight
				if len(inflight) > 0 {
					p.Done(now, inflight[0].n)
					inflight = inflight[1:]
				}
			case 2: // Cancel of the newest call in flight, at its admission
				// instant (a caller that gave up before it started); a
				// RateSemaphore cancels only before anything else moves.
				if k := len(inflight); k > 0 && inflight[k-1].at.Equal(now) {
					c := inflight[k-1]
					p.Cancel(c.at, c.n)
					inflight = inflight[:k-1]
					if c.idx >= 0 && c.idx == len(starts)-1 {
						starts = starts[:c.idx]
					} else if c.idx >= 0 {
						starts[c.idx].n = 0
					}
				}
			case 3: // a server's report
				if r != nil {
					r.Consume(now, v)
					if u := r.Used(now); u < 0 {
						t.Fatalf("%s: Used = %d after Consume(%d)", row.name, u, v)
					}
				}
			case 4: // SetLimit: check the stretch so far, start a new one
				check()
				nl := win.Limit{N: nonNeg(v) % (1 << 20), Per: l.Per}
				if v&1 == 1 && !keepPer {
					nl.Per = time.Duration(nonNeg(v>>1) % int64(24*time.Hour))
				}
				if v < 0 && v&2 == 2 {
					nl.N = math.MaxInt64
				}
				p.SetLimit(now, nl)
				l, starts, maxW = nl, starts[:0], 0
				for i := range inflight {
					inflight[i].idx = -1
				}
			case 5: // time moves on
				var d time.Duration
				switch {
				case v == 0:
					d = 1
				case v > 0 && l.Per > 0:
					d = time.Duration(v % (2*int64(min(l.Per, time.Duration(math.MaxInt64/2))) + 1))
				default:
					d = time.Duration(nonNeg(v) % int64(48*time.Hour))
				}
				if now.Add(d).Before(end) {
					now = now.Add(d)
				}
			}
		}
		check()
	})
}

// A Cancel heavier than any admission (a caller's bug) must not push GCRA's
// TAT towards MinInt64, where TAT − now wraps and the next refusal names an
// instant in the past (found by a second FuzzPolicy harness).
func TestGCRACancelHeavierThanAdmitted(t *testing.T) {
	for _, row := range rows {
		if !strings.Contains(row.name, "GCRA") && !strings.Contains(row.name, "pacer") {
			continue
		}
		p := row.make(win.Limit{N: 3, Per: time.Second})
		now := at(0)
		if _, ok := p.Admit(now, 1); !ok {
			t.Fatalf("%s: first unit refused", row.name)
		}
		p.Cancel(now, math.MaxInt64)
		for i := range 10 {
			if retry, ok := p.Admit(now, 1); !ok && !retry.After(now) {
				t.Fatalf("%s: Admit %d after a huge Cancel refused with retry %v, not after now %v", row.name, i, retry, now)
			}
		}
	}
}

// With Per near MaxInt64 every retry instant lies in the future, however
// far the clock has moved: the counters' next-window instants saturate
// rather than wrap into the past.
func TestRetryInstantNeverInThePast(t *testing.T) {
	for _, row := range rows {
		for _, l := range []win.Limit{{N: 3, Per: math.MaxInt64}, {N: 3, Per: math.MaxInt64 - 1}, {N: 3, Per: math.MaxInt64 / 2}} {
			p := row.make(l)
			now := at(0)
			for i := range 10 {
				now = now.Add(time.Duration(i) * time.Hour)
				if retry, ok := p.Admit(now, 2); !ok && !retry.IsZero() && !retry.After(now) {
					t.Fatalf("%s %v: Admit refused at %v with retry instant %v, not after it", row.name, l, now, retry)
				}
			}
		}
	}
}
