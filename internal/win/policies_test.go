package win_test

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/win"
	"github.com/ratesem/ratesem/window"
)

// Exact schedules, one table per window; the comments show the arithmetic.
// t0 is midnight UTC, so windows aligned to the Unix epoch start at t0.

func TestFixedWindow(t *testing.T) {
	w := win.NewFixedWindow(win.Limit{N: 3, Per: time.Second})
	run(t, w, []step{
		{now: 100 * ms, n: 2, ok: true},
		{now: 900 * ms, n: 1, ok: true},
		{now: 999 * ms, n: 1, ok: false, retry: time.Second}, // 3 used: the next window
		{now: 999 * ms, n: 4, ok: false, retry: -1},          // heavier than N: never
		{now: time.Second, n: 3, ok: true},                   // the count resets at the boundary
		{now: 1500 * ms, n: 1, ok: false, retry: 2 * time.Second},
	})
	if got := w.Used(at(1500 * ms)); got != 3 {
		t.Fatalf("Used = %d, want 3", got)
	}
}

func TestSlidingWindowCounter(t *testing.T) {
	w := win.NewSlidingWindowCounter(win.Limit{N: 10, Per: time.Second})
	run(t, w, []step{
		{now: 500 * ms, n: 10, ok: true},
		// Window 1 at 1.2s: 10·(1−0.2) + 0 = 8, room for 2.
		{now: 1200 * ms, n: 2, ok: true},
		// 10·(1−e) + 2 + 1 ≤ 10 needs e ≥ 0.3: at 1.3s.
		{now: 1200 * ms, n: 1, ok: false, retry: 1300 * ms},
		{now: 1300 * ms, n: 1, ok: true},
		// cur 3: 3 + 8 > 10 in window 1; in window 2, prev 3: 3·(1−e) + 8 ≤ 10 at e = 1/3.
		{now: 1300 * ms, n: 8, ok: false, retry: 2*time.Second + 333333334},
		{now: 2*time.Second + 333333333, n: 8, ok: false, retry: 2*time.Second + 333333334},
		{now: 2*time.Second + 333333334, n: 8, ok: true},
	})
}

func TestSubWindowCounter(t *testing.T) {
	// 4 blocks of 250ms.
	w := win.NewSubWindowCounter(win.Limit{N: 4, Per: time.Second}, 4)
	run(t, w, []step{
		{now: 100 * ms, n: 1, ok: true},                      // block 0
		{now: 300 * ms, n: 2, ok: true},                      // block 1
		{now: 800 * ms, n: 1, ok: true},                      // block 3
		{now: 900 * ms, n: 1, ok: false, retry: time.Second}, // block 0 leaves at 1s
		{now: 900 * ms, n: 3, ok: false, retry: 1250 * ms},   // blocks 0 and 1 must leave
		{now: time.Second, n: 1, ok: true},                   // block 4
		{now: 5 * time.Second, n: 4, ok: true},               // long idle: all blocks clear
		{now: 5*time.Second + 250*ms, n: 1, ok: false, retry: 6 * time.Second},
	})
	if w.Blocks() != 4 {
		t.Fatalf("Blocks() = %d", w.Blocks())
	}
}

func TestTokenBucket(t *testing.T) {
	// 2 units per second: one every 500ms; burst 3.
	b := win.NewTokenBucket(win.Limit{N: 2, Per: time.Second}, 3)
	run(t, b, []step{
		{now: 0, n: 3, ok: true},                   // full at first
		{now: 0, n: 1, ok: false, retry: 500 * ms}, // one unit refills in 500ms
		{now: 200 * ms, n: 2, ok: false, retry: time.Second},
		{now: 750 * ms, n: 1, ok: true}, // 1.5 units: take 1, 0.5 left
		{now: 750 * ms, n: 1, ok: false, retry: time.Second},
		{now: 10 * time.Second, n: 4, ok: false, retry: -1}, // heavier than the burst
		{now: 10 * time.Second, n: 3, ok: true},             // capped at 3, not 19
	})
	if got := b.Tokens(at(10 * time.Second)); got != 0 {
		t.Fatalf("Tokens = %d, want 0", got)
	}
}

