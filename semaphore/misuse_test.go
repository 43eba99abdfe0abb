package semaphore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/semaphore"
)

// panicsOn returns an observer that panics on every event of kind, and
// records nothing else.
func panicsOn(kind ratesem.EventKind) func(ratesem.Event) {
	return func(e ratesem.Event) {
		if e.Kind == kind {
			panic(fmt.Sprintf("observer panics on %v", e.Kind))
		}
	}
}

// caught runs f and returns what it panicked with (nil: no panic).
func caught(f func()) (r any) {
	defer func() { r = recover() }()
	f()
	return nil
}

// An observer that panics on Queued: the panic reaches the caller of
// Acquire, and the waiter is gone from the queue, so that no admission is
// granted to nobody. On 3c9e6ad the waiter stayed, was granted at the next
// Release and held its unit for good: a 2-unit semaphore never admitted 2
// again.
func TestObserverPanicOnQueuedLeavesNoWaiter(t *testing.T) {
	for _, per := range []time.Duration{0, time.Second} {
		t.Run(fmt.Sprint(per), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := semaphore.New(2, per, semaphore.WithObserver(panicsOn(ratesem.Queued)))
				if err := s.Acquire(t.Context(), 2); err != nil {
					t.Fatal(err)
				}
				for _, n := range []int64{1, 2, 3} { // 3: parked aside without a rate, refused with one
					r := caught(func() { _ = s.Acquire(t.Context(), n) })
					if n <= 2 && r == nil {
						t.Fatalf("Acquire(%d): the observer's panic did not reach the caller", n)
					}
					r = caught(func() { _, _ = s.Begin(t.Context(), n) })
					if n <= 2 && r == nil {
						t.Fatalf("Begin(%d): the observer's panic did not reach the caller", n)
					}
				}
				if st := s.Stats(); st.Waiting != 0 || st.InFlight != 2 {
					t.Fatalf("after the panics: %+v, want no waiter and 2 units in flight", st)
				}
				s.Release(2)
				time.Sleep(per) // the window forgets the first call
				if !s.TryAcquire(2) {
					t.Fatalf("2 units not admitted after every call ended: %+v", s.Stats())
				}
			})
		})
	}
}

// A waiter granted while its Queued observer still runs is taken back
// when the observer panics.
func TestObserverPanicOnQueuedAfterGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s *semaphore.RateSemaphore
		s = semaphore.New(2, 0, semaphore.WithObserver(func(e ratesem.Event) {
			if e.Kind == ratesem.Queued {
				s.Release(2) // grants the waiter before the panic
				panic("late")
			}
		}))
		if err := s.Acquire(t.Context(), 2); err != nil {
			t.Fatal(err)
		}
		if caught(func() { _ = s.Acquire(t.Context(), 2) }) == nil {
			t.Fatal("no panic")
		}
		if st := s.Stats(); st.Waiting != 0 || st.InFlight != 0 {
			t.Fatalf("after the panic: %+v, want nothing held or waiting", st)
		}
	})
}

// An observer that panics on Admitted: the caller sees the panic and
// holds nothing, whichever way the call was admitted (at once, after
// waiting, by TryAcquire or Begin). On 3c9e6ad the admission's units were
// lost for good.
func TestObserverPanicOnAdmittedReleases(t *testing.T) {
	for _, per := range []time.Duration{0, time.Second} {
		t.Run(fmt.Sprint(per), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				boom := false
				s := semaphore.New(2, per, semaphore.WithObserver(func(e ratesem.Event) {
					if boom && e.Kind == ratesem.Admitted {
						panic("admitted")
					}
				}))
				ctx := t.Context()
				check := func(what string, f func()) {
					t.Helper()
					boom = true
					if caught(f) == nil {
						t.Fatalf("%s: the observer's panic did not reach the caller", what)
					}
					boom = false
					if st := s.Stats(); st.InFlight != 0 || st.Waiting != 0 {
						t.Fatalf("%s: after the panic %+v, want nothing held", what, st)
					}
					time.Sleep(per)
				}
				check("Acquire", func() { _ = s.Acquire(ctx, 2) })
				check("TryAcquire", func() { s.TryAcquire(2) })
				check("Begin", func() { _, _ = s.Begin(ctx, 2) })
				// After waiting: a call holds the units, ends 10ms later.
				for _, begin := range []bool{false, true} {
					if err := s.Acquire(ctx, 2); err != nil {
						t.Fatal(err)
					}
					go func() { time.Sleep(10 * time.Millisecond); s.Release(2) }()
					check(fmt.Sprintf("waited (Begin %v)", begin), func() {
						if begin {
							_, _ = s.Begin(ctx, 2)
						} else {
							_ = s.Acquire(ctx, 2)
						}
					})
				}
				if !s.TryAcquire(2) {
					t.Fatal("2 units not admitted after every call ended")
				}
			})
		})
	}
}

// A blocking observer stalls only its own caller: others are admitted and
// released meanwhile.
func TestObserverBlockingStallsOnlyItsCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		block := make(chan struct{})
		s := semaphore.New(4, 0, semaphore.WithObserver(func(e ratesem.Event) {
			if e.Kind == ratesem.Admitted && e.Weight == 3 {
				<-block
			}
		}))
		ctx := t.Context()
		go func() { _ = s.Acquire(ctx, 3) }()
		synctest.Wait()
		for range 100 {
			if err := s.Acquire(ctx, 1); err != nil {
				t.Fatal(err)
			}
			s.Release(1)
		}
		close(block)
	})
}

