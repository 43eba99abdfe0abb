package semaphore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/win"
	"github.com/ratesem/ratesem/semaphore"
	"github.com/ratesem/ratesem/window"
)

// One conformance suite, run against a RateSemaphore over every window of
// package window, the way uber-go/ratelimit runs one suite against each of
// its limiters: the window's bound over every recorded start, FIFO, the
// concurrency cap, exact wake-up instants, weights, a weight larger than the
// capacity, cancellation, SetLimit mid-stream, Pause, zero and invalid input.

type policyCase struct {
	name string
	make func(l window.Limit) window.Policy
	// bound is the most units that may start in any window of span, for
	// calls of weight at most maxW (the guarantee table of package window).
	bound func(l window.Limit, maxW int64) (units int64, span time.Duration)
}

func perN(mul, add int64) func(window.Limit, int64) (int64, time.Duration) {
	return func(l window.Limit, _ int64) (int64, time.Duration) { return mul*l.N + add, l.Per }
}

var policyCases = []policyCase{
	{"completion", func(l window.Limit) window.Policy { return window.NewCompletion(l) }, perN(1, 0)},
	{"sliding-log", func(l window.Limit) window.Policy { return window.NewSlidingLog(l, 10*time.Millisecond) },
		func(l window.Limit, _ int64) (int64, time.Duration) { return l.N, l.Per + 10*time.Millisecond }},
	{"fixed-window", func(l window.Limit) window.Policy { return window.NewFixedWindow(l) }, perN(2, 0)},
	{"fixed-completion", func(l window.Limit) window.Policy { return window.NewFixedCompletion(l) }, perN(2, 0)},
	{"sliding-window-counter", func(l window.Limit) window.Policy { return window.NewSlidingWindowCounter(l) }, perN(2, -1)},
	{"sub-window-counter", func(l window.Limit) window.Policy { return window.NewSubWindowCounter(l, 5) },
		func(l window.Limit, _ int64) (int64, time.Duration) { return l.N, l.Per - l.Per/5 }},
	{"token-bucket", func(l window.Limit) window.Policy { return window.NewTokenBucket(l, 0) }, perN(2, -1)},
	{"leaky-bucket", func(l window.Limit) window.Policy { return window.NewLeakyBucket(l, 0) }, perN(2, -1)},
	{"gcra", func(l window.Limit) window.Policy { return window.NewGCRA(l, 0) }, perN(2, -1)},
	{"pacer", func(l window.Limit) window.Policy { return window.NewPacer(l) },
		func(l window.Limit, maxW int64) (int64, time.Duration) { return l.N - 1 + maxW, l.Per }},
}

// TestConformanceProperty runs the property test of property_test.go over
// every policy: random weights, holds, bursts, deadlines and cancellations
// on virtual time, then the window's bound over all recorded starts (the
// completion window's own invariant is checked by checkProperty), the
// concurrency cap, FIFO, and balanced counters.
func TestConformanceProperty(t *testing.T) {
	for _, pc := range policyCases {
		for _, conc := range []int64{0, 3} {
			for seed := uint64(1); seed <= 2; seed++ {
				t.Run(fmt.Sprintf("%s/conc%d/seed%d", pc.name, conc, seed), func(t *testing.T) {
					c := propertyCase{n: 8, conc: conc, interval: time.Second, policy: pc.make}
					recs, stats := runProperty(t, c, seed, 800)
					checkProperty(t, c, recs, stats)
					maxW := c.n
					if conc > 0 {
						maxW = conc
					}
					bound, span := pc.bound(window.Limit{N: c.n, Per: c.interval}, maxW)
					var starts []time.Duration
					var weights []int64
					for _, r := range recs {
						if r.ok && r.weight > 0 {
							starts, weights = append(starts, r.start), append(weights, r.weight)
						}
					}
					if got, at := maxStarted(starts, weights, span); got > bound {
						t.Fatalf("%d units started in the window of %v ending at %v; the bound is %d", got, span, at, bound)
					}
				})
			}
		}
	}
}

// maxStarted returns the most units that started in any window (t−span, t],
// and its t; starts are in any order.
func maxStarted(starts []time.Duration, weights []int64, span time.Duration) (int64, time.Duration) {
	var best int64
	var bestAt time.Duration
	for _, ti := range starts {
		var sum int64
		for j, tj := range starts {
			if tj <= ti && tj > ti-span {
				sum += weights[j]
			}
		}
		if sum > best {
			best, bestAt = sum, ti
		}
	}
	return best, bestAt
}

