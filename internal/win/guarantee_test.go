package win_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ratesem/ratesem/internal/win"
)

// The guarantee table of the package doc, row by row: each row builds its
// worst case and asserts the bound is reached, then runs random schedules
// (random gaps, weights, idle spells and cancellations) and asserts it is
// never exceeded. A refused call is also retried at the instant Admit
// returned: one nanosecond earlier it must still be refused, at that instant
// admitted (nothing else happens in between), so the instants are exact.

// start is one admitted call.
type start struct {
	at time.Time
	n  int64
}

// maxIn returns the most units that started in any window (t−w, t].
func maxIn(starts []start, w time.Duration) int64 {
	s := slices.Clone(starts)
	slices.SortStableFunc(s, func(a, b start) int { return a.at.Compare(b.at) })
	var best, sum int64
	lo := 0
	for hi := range s {
		sum += s[hi].n
		for !s[lo].at.After(s[hi].at.Add(-w)) {
			sum -= s[lo].n
			lo++
		}
		best = max(best, sum)
	}
	return best
}

// recorder admits calls on a policy and records the starts.
type recorder struct {
	t      *testing.T
	p      win.Policy
	starts []start
}

func (r *recorder) try(now time.Time, n int64) (time.Time, bool) {
	at, ok := r.p.Admit(now, n)
	if ok {
		r.starts = append(r.starts, start{now, n})
		r.p.Done(now, n) // for the completion window: a call of no latency
	}
	return at, ok
}

// greedy tries one call of n units at every step from from to to.
func (r *recorder) greedy(from, to time.Time, step time.Duration, n int64) {
	for now := from; !now.After(to); now = now.Add(step) {
		r.try(now, n)
	}
}

type row struct {
	name string
	make func(l win.Limit) win.Policy
	// span is the window length over which bound holds; worst builds the
	// schedule that reaches it.
	span  func(l win.Limit) time.Duration
	bound func(l win.Limit, maxW int64) int64
	worst func(r *recorder, l win.Limit)
}

const blocks = 4

func perSpan(l win.Limit) time.Duration { return l.Per }

