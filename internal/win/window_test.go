package win_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ratesem/ratesem/internal/win"
)

var t0 = time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

const ms = time.Millisecond

// step is one call on a window: Admit (done == false) or Done of n units at
// instant now; for Admit, ok and retry are what it must return (retry -1:
// the zero time.Time).
type step struct {
	now   time.Duration
	n     int64
	done  bool
	ok    bool
	retry time.Duration
}

func run(t *testing.T, p win.Policy, steps []step) {
	t.Helper()
	for i, s := range steps {
		if s.done {
			p.Done(at(s.now), s.n)
			continue
		}
		got, ok := p.Admit(at(s.now), s.n)
		want := time.Time{}
		if s.retry >= 0 && !s.ok {
			want = at(s.retry)
		}
		if ok != s.ok || !got.Equal(want) {
			t.Fatalf("step %d: Admit(t0+%v, %d) = (%v, %v); want (%v, %v)",
				i, s.now, s.n, got.Sub(t0), ok, want.Sub(t0), s.ok)
		}
	}
}

func TestCompletion(t *testing.T) {
	// 3 per second. Units count from admission until 1s after their end.
	c := win.NewCompletion(win.Limit{N: 3, Per: time.Second})
	run(t, c, []step{
		{now: 0, n: 2, ok: true},
		{now: 0, n: 1, ok: true},
		{now: 0, n: 1, ok: false, retry: -1}, // all 3 in flight: only a Done helps
		{now: 100 * ms, n: 1, done: true},    // ends at 0.1s: free again at 1.1s
		{now: 100 * ms, n: 1, ok: false, retry: 1100 * ms},
		{now: 300 * ms, n: 2, done: true}, // ends at 0.3s: free again at 1.3s
		{now: 500 * ms, n: 2, ok: false, retry: 1300 * ms},
		{now: 1099 * ms, n: 1, ok: false, retry: 1100 * ms},
		{now: 1100 * ms, n: 1, ok: true}, // (t−1s, t] excludes an end at exactly t−1s
		{now: 1100 * ms, n: 1, ok: false, retry: 1300 * ms},
		{now: 1300 * ms, n: 3, ok: false, retry: -1}, // 1 in flight: 3 can never fit now
		{now: 1300 * ms, n: 2, ok: true},
		{now: 1300 * ms, n: 0, ok: true}, // zero weight always fits
		{now: 1300 * ms, n: 4, ok: false, retry: -1},
	})
	if got := c.InFlight(); got != 3 {
		t.Fatalf("InFlight() = %d; want 3", got)
	}
}

func TestCompletionSetLimitKeepsAccounting(t *testing.T) {
	c := win.NewCompletion(win.Limit{N: 4, Per: time.Second})
	run(t, c, []step{
		{now: 0, n: 4, ok: true},
		{now: 10 * ms, n: 4, done: true},
	})
	c.SetLimit(at(20*ms), win.Limit{N: 2, Per: time.Second})
	// 4 units ended at 10ms count against the new N = 2 until 1.01s.
	run(t, c, []step{{now: 500 * ms, n: 1, ok: false, retry: 1010 * ms}})
	c.SetLimit(at(100*ms), win.Limit{N: 6, Per: time.Second})
	run(t, c, []step{
		{now: 500 * ms, n: 2, ok: true},
		{now: 500 * ms, n: 1, ok: false, retry: 1010 * ms},
	})
	c.SetLimit(at(600*ms), win.Limit{N: 6, Per: 2 * time.Second}) // a longer Per applies to logged ends
	run(t, c, []step{{now: 1500 * ms, n: 1, ok: false, retry: 2010 * ms}})

	// Ends that left the old window stay gone when Per grows.
	c = win.NewCompletion(win.Limit{N: 1, Per: time.Second})
	run(t, c, []step{{now: 0, n: 1, ok: true}, {now: 10 * ms, n: 1, done: true}})
	c.SetLimit(at(1500*ms), win.Limit{N: 1, Per: 3 * time.Second})
	run(t, c, []step{{now: 1500 * ms, n: 1, ok: true}})
}