func TestConformance(t *testing.T) {
	l := window.Limit{N: 4, Per: time.Second}
	for _, pc := range policyCases {
		t.Run(pc.name, func(t *testing.T) {
			t.Run("waits-exactly", func(t *testing.T) { conformWaitsExactly(t, pc, l) })
			t.Run("weights", func(t *testing.T) { conformWeights(t, pc, l) })
			t.Run("too-large", func(t *testing.T) { conformTooLarge(t, pc, l) })
			t.Run("cancel", func(t *testing.T) { conformCancel(t, pc, l) })
			t.Run("setlimit", func(t *testing.T) { conformSetLimit(t, pc, l) })
			t.Run("pause", func(t *testing.T) { conformPause(t, pc, l) })
			t.Run("zero-and-invalid", func(t *testing.T) { conformZeroInvalid(t, pc, l) })
		})
	}
}

// conformWaitsExactly: every Acquire returns at the instant a twin policy,
// fed the same calls, names as the earliest admission: no sooner (the rule)
// and no later (no throughput lost, no polling lag).
func conformWaitsExactly(t *testing.T, pc policyCase, l window.Limit) {
	synctest.Test(t, func(t *testing.T) {
		s := semaphore.NewWithPolicy(pc.make(l))
		twin := pc.make(l)
		for i := range 12 {
			n := 1 + int64(i%3)
			now := time.Now()
			want, ok := twin.Admit(now, n)
			if ok {
				want = now
			} else if want.IsZero() {
				t.Fatalf("call %d: the twin says only a Release helps, but nothing is in flight", i)
			} else if _, ok := twin.Admit(want, n); !ok {
				t.Fatalf("call %d: the twin refuses at its own retry instant", i)
			}
			if err := s.Acquire(context.Background(), n); err != nil {
				t.Fatal(err)
			}
			if got := time.Now(); !got.Equal(want) {
				t.Fatalf("call %d of %d units admitted after %v; the window allows it after %v",
					i, n, got.Sub(now), want.Sub(now))
			}
			time.Sleep(10 * time.Millisecond) // the call's latency
			s.Release(n)
			twin.Done(time.Now(), n)
		}
	})
}

// conformWeights: a call of w units counts w against the window.
func conformWeights(t *testing.T, pc policyCase, l window.Limit) {
	synctest.Test(t, func(t *testing.T) {
		s := semaphore.NewWithPolicy(pc.make(l))
		if err := s.Acquire(context.Background(), 3); err != nil {
			t.Fatal(err)
		}
		s.Release(3)
		if s.TryAcquire(2) {
			t.Fatal("TryAcquire(2) admitted right after a call of 3 under a limit of 4")
		}
		time.Sleep(3 * l.Per)
		if !s.TryAcquire(4) {
			t.Fatal("TryAcquire(4) refused after an idle spell of 3 windows")
		}
		s.Release(4)
	})
}

// conformTooLarge: a weight above the capacity is an error at once, never a
// wait forever; the semaphore stays usable.
func conformTooLarge(t *testing.T, pc policyCase, l window.Limit) {
	synctest.Test(t, func(t *testing.T) {
		for _, p := range []window.Policy{pc.make(l), pc.make(window.Limit{N: 4, Per: time.Second})} {
			s := semaphore.NewWithPolicy(p)
			err := s.Acquire(context.Background(), p.Capacity()+1)
			if !errors.Is(err, ratesem.ErrWeightTooLarge) {
				t.Fatalf("Acquire(capacity+1) = %v, want ratesem.ErrWeightTooLarge", err)
			}
			if s.TryAcquire(p.Capacity() + 1) {
				t.Fatal("TryAcquire(capacity+1) admitted")
			}
			if err := s.Acquire(context.Background(), 1); err != nil {
				t.Fatalf("Acquire(1) after the refusal: %v", err)
			}
			s.Release(1)
		}
	})
}

// conformCancel: a waiter cancelled before its turn leaves no trace; the
// waiter behind it is admitted exactly when it would have been without it.
func conformCancel(t *testing.T, pc policyCase, l window.Limit) {
	admitAt := func(withCancelled bool) time.Duration {
		var d time.Duration
		synctest.Test(t, func(t *testing.T) {
			begin := time.Now()
			s := semaphore.NewWithPolicy(pc.make(l))
			if err := s.Acquire(context.Background(), l.N); err != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
			s.Release(l.N)
			if withCancelled {
				ctx, cancel := context.WithCancel(context.Background())
				errc := make(chan error, 1)
				go func() { errc <- s.Acquire(ctx, 2) }()
				synctest.Wait()
				cancel()
				if err := <-errc; !errors.Is(err, context.Canceled) {
					t.Fatalf("cancelled Acquire = %v, want context.Canceled", err)
				}
			}
			if err := s.Acquire(context.Background(), 1); err != nil {
				t.Fatal(err)
			}
			d = time.Since(begin)
			s.Release(1)
			if st := s.Stats(); st.InFlight != 0 || st.Waiting != 0 || st.Admitted != 2 {
				t.Fatalf("Stats() = %+v: the cancelled waiter left a trace", st)
			}
		})
		return d
	}
	if with, without := admitAt(true), admitAt(false); with != without {
		t.Fatalf("the waiter behind a cancelled one was admitted at %v, and at %v without it", with, without)
	}
}