func TestLeakyBucketLevel(t *testing.T) {
	b := win.NewLeakyBucket(win.Limit{N: 2, Per: time.Second}, 0)
	run(t, b, []step{
		{now: 0, n: 2, ok: true},
		{now: 0, n: 1, ok: false, retry: 500 * ms},
	})
	for _, c := range []struct {
		now  time.Duration
		want int64
	}{{0, 2}, {250 * ms, 2}, {500 * ms, 1}, {999 * ms, 1}, {time.Second, 0}} {
		if got := b.Level(at(c.now)); got != c.want {
			t.Fatalf("Level(t0+%v) = %d, want %d", c.now, got, c.want)
		}
	}
}

func TestGCRA(t *testing.T) {
	// 4 per second, I = 250ms, burst 2: tolerance (2−n)·I.
	g := win.NewGCRA(win.Limit{N: 4, Per: time.Second}, 2)
	run(t, g, []step{
		{now: 0, n: 2, ok: true},                   // TAT 500ms
		{now: 0, n: 1, ok: false, retry: 250 * ms}, // TAT − (2−1)·I
		{now: 250 * ms, n: 1, ok: true},            // TAT 750ms
		{now: 300 * ms, n: 2, ok: false, retry: 750 * ms},
		{now: 750 * ms, n: 2, ok: true},
		{now: 750 * ms, n: 3, ok: false, retry: -1},
	})
	if g.EmissionInterval() != 250*ms || g.Burst() != 2 || g.Capacity() != 2 {
		t.Fatalf("I = %v, burst %d, capacity %d", g.EmissionInterval(), g.Burst(), g.Capacity())
	}
	// I = 1s/3 rounds up to 333333334ns: slower, never faster.
	if got := win.NewGCRA(win.Limit{N: 3, Per: time.Second}, 0).EmissionInterval(); got != 333333334 {
		t.Fatalf("I for 3/s = %v", got)
	}
}

func TestPacer(t *testing.T) {
	// 4 per second: starts 250ms apart; a call of 2 holds the next 500ms.
	p := win.NewPacer(win.Limit{N: 4, Per: time.Second})
	run(t, p, []step{
		{now: 0, n: 1, ok: true},
		{now: 0, n: 1, ok: false, retry: 250 * ms},
		{now: 250 * ms, n: 2, ok: true},
		{now: 600 * ms, n: 1, ok: false, retry: 750 * ms},
		{now: 750 * ms, n: 1, ok: true},
		{now: 5 * time.Second, n: 1, ok: true}, // idle: no burst saved up
		{now: 5 * time.Second, n: 1, ok: false, retry: 5*time.Second + 250*ms},
		{now: 6 * time.Second, n: 5, ok: false, retry: -1}, // capacity N
	})
}

// With I whole, GCRA is the token bucket kept as one instant: the same
// decisions and the same retry instants on any schedule.
func TestGCRAIsTokenBucket(t *testing.T) {
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 3))
		l := win.Limit{N: 1 + rng.Int64N(20), Per: time.Second}
		l.Per -= l.Per % time.Duration(l.N) // I whole
		burst := 1 + rng.Int64N(2*l.N)
		g, b := win.NewGCRA(l, burst), win.NewTokenBucket(l, burst)
		now := at(0)
		for i := range 500 {
			now = now.Add(time.Duration(rng.Int64N(int64(l.Per) / 4)))
			n := 1 + rng.Int64N(burst+1)
			ag, okg := g.Admit(now, n)
			ab, okb := b.Admit(now, n)
			if okg != okb || !ag.Equal(ab) {
				t.Fatalf("seed %d step %d (%v, burst %d): Admit(%v, %d): GCRA (%v, %v), token bucket (%v, %v)",
					seed, i, l, burst, now.Sub(t0), n, ag.Sub(t0), okg, ab.Sub(t0), okb)
			}
		}
	}
}