func TestHugePerDoesNotWrap(t *testing.T) {
	forever := time.Duration(1<<63 - 1)
	for name, p := range map[string]win.Policy{
		"completion": win.NewCompletion(win.Limit{N: 1, Per: forever}),
		"start":      win.NewSlidingLog(win.Limit{N: 1, Per: forever}, forever),
	} {
		if _, ok := p.Admit(at(0), 1); !ok {
			t.Fatalf("%s: first Admit refused", name)
		}
		p.Done(at(ms), 1)
		got, ok := p.Admit(at(2*ms), 1)
		if ok || !got.After(at(2*ms)) {
			t.Fatalf("%s: Admit after a call under a Per of forever = (%v, %v); want a refusal with a future instant", name, got, ok)
		}
	}
}

func TestSlidingLogCancelAfterRaisedStart(t *testing.T) {
	// An Admit at an instant earlier than one already seen is recorded at
	// the later one; cancelling it must still give its unit back.
	w := win.NewSlidingLog(win.Limit{N: 2, Per: time.Second}, 0)
	run(t, w, []step{{now: 10 * ms, n: 1, ok: true}, {now: 0, n: 1, ok: true}})
	w.Cancel(at(0), 1)
	run(t, w, []step{{now: 10 * ms, n: 1, ok: true}})
}

func TestCompletionCancelLeavesNoStamp(t *testing.T) {
	c := win.NewCompletion(win.Limit{N: 1, Per: time.Second})
	run(t, c, []step{{now: 0, n: 1, ok: true}})
	c.Cancel(at(0), 1)
	run(t, c, []step{{now: 0, n: 1, ok: true}})
}

func TestCompletionPanicsOnOverDone(t *testing.T) {
	c := win.NewCompletion(win.Limit{N: 2, Per: time.Second})
	c.Admit(at(0), 1)
	defer func() {
		if recover() == nil {
			t.Fatal("Done of 2 units with 1 in flight did not panic")
		}
	}()
	c.Done(at(0), 2)
}

func TestSlidingLog(t *testing.T) {
	// 2 per second, starts recorded 50ms late.
	w := win.NewSlidingLog(win.Limit{N: 2, Per: time.Second}, 50*ms)
	run(t, w, []step{
		{now: 0, n: 1, ok: true},
		{now: 200 * ms, n: 1, ok: true},
		{now: 300 * ms, n: 1, ok: false, retry: 1050 * ms}, // 0 + 50ms + 1s
		{now: 900 * ms, n: 1, done: true},                  // ends change nothing
		{now: 1049 * ms, n: 1, ok: false, retry: 1050 * ms},
		{now: 1050 * ms, n: 1, ok: true},
		{now: 1050 * ms, n: 2, ok: false, retry: 2100 * ms}, // both recorded starts must leave
		{now: 1050 * ms, n: 3, ok: false, retry: -1},        // more than N: never
	})
	if w.Margin() != 50*ms {
		t.Fatalf("Margin() = %v", w.Margin())
	}
}

func TestSlidingLogCancelErasesTheStart(t *testing.T) {
	w := win.NewSlidingLog(win.Limit{N: 1, Per: time.Second}, 10*ms)
	run(t, w, []step{{now: 0, n: 1, ok: true}})
	w.Cancel(at(0), 1)
	run(t, w, []step{{now: 5 * ms, n: 1, ok: true}, {now: 5 * ms, n: 1, ok: false, retry: 1015 * ms}})
}

func TestSlidingLogZeroPerIsNoRate(t *testing.T) {
	w := win.NewSlidingLog(win.Limit{N: 2, Per: 0}, 10*ms)
	run(t, w, []step{
		{now: 0, n: 2, ok: true}, {now: 0, n: 2, ok: true}, {now: 0, n: 3, ok: false, retry: -1},
	})
}

func TestConstructorsPanicOnNegative(t *testing.T) {
	for name, f := range map[string]func(){
		"NewCompletion(-1)":      func() { win.NewCompletion(win.Limit{N: -1, Per: time.Second}) },
		"NewCompletion(per -1)":  func() { win.NewCompletion(win.Limit{N: 1, Per: -1}) },
		"NewSlidingLog(-1)":      func() { win.NewSlidingLog(win.Limit{N: -1, Per: time.Second}, 0) },
		"NewSlidingLog(margin)":  func() { win.NewSlidingLog(win.Limit{N: 1, Per: time.Second}, -1) },
		"Completion.SetLimit(-)": func() { win.NewCompletion(win.Limit{N: 1}).SetLimit(t0, win.Limit{N: -1}) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		}()
	}
}

// model is a brute-force reference: it keeps every stamped unit and counts
// them from scratch at each decision.
type model struct {
	limit    win.Limit
	margin   time.Duration
	start    bool // sliding log: stamps at admission; else completion stamps at Done
	inflight int64
	stamps   []time.Duration // one per unit, sorted
}