// conformSetLimit: lowering the limit keeps what was admitted counted;
// raising it wakes waiters at once; the new N caps the weight.
func conformSetLimit(t *testing.T, pc policyCase, l window.Limit) {
	synctest.Test(t, func(t *testing.T) {
		s := semaphore.NewWithPolicy(pc.make(l))
		if err := s.Acquire(context.Background(), 2); err != nil {
			t.Fatal(err)
		}
		s.Release(2)
		if err := s.SetLimit(2, l.Per); err != nil {
			t.Fatal(err)
		}
		if s.TryAcquire(1) {
			t.Fatal("admitted at once after lowering the limit to what was just used")
		}
		if err := s.Acquire(context.Background(), 3); !errors.Is(err, ratesem.ErrWeightTooLarge) {
			t.Fatalf("Acquire(3) under a limit of 2 = %v, want ratesem.ErrWeightTooLarge", err)
		}
		begin := time.Now()
		done := make(chan time.Duration)
		go func() {
			if err := s.Acquire(context.Background(), 1); err != nil {
				t.Error(err)
			}
			done <- time.Since(begin)
			s.Release(1)
		}()
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if err := s.SetLimit(100, l.Per); err != nil {
			t.Fatal(err)
		}
		select {
		case d := <-done:
			// The pacer has no burst: its debt is repaid at the new rate.
			if _, pacer := pc.make(l).(*win.GCRA); d > time.Millisecond && !(pacer && d < l.Per) {
				t.Fatalf("waiter admitted %v after the limit was raised", d-time.Millisecond)
			}
		case <-time.After(l.Per):
			t.Fatal("waiter still waiting a whole window after the limit was raised")
		}
		if got := s.Limit(); got != (window.Limit{N: 100, Per: l.Per}) {
			t.Fatalf("Limit() = %v", got)
		}
	})
}

// conformPause: no start before the pause ends, then the window's own rule.
func conformPause(t *testing.T, pc policyCase, l window.Limit) {
	synctest.Test(t, func(t *testing.T) {
		s := semaphore.NewWithPolicy(pc.make(l))
		begin := time.Now()
		s.PauseFor(5 * time.Second)
		if s.TryAcquire(1) {
			t.Fatal("TryAcquire admitted during a pause")
		}
		if err := s.Acquire(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(begin); d != 5*time.Second {
			t.Fatalf("admitted %v after a 5s pause began, want exactly 5s", d)
		}
		s.Release(1)
	})
}

// conformZeroInvalid: weight 0 always passes, negative input panics or
// errs, as documented.
func conformZeroInvalid(t *testing.T, pc policyCase, l window.Limit) {
	synctest.Test(t, func(t *testing.T) {
		s := semaphore.NewWithPolicy(pc.make(l))
		for range 100 {
			if err := s.Acquire(context.Background(), 0); err != nil {
				t.Fatal(err)
			}
		}
		if !s.TryAcquire(0) {
			t.Fatal("TryAcquire(0) refused")
		}
		if err := s.SetLimit(-1, l.Per); err == nil {
			t.Fatal("SetLimit(-1) accepted")
		}
		if got := s.Limit(); got != l {
			t.Fatalf("Limit() = %v after a rejected SetLimit, want %v", got, l)
		}
		if err := s.Acquire(context.Background(), -1); !errors.Is(err, ratesem.ErrNegativeWeight) {
			t.Fatalf("Acquire(-1) = %v, want ratesem.ErrNegativeWeight", err)
		}
		if s.TryAcquire(-1) {
			t.Fatal("TryAcquire(-1) admitted")
		}
		mustPanic(t, func() { s.Release(-1) })
		mustPanic(t, func() { s.Release(1) })
		mustPanic(t, func() { semaphore.NewWithPolicy(nil) })
		mustPanic(t, func() { semaphore.NewWithPolicy(pc.make(l), semaphore.WithStartWindow(0)) })
		// A context already done never acquires, even with room.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := s.Acquire(ctx, 1); !errors.Is(err, context.Canceled) {
			t.Fatalf("Acquire on a done context = %v", err)
		}
	})
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

// The hot path allocates nothing when a call is admitted at once, whatever
// the window (DESIGN.md): limits that never bind, after a warm-up that lets
// the logs reach their steady size.
func TestConformanceAdmittedAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	for _, pc := range policyCases {
		s := semaphore.NewWithPolicy(pc.make(window.Limit{N: 1 << 40, Per: time.Millisecond}))
		for range 100000 {
			if err := s.Acquire(ctx, 1); err != nil {
				t.Fatalf("%s: %v", pc.name, err)
			}
			s.Release(1)
		}
		allocs := testing.AllocsPerRun(1000, func() {
			if err := s.Acquire(ctx, 1); err != nil {
				t.Fatal(err)
			}
			s.Release(1)
		})
		if allocs != 0 {
			t.Errorf("%s: %.1f allocations per admitted Acquire+Release, want 0", pc.name, allocs)
		}
	}
}