// SetLimit keeps the accounting of every window: what was admitted before
// still counts against the new limit, and raising the limit never delays.
func TestSetLimitKeepsAccounting(t *testing.T) {
	l := win.Limit{N: 10, Per: time.Second}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			p := row.make(l)
			k := min(5, p.Capacity())
			if _, ok := p.Admit(at(100*ms), k); !ok {
				t.Fatalf("%d of 10 refused", k)
			}
			p.Done(at(100*ms), k)
			lower := win.Limit{N: k, Per: time.Second}
			p.SetLimit(at(100*ms), lower)
			if p.Limit() != lower {
				t.Fatalf("Limit() = %v after SetLimit(%v)", p.Limit(), lower)
			}
			// k already used of the new k: nothing more now.
			before, ok := p.Admit(at(100*ms), 1)
			if ok {
				t.Fatal("admitted past the lowered limit: the accounting was lost")
			}
			p.SetLimit(at(100*ms), win.Limit{N: 20, Per: time.Second})
			if after, ok := p.Admit(at(100*ms), 1); !ok && !after.Before(before) {
				t.Fatalf("raising the limit moved the next admission from %v to %v", before.Sub(t0), after.Sub(t0))
			}
		})
	}
}

// Per 0 means no rate, N 0 admits nothing but zero weights, negative input
// panics with the package's name.
func TestZeroAndInvalidInput(t *testing.T) {
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			norate := row.make(win.Limit{N: 3})
			for i := range 100 {
				if _, ok := norate.Admit(at(0), 1+int64(i%3)); !ok {
					t.Fatalf("Per 0: call %d refused", i)
				}
				norate.Done(at(0), 1+int64(i%3))
			}
			if at, ok := norate.Admit(at(0), 4); ok || !at.IsZero() {
				t.Fatalf("Per 0: weight 4 > N 3 = (%v, %v), want refused for good", at, ok)
			}
			zero := row.make(win.Limit{Per: time.Second})
			if _, ok := zero.Admit(at(0), 0); !ok {
				t.Fatal("N 0: weight 0 refused")
			}
			// (A token bucket with a burst given explicitly holds that
			// burst once, and never refills: x/time/rate's Limit 0.)
			if fixedBurst := zero.Capacity() > 0; !fixedBurst {
				if at, ok := zero.Admit(at(0), 1); ok || !at.IsZero() {
					t.Fatalf("N 0: weight 1 = (%v, %v), want refused for good", at, ok)
				}
			}
			mustPanic(t, func() { row.make(win.Limit{N: -1, Per: time.Second}) })
			mustPanic(t, func() { row.make(win.Limit{N: 1, Per: -time.Second}) })
			mustPanic(t, func() { row.make(win.Limit{N: 1, Per: time.Second}).SetLimit(at(0), win.Limit{N: -1}) })
		})
	}
	mustPanic(t, func() { win.NewTokenBucket(win.Limit{N: 1, Per: time.Second}, -1) })
	mustPanic(t, func() { win.NewGCRA(win.Limit{N: 1, Per: time.Second}, -1) })
	mustPanic(t, func() { win.NewSubWindowCounter(win.Limit{N: 1, Per: time.Second}, 0) })
}

func mustPanic(t *testing.T, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	f()
}

func TestLimiter(t *testing.T) {
	l := window.NewLimiter(win.NewTokenBucket(win.Limit{N: 2, Per: time.Second}, 2))
	if !l.AllowN(at(0), 2) || l.AllowN(at(0), 1) {
		t.Fatal("AllowN: want 2 admitted, then refused")
	}
	if d, err := l.TryN(at(0), 1); d != 500*ms || err != nil {
		t.Fatalf("TryN = (%v, %v), want (500ms, nil)", d, err)
	}
	if d, err := l.TryN(at(500*ms), 1); d != 0 || err != nil {
		t.Fatalf("TryN at the instant = (%v, %v), want admitted", d, err)
	}
	if _, err := l.TryN(at(time.Second), 3); !errors.Is(err, ratesem.ErrWeightTooLarge) {
		t.Fatalf("TryN(3) with burst 2: err = %v, want ratesem.ErrWeightTooLarge", err)
	}
	c := window.NewLimiter(win.NewCompletion(win.Limit{N: 1, Per: time.Second}))
	if d, err := c.TryN(at(0), 1); d != 0 || err != nil {
		t.Fatalf("completion TryN = (%v, %v)", d, err)
	}
	if _, err := c.TryN(at(0), 1); !errors.Is(err, ratesem.ErrInFlight) {
		t.Fatalf("completion, 1 in flight: err = %v, want ratesem.ErrInFlight", err)
	}
	c.DoneN(at(100*ms), 1)
	if d, _ := c.TryN(at(100*ms), 1); d != time.Second {
		t.Fatalf("completion after Done: retry in %v, want 1s", d)
	}
	c.SetLimit(at(100*ms), win.Limit{N: 2, Per: time.Second})
	if !c.AllowN(at(100*ms), 1) {
		t.Fatal("SetLimit through the Limiter did not take")
	}
	if !window.NewLimiter(win.NewPacer(win.Limit{N: 1000, Per: time.Second})).AllowN(time.Now(), 1) {
		t.Fatal("AllowN on an idle pacer refused")
	}
}