// Call.End twice panics even while other calls hold units, and touches
// none of theirs. On 3c9e6ad the second End released another call's units:
// with a limit of 4, 6 units were in flight.
func TestCallEndTwicePanicsWhateverOthersHold(t *testing.T) {
	s := semaphore.New(4, time.Minute)
	ctx := context.Background()
	a, err := s.Begin(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Begin(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	a.End(2)
	copyOfA := a
	if caught(func() { copyOfA.End(2) }) == nil {
		t.Fatal("End twice (on a copy) did not panic while another call held units")
	}
	if st := s.Stats(); st.InFlight != 2 {
		t.Fatalf("in flight %d after the bad End, want b's 2", st.InFlight)
	}
	// Release of b's units is a misuse too: a Call's units end by End.
	if caught(func() { s.Release(2) }) == nil {
		t.Fatal("Release of a Call's units did not panic")
	}
	if st := s.Stats(); st.InFlight != 2 {
		t.Fatalf("in flight %d after the bad Release, want b's 2", st.InFlight)
	}
	b.End(2)
	// The window counts the 4 units of a and b for a minute: nothing fits.
	if s.TryAcquire(1) {
		t.Fatal("the window forgot a call")
	}
}

// Calls of one weight ended in any order, each once: the slots are reused
// and an old copy of a Call ended again still panics.
func TestCallEndAfterReuse(t *testing.T) {
	s := semaphore.New(100, 0)
	ctx := context.Background()
	var calls []semaphore.Call
	for range 10 {
		c, err := s.Begin(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, c)
	}
	for i := len(calls) - 1; i >= 0; i -= 2 {
		calls[i].End(1)
	}
	var more []semaphore.Call
	for range 5 {
		c, _ := s.Begin(ctx, 1)
		more = append(more, c)
	}
	for i := len(calls) - 1; i >= 0; i -= 2 {
		if caught(func() { calls[i].End(1) }) == nil {
			t.Fatalf("call %d ended twice after its slot was reused: no panic", i)
		}
	}
	for i := 0; i < len(calls); i += 2 {
		calls[i].End(1)
	}
	for _, c := range more {
		c.End(0)
	}
	if st := s.Stats(); st.InFlight != 0 {
		t.Fatalf("in flight %d", st.InFlight)
	}
}

// The waiters behind one whose Queued observer panicked are not held up:
// they are admitted at the next Release, with the units it would have
// taken free.
func TestObserverPanicOnQueuedDoesNotStallOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := semaphore.New(3, 0, semaphore.WithObserver(func(e ratesem.Event) {
			if e.Kind == ratesem.Queued && e.Weight == 3 {
				panic("queued")
			}
		}))
		ctx := t.Context()
		if err := s.Acquire(ctx, 3); err != nil {
			t.Fatal(err)
		}
		if caught(func() { _ = s.Acquire(ctx, 3) }) == nil {
			t.Fatal("no panic")
		}
		admitted := make(chan struct{})
		go func() {
			if err := s.Acquire(ctx, 1); err == nil {
				close(admitted)
			}
		}()
		synctest.Wait()
		s.Release(3)
		synctest.Wait()
		select {
		case <-admitted:
		default:
			t.Fatal("the waiter behind the panicked one was not admitted")
		}
		if !s.TryAcquire(2) {
			t.Fatalf("2 more units refused: %+v", s.Stats())
		}
	})
}

// A hammer: callers of Acquire and Begin whose observer panics at random
// on Queued and Admitted, others ending their calls meanwhile. The units
// held by callers that got their call never exceed n, and once all are
// done nothing is held or waiting.
func TestObserverPanicsHammer(t *testing.T) {
	const n, workers, rounds = 4, 8, 300
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	s := semaphore.New(n, 0, semaphore.WithObserver(func(e ratesem.Event) {
		mu.Lock()
		boom := (e.Kind == ratesem.Queued || e.Kind == ratesem.Admitted) && rng.IntN(3) == 0
		mu.Unlock()
		if boom {
			panic("random")
		}
	}))
	var held atomic.Int64
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			for r := range rounds {
				w := int64(1 + (i+r)%n)
				if (i+r)%2 == 0 {
					var err error
					if caught(func() { err = s.Acquire(context.Background(), w) }) != nil || err != nil {
						continue
					}
					if h := held.Add(w); h > n {
						t.Errorf("%d units held under a limit of %d", h, n)
					}
					runtime.Gosched()
					held.Add(-w)
					s.Release(w)
					continue
				}
				var c semaphore.Call
				var err error
				if caught(func() { c, err = s.Begin(context.Background(), w) }) != nil || err != nil {
					continue
				}
				if h := held.Add(w); h > n {
					t.Errorf("%d units held under a limit of %d", h, n)
				}
				runtime.Gosched()
				held.Add(-w)
				c.End(w)
			}
		})
	}
	wg.Wait()
	if st := s.Stats(); st.InFlight != 0 || st.Waiting != 0 {
		t.Fatalf("after every call: %+v", st)
	}
}
