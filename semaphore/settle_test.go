package semaphore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/semaphore"
	"github.com/ratesem/ratesem/window"
)

// A refund makes room at once, a debit holds the next calls back, under the
// default completion window and under a token bucket.
func TestBeginEndSettles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := semaphore.New(10, time.Second)
		c, err := s.Begin(ctx, 10)
		if err != nil || c.Weight() != 10 {
			t.Fatalf("Begin = %v, %v", c, err)
		}
		c.End(4) // 6 units back at once
		if !s.TryAcquire(6) {
			t.Fatal("refund of 6 units: TryAcquire(6) = false")
		}
		if s.TryAcquire(1) {
			t.Fatal("4 settled units and 6 in flight: TryAcquire(1) = true")
		}
		s.Release(6)
		start := time.Now()
		d, _ := s.Begin(ctx, 1) // waits for the 4 and the 6 to leave the window
		if w := time.Since(start); w != time.Second {
			t.Fatalf("waited %v, want 1s", w)
		}
		d.End(25) // a debit of 24: the window counts 25 > 10 for a second
		start = time.Now()
		if err := s.Acquire(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if w := time.Since(start); w != time.Second {
			t.Fatalf("after a debit, waited %v, want 1s", w)
		}

		b := semaphore.NewWithPolicy(window.NewTokenBucket(window.Limit{N: 10, Per: time.Second}, 10))
		c, _ = b.Begin(ctx, 10)
		c.End(18) // 8 of debt: 0.9 s to the next token
		start = time.Now()
		b.Acquire(ctx, 1)
		if w := time.Since(start); w != 900*time.Millisecond {
			t.Fatalf("token bucket after a debit of 8: waited %v, want 0.9s", w)
		}
		b.Release(1)
		time.Sleep(time.Second)
		c, _ = b.Begin(ctx, 10)
		c.End(30) // 20 of debt, saturating at one Per's refill (10): 1.1 s
		start = time.Now()
		b.Acquire(ctx, 1)
		if w := time.Since(start); w != 1100*time.Millisecond {
			t.Fatalf("token bucket after a debit of 20: waited %v, want 1.1s (the debt saturates at N)", w)
		}
	})
}

// Begin fails as Acquire does, and End's misuse panics.
func TestBeginErrorsAndEndMisuse(t *testing.T) {
	s := semaphore.New(5, time.Second)
	if _, err := s.Begin(context.Background(), -1); !errors.Is(err, ratesem.ErrNegativeWeight) {
		t.Fatalf("Begin(-1): %v", err)
	}
	if _, err := s.Begin(context.Background(), 6); !errors.Is(err, ratesem.ErrWeightTooLarge) {
		t.Fatalf("Begin(6) of 5: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Begin(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Begin on a cancelled context: %v", err)
	}
	c, err := s.Begin(context.Background(), 2)
	if err != nil {
		t.Fatal(err)
	}
	mustPanicWith(t, func() { c.End(-1) })
	c.End(1)
	mustPanicWith(t, func() { c.End(1) }) // twice: released more than held
	mustPanicWith(t, func() { semaphore.Call{}.End(0) })
	if st := s.Stats(); st.InFlight != 0 {
		t.Fatalf("in flight after End: %d", st.InFlight)
	}
}

func mustPanicWith(t *testing.T, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	f()
}

// The server-side invariant for settled weights, on a fan-out: a server
// that counts each call at its arrival, at its estimate until the call has
// ended and then at its actual weight, never holds more than N in any
// window (t−Per, t] at an arrival. Random estimates, latencies and actual
// weights (refunds, debits, exact), on virtual time.
func TestSettledFanOutHoldsAtServer(t *testing.T) {
	for seed := range uint64(8) {
		synctest.Test(t, func(t *testing.T) {
			const n = 50
			per := time.Second
			s := semaphore.New(n, per)
			rng := rand.New(rand.NewPCG(seed, 3))
			type call struct {
				est, act   int64
				start, end time.Time
				lat        time.Duration
			}
			calls := make([]call, 400)
			for i := range calls {
				calls[i].est = 1 + rng.Int64N(n/4)
				switch rng.IntN(3) {
				case 0:
					calls[i].act = rng.Int64N(calls[i].est + 1)
				case 1:
					calls[i].act = calls[i].est + rng.Int64N(calls[i].est+1)
				default:
					calls[i].act = calls[i].est
				}
				calls[i].lat = time.Duration(1 + rng.Int64N(int64(300*time.Millisecond)))
			}
			var wg sync.WaitGroup
			for i := range calls {
				wg.Go(func() {
					c := &calls[i]
					k, err := s.Begin(context.Background(), c.est)
					if err != nil {
						t.Error(err)
						return
					}
					c.start = time.Now()
					time.Sleep(c.lat)
					c.end = time.Now()
					k.End(c.act)
				})
			}
			wg.Wait()
			var refunds, debits int
			for j, cj := range calls {
				sum := cj.est
				for i, ci := range calls {
					if i == j || !ci.start.After(cj.start.Add(-per)) || ci.start.After(cj.start) {
						continue
					}
					if !ci.end.After(cj.start) {
						sum += ci.act
					} else {
						sum += ci.est
					}
				}
				if sum > n {
					t.Fatalf("seed %d: arrival at %v of %d units: the server counts %d > %d", seed, cj.start, cj.est, sum, n)
				}
				if cj.act < cj.est {
					refunds++
				} else if cj.act > cj.est {
					debits++
				}
			}
			if refunds == 0 || debits == 0 {
				t.Fatalf("no refund or no debit: %d, %d", refunds, debits)
			}
		})
	}
}

// Settling pays: the same fan-out whose calls really cost a quarter of
// their estimate ends much sooner when settled than when released.
func TestSettlingRaisesThroughput(t *testing.T) {
	run := func(settle bool) time.Duration {
		var took time.Duration
		synctest.Test(t, func(t *testing.T) {
			s := semaphore.New(100, time.Second)
			start := time.Now()
			var wg sync.WaitGroup
			for range 200 {
				wg.Go(func() {
					c, _ := s.Begin(context.Background(), 40)
					time.Sleep(10 * time.Millisecond)
					if settle {
						c.End(10)
					} else {
						c.End(40)
					}
				})
			}
			wg.Wait()
			took = time.Since(start)
		})
		return took
	}
	settled, plain := run(true), run(false)
	if !(settled*2 < plain) {
		t.Fatalf("settled %v, not settled %v: settling should at least halve the time", settled, plain)
	}
	fmt.Fprintf(testWriter{t}, "200 calls of estimate 40, actual 10, limit 100/s: settled %v, estimate %v\n", settled, plain)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// Begin and End allocate nothing, as Acquire and Release.
func TestBeginEndAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	s := semaphore.New(1<<40, time.Millisecond)
	for range 100000 {
		c, _ := s.Begin(ctx, 2)
		c.End(1)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		c, err := s.Begin(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		c.End(1)
	})
	if allocs != 0 {
		t.Fatalf("Begin+End allocates %v times", allocs)
	}
}