var rows = []row{
	{
		name:  "completion (calls of no latency)",
		make:  func(l win.Limit) win.Policy { return win.NewCompletion(l) },
		span:  perSpan,
		bound: func(l win.Limit, _ int64) int64 { return l.N },
		worst: func(r *recorder, l win.Limit) { r.greedy(at(0), at(3*l.Per), l.Per/100, 1) },
	},
	{
		name:  "sliding log, margin Per/10",
		make:  func(l win.Limit) win.Policy { return win.NewSlidingLog(l, l.Per/10) },
		span:  func(l win.Limit) time.Duration { return l.Per + l.Per/10 },
		bound: func(l win.Limit, _ int64) int64 { return l.N },
		worst: func(r *recorder, l win.Limit) { r.greedy(at(0), at(3*l.Per), l.Per/100, 1) },
	},
	{
		name:  "fixed window: 2N across a boundary",
		make:  func(l win.Limit) win.Policy { return win.NewFixedWindow(l) },
		span:  perSpan,
		bound: func(l win.Limit, _ int64) int64 { return 2 * l.N },
		worst: func(r *recorder, l win.Limit) {
			r.greedy(at(l.Per-ms), at(l.Per-ms), 1, l.N)   // N at the end of window 0
			r.greedy(at(l.Per), at(2*l.Per), l.Per/100, 1) // N more from the start of window 1
		},
	},
	{
		name:  "fixed completion, calls of no latency: 2N across a boundary",
		make:  func(l win.Limit) win.Policy { return win.NewFixedCompletion(l) },
		span:  perSpan,
		bound: func(l win.Limit, _ int64) int64 { return 2 * l.N },
		worst: func(r *recorder, l win.Limit) {
			r.greedy(at(l.Per-ms), at(l.Per-ms), 1, l.N)
			r.greedy(at(l.Per), at(2*l.Per), l.Per/100, 1)
		},
	},
	{
		name:  "sliding window counter: 2N−1",
		make:  func(l win.Limit) win.Policy { return win.NewSlidingWindowCounter(l) },
		span:  perSpan,
		bound: func(l win.Limit, _ int64) int64 { return 2*l.N - 1 },
		worst: func(r *recorder, l win.Limit) {
			r.greedy(at(l.Per-ms), at(l.Per-ms), 1, l.N) // N at the very end of window 0
			r.greedy(at(l.Per), at(2*l.Per-2*ms), l.Per/1000, 1)
		},
	},
	{
		name:  fmt.Sprintf("sub-window counter, %d blocks: 2N over Per", blocks),
		make:  func(l win.Limit) win.Policy { return win.NewSubWindowCounter(l, blocks) },
		span:  perSpan,
		bound: func(l win.Limit, _ int64) int64 { return 2 * l.N },
		worst: func(r *recorder, l win.Limit) {
			r.greedy(at(l.Per/blocks-ms), at(l.Per/blocks-ms), 1, l.N) // end of block 0
			r.greedy(at(l.Per), at(l.Per), 1, l.N)                     // start of block 4
		},
	},
	{
		name: fmt.Sprintf("sub-window counter, %d blocks: N over Per−Per/%d", blocks, blocks),
		make: func(l win.Limit) win.Policy { return win.NewSubWindowCounter(l, blocks) },
		span: func(l win.Limit) time.Duration { return l.Per - l.Per/blocks },
		bound: func(l win.Limit, _ int64) int64 {
			return l.N
		},
		worst: func(r *recorder, l win.Limit) { r.greedy(at(0), at(3*l.Per), l.Per/100, 1) },
	},
	{
		name:  "token bucket, burst N: 2N−1",
		make:  func(l win.Limit) win.Policy { return win.NewTokenBucket(l, 0) },
		span:  perSpan,
		bound: func(l win.Limit, _ int64) int64 { return 2*l.N - 1 },
		worst: func(r *recorder, l win.Limit) { r.greedy(at(0), at(3*l.Per), l.Per/100, 1) },
	},
	{
		name:  "token bucket, burst 3: burst+N−1",
		make:  func(l win.Limit) win.Policy { return win.NewTokenBucket(l, 3) },
		span:  perSpan,
		bound: func(l win.Limit, _ int64) int64 { return 3 + l.N - 1 },
		worst: func(r *recorder, l win.Limit) { r.greedy(at(0), at(3*l.Per), l.Per/100, 1) },
	},
	{
		name:  "leaky bucket meter, capacity N: 2N−1",
		make:  func(l win.Limit) win.Policy { return win.NewLeakyBucket(l, 0) },
		span:  perSpan,
		bound: func(l win.Limit, _ int64) int64 { return 2*l.N - 1 },
		worst: func(r *recorder, l win.Limit) { r.greedy(at(0), at(3*l.Per), l.Per/100, 1) },
	},
	{
		name:  "GCRA, burst N: 2N−1",
		make:  func(l win.Limit) win.Policy { return win.NewGCRA(l, 0) },
		span:  perSpan,
		bound: func(l win.Limit, _ int64) int64 { return 2*l.N - 1 },
		worst: func(r *recorder, l win.Limit) { r.greedy(at(0), at(3*l.Per), l.Per/100, 1) },
	},
	{
		name:  "pacer: N (unit weights), N−1+w",
		make:  func(l win.Limit) win.Policy { return win.NewPacer(l) },
		span:  perSpan,
		bound: func(l win.Limit, maxW int64) int64 { return l.N - 1 + maxW },
		worst: func(r *recorder, l win.Limit) { r.greedy(at(0), at(3*l.Per), l.Per/100, 1) },
	},
}

func TestGuaranteeWorstCase(t *testing.T) {
	l := win.Limit{N: 10, Per: time.Second}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			r := &recorder{t: t, p: row.make(l)}
			row.worst(r, l)
			want := row.bound(l, 1)
			if got := maxIn(r.starts, row.span(l)); got != want {
				t.Fatalf("worst case: %d units in a window of %v; the bound is %d and must be reached", got, row.span(l), want)
			}
		})
	}
}