// Reconciling with a server's count never loosens a window: Consume makes
// Used at least the server's figure, and the window refuses what the server
// would refuse.
func TestReconciler(t *testing.T) {
	l := win.Limit{N: 10, Per: time.Second}
	tested := 0
	for _, row := range rows {
		r, ok := row.make(l).(window.Reconciler)
		if g, isGCRA := r.(*win.GCRA); !ok || r.(win.Policy).Capacity() != l.N || isGCRA && g.Burst() == 1 {
			continue // a pacer, or a bucket smaller than N, refuses the last unit anyway
		}
		tested++
		t.Run(row.name, func(t *testing.T) {
			p := r.(win.Policy)
			if _, ok := p.Admit(at(100*ms), 3); !ok {
				t.Fatal("3 of 10 refused")
			}
			p.Done(at(100*ms), 3)
			if got := r.Used(at(100 * ms)); got != 3 {
				t.Fatalf("Used = %d after 3 units, want 3", got)
			}
			r.Consume(at(100*ms), 6) // the server counts 9: another client spent 6
			if got := r.Used(at(100 * ms)); got != 9 {
				t.Fatalf("Used = %d after Consume(6), want 9", got)
			}
			if _, ok := p.Admit(at(100*ms), 2); ok {
				t.Fatal("admitted 2 with 9 of 10 used")
			}
			if _, ok := p.Admit(at(100*ms), 1); !ok {
				t.Fatal("refused 1 with 9 of 10 used")
			}
		})
	}
	if tested < 6 {
		t.Fatalf("only %d windows implement Reconciler", tested)
	}
}

// Cancelling a start whose record has already left the window erases
// nothing: the units of newer starts stay counted.
func TestSlidingLogCancelAfterExpiry(t *testing.T) {
	w := win.NewSlidingLog(win.Limit{N: 2, Per: time.Second}, 0)
	mustAdmit(t, w, 0, 1, true)
	mustAdmit(t, w, 1500*ms, 2, true) // the start at 0 has left the window
	w.Cancel(at(0), 1)
	mustAdmit(t, w, 1500*ms, 1, false)
}

// Limiter.DoneN's doc said only the completion window reads it; the fixed
// completion window needs it too: its calls count in every aligned window
// until they end, so without DoneN they stay in flight forever and TryN
// fails with ratesem.ErrInFlight in every later window.
func TestLimiterFixedCompletionNeedsDoneN(t *testing.T) {
	l := win.Limit{N: 2, Per: time.Minute}
	start := t0 // a whole minute: the start of an aligned window
	never := window.NewLimiter(win.NewFixedCompletion(l))
	done := window.NewLimiter(win.NewFixedCompletion(l))
	for _, lim := range []*window.Limiter{never, done} {
		if !lim.AllowN(start, 2) {
			t.Fatal("AllowN(2) of 2 per minute refused")
		}
	}
	for _, later := range []time.Duration{time.Minute, time.Hour, 24 * time.Hour} {
		if d, err := never.TryN(start.Add(later), 1); !errors.Is(err, ratesem.ErrInFlight) {
			t.Fatalf("no DoneN, %v later: TryN = (%v, %v), want ratesem.ErrInFlight", later, d, err)
		}
	}
	// Ended in the next window: they count in it, not after it.
	done.DoneN(start.Add(time.Minute+time.Second), 2)
	if d, err := done.TryN(start.Add(time.Minute+time.Second), 1); d != 59*time.Second || err != nil {
		t.Fatalf("after DoneN, in the window the calls ended in: TryN = (%v, %v), want (59s, nil)", d, err)
	}
	if d, err := done.TryN(start.Add(2*time.Minute), 1); d != 0 || err != nil {
		t.Fatalf("after DoneN, the window after: TryN = (%v, %v), want admitted", d, err)
	}
}
