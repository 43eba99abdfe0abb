package semaphore

// Regression tests from a review of the core (names say what must hold).

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/ratesem/ratesem"
)

// Per close to the maximum Duration: stamp+Per overflows int64 in
// Completion.Admit, the returned instant lies ~292 years in the PAST, the
// timer is armed with a negative delay and the semaphore spins on its timer
// until the waiter's context ends (no fail-fast either).
func TestHugeIntervalFailsFastWithoutSpinning(t *testing.T) {
	s := New(2, time.Duration(math.MaxInt64))
	var wakeups atomic.Int64
	s.o.SetTestHooks(func() { wakeups.Add(1) }, nil)
	ctx := context.Background()
	_ = s.Acquire(ctx, 1)
	_ = s.Acquire(ctx, 1)
	s.Release(1) // epoch, stamp 0
	time.Sleep(time.Millisecond)
	s.Release(1) // stamp ~1ms
	ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err := s.Acquire(ctx, 2) // could only be admitted in ~292 years
	if !errors.Is(err, ratesem.ErrDeadline) {
		t.Errorf("Acquire = %v; want an ratesem.ErrDeadline fail-fast", err)
	}
	if n := wakeups.Load(); n > 1 {
		t.Errorf("timer fired %d times in 100ms for one waiter: busy loop", n)
	}
}

// same with the start window: stamp (start+margin) + Per overflows.
func TestHugeMarginFailsFastWithoutSpinning(t *testing.T) {
	s := New(2, time.Second, WithStartWindow(time.Duration(math.MaxInt64-int64(time.Second))))
	var wakeups atomic.Int64
	s.o.SetTestHooks(func() { wakeups.Add(1) }, nil)
	_ = s.Acquire(context.Background(), 1)
	time.Sleep(time.Millisecond)
	_ = s.Acquire(context.Background(), 1)
	s.Release(2)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := s.Acquire(ctx, 2)
	if !errors.Is(err, ratesem.ErrDeadline) || wakeups.Load() > 1 {
		t.Errorf("huge margin: err=%v wakeups=%d", err, wakeups.Load())
	}
}

// blockingClock wraps a mock; when armed, the next Now() call returns the
// mock's time and then blocks until released: it models Release being
// descheduled between its clock read (outside the lock) and s.mu.Lock().
type blockingClock struct {
	*clock.Mock
	mu      sync.Mutex
	armed   bool
	reached chan struct{}
	resume  chan struct{}
}

func (c *blockingClock) Now() time.Time {
	now := c.Mock.Now()
	c.mu.Lock()
	armed := c.armed
	c.armed = false
	c.mu.Unlock()
	if armed {
		close(c.reached)
		<-c.resume
	}
	return now
}