func TestGuaranteeRandom(t *testing.T) {
	limits := []win.Limit{
		{N: 10, Per: time.Second},
		{N: 7, Per: 3 * time.Second}, // I = 3s/7 is not whole: rounding must err slow
		{N: 1, Per: 100 * ms},
		{N: 50, Per: time.Minute},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			for seed := range uint64(40) {
				rng := rand.New(rand.NewPCG(seed, 7))
				l := limits[seed%uint64(len(limits))]
				r := &recorder{t: t, p: row.make(l)}
				maxW := 1 + rng.Int64N(min(r.p.Capacity(), 4))
				randomSchedule(t, rng, r, l, maxW)
				span := row.span(l)
				if got, bound := maxIn(r.starts, span), row.bound(l, maxW); got > bound {
					t.Fatalf("seed %d, %v, weights ≤ %d: %d units in a window of %v, bound %d",
						seed, l, maxW, got, span, bound)
				}
			}
		})
	}
}

// randomSchedule makes 400 attempts: bursts at one instant, short and long
// gaps, weights up to maxW, an occasional cancellation of the latest
// admission, and a retry at the instant a refusal names.
func randomSchedule(t *testing.T, rng *rand.Rand, r *recorder, l win.Limit, maxW int64) {
	t.Helper()
	now := at(time.Duration(rng.Int64N(int64(l.Per))))
	for i := range 400 {
		switch k := rng.IntN(10); {
		case k < 3: // same instant
		case k < 8:
			now = now.Add(time.Duration(rng.Int64N(int64(l.Per) / 5)))
		case k < 9:
			now = now.Add(time.Duration(rng.Int64N(3 * int64(l.Per))))
		default:
			now = now.Add(1)
		}
		n := 1 + rng.Int64N(maxW)
		at, ok := r.try(now, n)
		if ok {
			if _, done := r.p.(*win.Completion); !done && rng.IntN(10) == 0 {
				// The caller gave up before starting: undo it.
				r.p.Cancel(now, n)
				r.starts = r.starts[:len(r.starts)-1]
			}
			continue
		}
		if at.IsZero() {
			t.Fatalf("step %d: Admit(%v, %d) refused without an instant", i, now.Sub(t0), n)
		}
		if !at.After(now) {
			t.Fatalf("step %d: Admit(%v, %d) refused with retry at %v, not later", i, now.Sub(t0), n, at.Sub(t0))
		}
		if _, ok := r.try(at.Add(-1), n); ok {
			t.Fatalf("step %d: admitted at %v, 1ns before the retry instant %v", i, at.Add(-1).Sub(t0), at.Sub(t0))
		}
		if _, ok := r.try(at, n); !ok {
			t.Fatalf("step %d: refused at the retry instant %v", i, at.Sub(t0))
		}
		now = at
	}
}

// An Admit cancelled at once leaves no trace: a twin that never saw it makes
// the same decisions on the same schedule.
func TestCancelLeavesNoTrace(t *testing.T) {
	l := win.Limit{N: 10, Per: time.Second}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			for seed := range uint64(20) {
				rng := rand.New(rand.NewPCG(seed, 11))
				p, twin := row.make(l), row.make(l)
				now := at(time.Duration(rng.Int64N(int64(l.Per))))
				for i := range 300 {
					now = now.Add(time.Duration(rng.Int64N(int64(l.Per) / 8)))
					if rng.IntN(3) == 0 {
						if n := 1 + rng.Int64N(3); n <= twin.Capacity() {
							if _, ok := twin.Admit(now, n); ok {
								twin.Cancel(now, n)
							}
						}
					}
					n := 1 + rng.Int64N(3)
					at1, ok1 := p.Admit(now, n)
					at2, ok2 := twin.Admit(now, n)
					if ok1 != ok2 || !at1.Equal(at2) {
						t.Fatalf("seed %d step %d: Admit(%v, %d) = (%v, %v), twin with a cancelled admission (%v, %v)",
							seed, i, now.Sub(t0), n, at1.Sub(t0), ok1, at2.Sub(t0), ok2)
					}
					if ok1 {
						p.Done(now, n)
						twin.Done(now, n)
					}
				}
			}
		})
	}
}