func (m *model) counted(now time.Duration) int64 {
	var k int64
	for _, s := range m.stamps {
		if s > now-m.limit.Per {
			k++
		}
	}
	return k
}

func (m *model) used(now time.Duration) int64 {
	if m.start {
		return m.counted(now)
	}
	return m.inflight + m.counted(now)
}

func (m *model) admit(now time.Duration, n int64) (time.Duration, bool) {
	if n == 0 || m.used(now)+n <= m.limit.N {
		m.inflight += n
		if m.start {
			for range n {
				m.stamps = append(m.stamps, now+m.margin)
			}
			slices.Sort(m.stamps)
		}
		return 0, true
	}
	base := m.inflight
	if m.start {
		base = 0
	}
	if base+n > m.limit.N {
		return -1, false
	}
	// The earliest stamp s, among those present, such that at s+Per the
	// units still counted leave room for n.
	for _, s := range m.stamps {
		t := s + m.limit.Per
		if t > now && m.used(t)+n <= m.limit.N {
			return t, false
		}
	}
	panic("model: no retry instant")
}

func (m *model) done(now time.Duration, n int64) {
	m.inflight -= n
	if !m.start {
		for range n {
			m.stamps = append(m.stamps, now)
		}
	}
}

// TestWindowsMatchModel drives each window and the brute-force model with the
// same random schedule and requires the same decisions and retry instants.
func TestWindowsMatchModel(t *testing.T) {
	for _, start := range []bool{false, true} {
		for seed := uint64(1); seed <= 40; seed++ {
			rng := rand.New(rand.NewPCG(seed, 7))
			l := win.Limit{N: 1 + rng.Int64N(8), Per: time.Duration(1+rng.IntN(20)) * 10 * ms}
			margin := time.Duration(rng.IntN(4)) * 5 * ms
			var p win.Policy = win.NewCompletion(l)
			if start {
				p = win.NewSlidingLog(l, margin)
			}
			m := &model{limit: l, margin: margin, start: start}
			var now time.Duration
			var held []int64
			for i := 0; i < 400; i++ {
				now += time.Duration(rng.IntN(4)) * 5 * ms
				if len(held) > 0 && rng.IntN(3) == 0 {
					k := rng.IntN(len(held))
					n := held[k]
					held = slices.Delete(held, k, k+1)
					p.Done(at(now), n)
					m.done(now, n)
					continue
				}
				n := rng.Int64N(l.N + 2)
				got, ok := p.Admit(at(now), n)
				wantRetry, wantOK := m.admit(now, n)
				want := time.Time{}
				if wantRetry >= 0 && !wantOK {
					want = at(wantRetry)
				}
				if ok != wantOK || !got.Equal(want) {
					t.Fatalf("start=%v seed %d step %d: Admit(t0+%v, %d) = (%v, %v); model says (%v, %v) [limit %v margin %v]",
						start, seed, i, now, n, got.Sub(t0), ok, want.Sub(t0), wantOK, l, margin)
				}
				if ok {
					held = append(held, n)
				}
			}
		}
	}
}

func BenchmarkCompletionAdmitDone(b *testing.B) {
	c := win.NewCompletion(win.Limit{N: 1 << 40, Per: time.Millisecond})
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(100)
		if _, ok := c.Admit(now, 1); !ok {
			b.Fatal("not admitted")
		}
		c.Done(now, 1)
	}
}