func newBlockingClock() *blockingClock {
	return &blockingClock{Mock: clock.NewMock(), reached: make(chan struct{}), resume: make(chan struct{})}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; i < 5000; i++ {
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("condition never held")
}

// F2a: Release's stale instant is used to admit waiters: a waiter that began
// waiting at 5s is granted "at 0s"; TotalWait becomes negative.
func TestReleaseDescheduledBeforeLockKeepsWaitNonNegative(t *testing.T) {
	c := newBlockingClock()
	s := New(2, time.Second, WithClock(c), WithMaxUnitsInFlight(1))
	if err := s.Acquire(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	c.armed = true
	go s.Release(1) // reads 0s, then is descheduled before s.mu.Lock
	<-c.reached
	c.Add(5 * time.Second)
	done := make(chan error, 1)
	go func() { done <- s.Acquire(context.Background(), 1) }() // waits from 5s (cap)
	waitFor(t, func() bool { return s.Stats().Waiting == 1 })
	close(c.resume)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.TotalWait < 0 {
		t.Errorf("TotalWait = %v after one admitted wait; must be >= 0", st.TotalWait)
	}
}

// the timer is armed for at - staleNow, i.e. relative to an instant in
// the past: the waiter sleeps past the instant it could be admitted.
func TestReleaseDescheduledBeforeLockDoesNotDelayWaiter(t *testing.T) {
	c := newBlockingClock()
	s := New(1, time.Second, WithClock(c))
	if err := s.Acquire(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	c.armed = true
	go s.Release(1) // reads 0s: the call ended at 0s
	<-c.reached
	c.Add(5 * time.Second)
	done := make(chan error, 1)
	go func() { done <- s.Acquire(context.Background(), 1) }()
	waitFor(t, func() bool { return s.Stats().Waiting == 1 })
	close(c.resume)
	// At 5s the call ended at 0s is 5s old: admissible at once (or at least
	// once the mock moves at all).
	time.Sleep(20 * time.Millisecond)
	c.Add(time.Millisecond)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Errorf("waiter admissible since 1s not admitted at %v (timer set for 6s)", c.Mock.Now().Sub(time.Unix(0, 0)))
		c.Add(2 * time.Second)
		<-done
	}
}

// a grant that its caller gives up on is undone, but MaxWait keeps it.
func TestUndoneAdmissionLeavesNoMaxWait(t *testing.T) {
	bad := 0
	for range 300 {
		synctest.Test(t, func(t *testing.T) {
			s := New(1, 0)
			_ = s.Acquire(t.Context(), 1)
			ctx, cancel := context.WithCancel(t.Context())
			errc := make(chan error, 1)
			go func() { errc <- s.Acquire(ctx, 1) }()
			synctest.Wait()
			time.Sleep(10 * time.Second)
			cancel()
			s.Release(1)
			if err := <-errc; err == nil {
				s.Release(1)
				return
			}
			if st := s.Stats(); st.Admitted == 1 && st.MaxWait != 0 {
				bad++
			}
		})
	}
	if bad > 0 {
		t.Errorf("%d/300 runs: cancelled (undone) admission left MaxWait = 10s", bad)
	}
}

// interval 0, a waiter parked because SetLimit lowered n below its weight
// is never admitted again, even after SetLimit raises the limit back.
func TestNoRateParkedWaiterRejoinsAfterSetLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(3, 0)
		_ = s.Acquire(t.Context(), 1)
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		errc := make(chan error, 1)
		go func() { errc <- s.Acquire(ctx, 3) }()
		synctest.Wait()
		_ = s.SetLimit(2, 0) // waiter (3) removed from the queue, ready never closed
		_ = s.SetLimit(5, 0) // "raising it admits waiters at once"
		s.Release(1)
		synctest.Wait()
		select {
		case err := <-errc:
			if err != nil {
				t.Fatal(err)
			}
		default:
			t.Errorf("weight-3 waiter not admitted with 5 units free; Stats=%+v", s.Stats())
			cancel()
			<-errc
		}
	})
}

// rate-limited, a too-large waiter behind the head is not failed by
// SetLimit as documented; it keeps waiting.
func TestSetLimitFailsEveryWaiterThatNoLongerFits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(3, time.Second)
		_ = s.Acquire(t.Context(), 3)
		e1 := make(chan error, 1)
		e3 := make(chan error, 1)
		go func() { e1 <- s.Acquire(t.Context(), 1) }()
		synctest.Wait()
		go func() { e3 <- s.Acquire(t.Context(), 3) }()
		synctest.Wait()
		_ = s.SetLimit(2, time.Second)
		synctest.Wait()
		select {
		case err := <-e3:
			if !errors.Is(err, ratesem.ErrWeightTooLarge) {
				t.Fatal(err)
			}
		default:
			t.Fatalf("waiter of weight 3 > new limit 2 still waiting (doc: fails with ratesem.ErrWeightTooLarge)")
		}
		s.Release(3)
		if err := <-e1; err != nil {
			t.Fatal(err)
		}
		s.Release(1)
	})
}

// Calls that ended while interval was 0 read no clock, so a switch to a
// rate starts the window afresh, but units in flight still count.
func TestSetLimitFromNoRateCountsUnitsInFlight(t *testing.T) {
	for _, start := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			var opts []Option
			if start {
				opts = append(opts, WithStartWindow(0))
			}
			s := New(2, 0, opts...)
			if err := s.Acquire(t.Context(), 1); err != nil {
				t.Fatal(err)
			}
			if err := s.SetLimit(2, time.Second); err != nil {
				t.Fatal(err)
			}
			if s.TryAcquire(2) {
				t.Fatalf("start=%v: 2 units admitted with 1 in flight under 2/1s", start)
			}
			if !s.TryAcquire(1) {
				t.Fatalf("start=%v: 1 unit refused with 1 in flight under 2/1s", start)
			}
		})
	}
}