// A cancellation that comes after a later admission must not give back
// units the bucket would have lost to its cap: 5 taken at 0, the bucket full
// again by 0.5s, 5 taken then; cancelling the first must leave 5, not 10.
// And a cancellation never fills the bucket beyond its burst.
func TestBucketCancelStale(t *testing.T) {
	l := win.Limit{N: 10, Per: time.Second}
	for name, mk := range map[string]func() win.Policy{
		"token bucket": func() win.Policy { return win.NewTokenBucket(l, 0) },
		"leaky bucket": func() win.Policy { return win.NewLeakyBucket(l, 0) },
		"GCRA":         func() win.Policy { return win.NewGCRA(l, 0) },
	} {
		t.Run(name, func(t *testing.T) {
			p := mk()
			mustAdmit(t, p, 0, 5, true)
			mustAdmit(t, p, 500*ms, 5, true)
			p.Cancel(at(0), 5)
			mustAdmit(t, p, 500*ms, 6, false)
			mustAdmit(t, p, 500*ms, 5, true)

			p = mk()
			mustAdmit(t, p, 0, 1, true)
			p.Cancel(at(0), 1)
			mustAdmit(t, p, 0, 10, true)
			mustAdmit(t, p, 0, 1, false)
		})
	}
}

func mustAdmit(t *testing.T, p win.Policy, now time.Duration, n int64, want bool) {
	t.Helper()
	if _, ok := p.Admit(at(now), n); ok != want {
		t.Fatalf("Admit(t0+%v, %d) = %v, want %v", now, n, ok, want)
	}
}

// A cancellation that arrives after a window boundary still comes off the
// count of the call's own window.
func TestCounterCancelAcrossBoundary(t *testing.T) {
	l := win.Limit{N: 10, Per: time.Second}
	for name, p := range map[string]win.Policy{
		"sliding window counter": win.NewSlidingWindowCounter(l),
		"sub-window counter":     win.NewSubWindowCounter(l, blocks),
	} {
		t.Run(name, func(t *testing.T) {
			mustAdmit(t, p, 900*ms, 10, true)
			mustAdmit(t, p, 1100*ms, 2, false)
			p.Cancel(at(900*ms), 10)
			mustAdmit(t, p, 1100*ms, 10, true)
		})
	}
}

// serverPeak runs calls through p with random latencies and returns the most
// arrivals a server saw in one aligned window of Per, each call arriving at
// a random instant between its start and its end.
func serverPeak(t *testing.T, p win.Policy, l win.Limit, seed uint64) int64 {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 17))
	type flight struct {
		end time.Time
		n   int64
	}
	var inflight []flight
	perWindow := map[int64]int64{}
	now := at(0)
	for range 3000 {
		if rng.IntN(2) == 0 { // a lull, then often a burst late in a window
			now = now.Add(time.Duration(rng.Int64N(int64(l.Per) / 2)))
		} else {
			now = now.Add(time.Duration(rng.Int64N(int64(l.Per) / 200)))
		}
		// End the calls due by now, in order.
		slices.SortFunc(inflight, func(a, b flight) int { return a.end.Compare(b.end) })
		for len(inflight) > 0 && !inflight[0].end.After(now) {
			p.Done(inflight[0].end, inflight[0].n)
			inflight = inflight[1:]
		}
		n := 1 + rng.Int64N(2)
		if _, ok := p.Admit(now, n); !ok {
			continue
		}
		latency := time.Duration(rng.Int64N(int64(l.Per) / 3))
		arrival := now.Add(time.Duration(rng.Int64N(int64(latency) + 1)))
		perWindow[arrival.UnixNano()/int64(l.Per)] += n
		inflight = append(inflight, flight{now.Add(latency), n})
	}
	var peak int64
	for _, v := range perWindow {
		peak = max(peak, v)
	}
	return peak
}

// NewFixedCompletion holds at a server that counts aligned fixed windows on
// arrival, whatever the latency; the plain fixed window does not.
func TestFixedCompletionHoldsAtServer(t *testing.T) {
	l := win.Limit{N: 10, Per: time.Second}
	broken := 0
	for seed := range uint64(20) {
		if got := serverPeak(t, win.NewFixedCompletion(l), l, seed); got > l.N {
			t.Fatalf("seed %d: the server saw %d arrivals in one window of %v > %d", seed, got, l.Per, l.N)
		}
		if serverPeak(t, win.NewFixedWindow(l), l, seed) > l.N {
			broken++
		}
	}
	if broken == 0 {
		t.Fatal("the plain fixed window never broke the rule at the server: the test builds no straddling calls")
	}
}