// TestCompletionCoalescesWithinASlot checks the completion window's one
// departure from the exact ring of completion stamps, against that exact
// model on random schedules with completions nanoseconds apart. A window
// of N < 1024 is exact to the nanosecond. Past 1024 log entries, whenever
// the window admits, the exact model admits too (it never counts a unit
// shorter), and when it refuses, the instant it names is no earlier than
// the exact one and less than one 1.024 µs slot later, however long
// completions keep coming less than a slot apart; a burst of completions
// within one slot then takes one entry.
func TestCompletionCoalescesWithinASlot(t *testing.T) {
	const per = time.Millisecond
	const slot = 1024 * time.Nanosecond
	type end struct {
		at time.Duration
		n  int64
	}
	for seed := range uint64(12) {
		r := rand.New(rand.NewPCG(seed, 7))
		n := int64(1 + r.IntN(1000)) // below 1024: exact
		if seed%2 == 1 {
			n = 1500 + r.Int64N(3000) // long logs: coalesced
		}
		c := win.NewCompletion(win.Limit{N: n, Per: per})
		var inflight int64
		var ends []end // in order; the exact model
		now := time.Duration(0)
		// exact returns whether w units fit at now, and if not the instant
		// they will (-1: only a Done can help).
		exact := func(w int64) (bool, time.Duration) {
			for len(ends) > 0 && ends[0].at <= now-per {
				ends = ends[1:]
			}
			var logged int64
			for _, e := range ends {
				logged += e.n
			}
			free := n - inflight - logged
			if w <= free {
				return true, 0
			}
			if w > n-inflight {
				return false, -1
			}
			k := w - free
			for _, e := range ends {
				if k <= e.n {
					return false, e.at + per
				}
				k -= e.n
			}
			panic("unreachable")
		}
		for range 12000 {
			now += time.Duration(r.IntN(400)) // ns apart: many within a slot
			if r.IntN(2) == 0 && inflight > 0 {
				d := 1 + r.Int64N(min(inflight, 3))
				c.Done(at(now), d)
				inflight -= d
				ends = append(ends, end{now, d})
				continue
			}
			w := 1 + r.Int64N(min(n, 3))
			ok, want := exact(w)
			got, gotOK := c.Admit(at(now), w)
			late := got.Sub(t0) - want
			if n < 1024 {
				if gotOK != ok || !gotOK && (want == -1) != got.IsZero() || !gotOK && want != -1 && late != 0 {
					t.Fatalf("seed %d (N %d) at %v: Admit(%d) = (%v, %v); the exact window gives (%v, %v)",
						seed, n, now, w, got.Sub(t0), gotOK, want, ok)
				}
			}
			switch {
			case gotOK && !ok:
				t.Fatalf("seed %d (N %d) at %v: %d units admitted; the exact window refuses them", seed, n, now, w)
			case gotOK:
				inflight += w
			case ok:
				// The exact window admits now; the window, which counts
				// coalesced units less than a slot longer, within a slot.
				if got.Sub(t0) >= now+slot {
					t.Fatalf("seed %d (N %d) at %v: %d units refused until %v; the exact window admits them now", seed, n, now, w, got.Sub(t0))
				}
			case want == -1:
				if !got.IsZero() {
					t.Fatalf("seed %d (N %d) at %v: refused until %v; only a Done can help", seed, n, now, got.Sub(t0))
				}
			case late < 0 || late >= slot:
				t.Fatalf("seed %d (N %d) at %v: %d units refused until %v; exact %v (want less than a slot after it)",
					seed, n, now, w, got.Sub(t0), want)
			}
		}
	}

	// A burst of completions within one slot takes one log entry once the
	// log is long: all of it leaves the window together, at the last end
	// + Per. The same burst in a short log is exact: its first unit leaves
	// at its own end + Per.
	for _, long := range []bool{false, true} {
		const per = 10 * time.Millisecond
		c := win.NewCompletion(win.Limit{N: 3000, Per: per})
		start := time.Duration(0)
		if long { // 1100 completions 2 µs apart: 1100 entries, all within Per
			if _, ok := c.Admit(at(0), 1100); !ok {
				t.Fatal("refused with room")
			}
			for i := range 1100 {
				c.Done(at(time.Duration(i)*2*time.Microsecond), 1)
			}
			start = 2250 * slot // 2.304 ms, the start of a slot
		}
		if _, ok := c.Admit(at(start), 100); !ok {
			t.Fatal("refused with room")
		}
		for i := range 100 {
			c.Done(at(start+time.Duration(i*9)), 1) // within 891 ns of start
		}
		// At start + Per the 1100 early completions have left the window;
		// of the burst, exactly only the first unit has.
		got, ok := c.Admit(at(start+per), 2901)
		switch {
		case !long && !ok:
			t.Fatalf("short log: Admit(2901) at the burst's first end + Per refused until %v; exact admits", got.Sub(t0))
		case long && (ok || !got.Equal(at(start+per+891))):
			t.Fatalf("long log: Admit(2901) at start+Per = (%v, %v); want refused until start+Per+891ns, the burst's last end", got.Sub(t0), ok)
		case long:
			if _, ok := c.Admit(at(start+per+891), 3000); !ok {
				t.Fatal("long log: the whole burst did not leave the window together")
			}
		}
	}
}
