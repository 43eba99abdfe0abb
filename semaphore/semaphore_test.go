package semaphore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/semaphore"
)

const ms = time.Millisecond

// fanOut starts one goroutine per call, each acquiring 1 unit, holding it for
// hold, and recording its start offset from the bubble's start.
func fanOut(t *testing.T, s *semaphore.RateSemaphore, calls int, hold time.Duration) []time.Duration {
	t.Helper()
	begin := time.Now()
	starts := make([]time.Duration, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			time.Sleep(time.Duration(i)) // fix the arrival order: call i arrives i ns in
			require.NoError(t, s.Acquire(t.Context(), 1))
			starts[i] = time.Since(begin)
			time.Sleep(hold)
			s.Release(1)
		})
	}
	wg.Wait()
	return starts
}

func TestCompletionWindowSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 3 per second, calls of 100ms arriving 1ns apart: call k+3 starts 1s
		// after call k ended.
		s := semaphore.New(3, time.Second)
		got := fanOut(t, s, 7, 100*ms)
		want := []time.Duration{0, 1, 2, 1100 * ms, 1100*ms + 1, 1100*ms + 2, 2200 * ms}
		assert.Equal(t, want, got)
		st := s.Stats()
		assert.Equal(t, uint64(7), st.Admitted)
		assert.Equal(t, int64(0), st.InFlight)
		assert.Equal(t, 2200*ms-6, st.MaxWait)
	})
}

func TestStartWindowSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 3 per second with a 50ms margin: call k+3 starts 1.05s after call
		// k started, however long the calls take.
		s := semaphore.New(3, time.Second, semaphore.WithStartWindow(50*ms))
		got := fanOut(t, s, 7, 100*ms)
		want := []time.Duration{0, 1, 2, 1050 * ms, 1050*ms + 1, 1050*ms + 2, 2100 * ms}
		assert.Equal(t, want, got)
	})
}

func TestConcurrencyCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 10 per second but at most 2 in flight: calls of 100ms go two by two
		// (call k+2 starts when call k ends) until the window binds: call 10
		// starts 1s after call 0 ended.
		s := semaphore.New(10, time.Second, semaphore.WithMaxUnitsInFlight(2))
		got := fanOut(t, s, 12, 100*ms)
		want := []time.Duration{0, 1, 100 * ms, 100*ms + 1, 200 * ms, 200*ms + 1,
			300 * ms, 300*ms + 1, 400 * ms, 400*ms + 1, 1100 * ms, 1100*ms + 1}
		assert.Equal(t, want, got)
	})
}

func TestAcquireDoneContextNeverAcquires(t *testing.T) {
	s := semaphore.New(5, time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Acquire(ctx, 1)
	assert.Same(t, context.Canceled, err, "want ctx.Err() itself, not wrapped")
	assert.Equal(t, int64(0), s.Stats().InFlight)
	assert.True(t, s.TryAcquire(5), "the failed Acquire must leave all 5 units")
}

func TestWeightTooLarge(t *testing.T) {
	s := semaphore.New(5, time.Second, semaphore.WithMaxUnitsInFlight(3))
	err := s.Acquire(context.Background(), 6)
	require.ErrorIs(t, err, ratesem.ErrWeightTooLarge)
	assert.Contains(t, err.Error(), "weight 6")
	require.ErrorIs(t, s.Acquire(context.Background(), 4), ratesem.ErrWeightTooLarge, "above the concurrency cap")
	assert.False(t, s.TryAcquire(4))
	require.NoError(t, s.Acquire(context.Background(), 3))
}

func TestFIFOLargeWaiterIsNotOvertaken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := semaphore.New(4, time.Second)
		require.NoError(t, s.Acquire(t.Context(), 3))
		var order []string
		var mu sync.Mutex
		record := func(name string) { mu.Lock(); order = append(order, name); mu.Unlock() }
		var wg sync.WaitGroup
		wg.Go(func() { // arrives first, needs 4: must wait for the 3 to end
			require.NoError(t, s.Acquire(t.Context(), 4))
			record("big")
			s.Release(4)
		})
		synctest.Wait()
		wg.Go(func() { // 1 unit is free, but it must not pass the big waiter
			require.NoError(t, s.Acquire(t.Context(), 1))
			record("small")
			s.Release(1)
		})
		synctest.Wait()
		assert.False(t, s.TryAcquire(1), "TryAcquire must not overtake waiters")
		assert.Equal(t, 2, s.Stats().Waiting)
		time.Sleep(10 * ms)
		s.Release(3)
		wg.Wait()
		assert.Equal(t, []string{"big", "small"}, order)
	})
}

func TestCancelledWaiterLeavesNoTrace(t *testing.T) {
	for _, name := range []string{"completion", "start"} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var opts []semaphore.Option
				if name == "start" {
					opts = append(opts, semaphore.WithStartWindow(0))
				}
				s := semaphore.New(2, time.Second, opts...)
				begin := time.Now()
				require.NoError(t, s.Acquire(t.Context(), 2))
				time.Sleep(200 * ms)
				s.Release(2) // ends at 0.2s (completion); started at 0 (start window)

				ctx, cancel := context.WithCancel(t.Context())
				errc := make(chan error)
				go func() { errc <- s.Acquire(ctx, 2) }() // head, needs both units
				synctest.Wait()
				var started time.Duration
				var wg sync.WaitGroup
				wg.Go(func() { // behind it, needs one
					require.NoError(t, s.Acquire(t.Context(), 1))
					started = time.Since(begin)
					s.Release(1)
				})
				time.Sleep(300 * ms)
				cancel()
				require.ErrorIs(t, <-errc, context.Canceled)
				wg.Wait()
				want := 1200 * ms // completion: 0.2s end + 1s
				if name == "start" {
					want = time.Second // start window: 0s start + 1s
				}
				assert.Equal(t, want, started, "the waiter behind must move on as if the cancelled one never came")
				st := s.Stats()
				assert.Equal(t, uint64(2), st.Admitted)
				assert.Equal(t, 0, st.Waiting)
			})
		})
	}
}

// TestGrantCancelRace: a waiter's context ends at the very instant it is
// admitted. Whichever wins, a failed Acquire must leave no unit held and no
// stamp in the window.
func TestGrantCancelRace(t *testing.T) {
	for _, start := range []bool{false, true} {
		for i := range 200 {
			// One subtest each: after a failed synctest.Test, later ones on
			// the same t would not run.
			t.Run(fmt.Sprintf("start=%v/%d", start, i), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					var opts []semaphore.Option
					if start {
						opts = append(opts, semaphore.WithStartWindow(0))
					}
					s := semaphore.New(1, time.Second, opts...)
					require.NoError(t, s.Acquire(t.Context(), 1))
					s.Release(1) // free again at 1s
					ctx, cancel := context.WithTimeout(t.Context(), time.Second)
					defer cancel()
					err := s.Acquire(ctx, 1) // admitted at 1s, deadline at 1s
					if err != nil {
						require.ErrorIs(t, err, context.DeadlineExceeded)
						assert.True(t, s.TryAcquire(1), "a failed Acquire left a trace")
						assert.Equal(t, uint64(2), s.Stats().Admitted)
					} else {
						assert.Equal(t, uint64(2), s.Stats().Admitted)
					}
				})
			})
		}
	}
}

func TestDeadlineFailsFast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := semaphore.New(1, time.Second)
		require.NoError(t, s.Acquire(t.Context(), 1))
		s.Release(1) // next admission at 1s

		ctx, cancel := context.WithTimeout(t.Context(), 500*ms)
		defer cancel()
		begin := time.Now()
		err := s.Acquire(ctx, 1)
		assert.Equal(t, time.Duration(0), time.Since(begin), "must fail at once, not at the deadline")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorIs(t, err, ratesem.ErrDeadline)
		assert.NoError(t, ctx.Err(), "the context itself is not done yet")

		ctx2, cancel2 := context.WithTimeout(t.Context(), 1500*ms)
		defer cancel2()
		require.NoError(t, s.Acquire(ctx2, 1))
		assert.Equal(t, time.Second, time.Since(begin))
		s.Release(1)
	})
}

func TestDeadlineFailsFastBehindOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := semaphore.New(1, time.Second)
		require.NoError(t, s.Acquire(t.Context(), 1))
		s.Release(1)
		var wg sync.WaitGroup
		wg.Go(func() { // head: admitted at 1s
			require.NoError(t, s.Acquire(t.Context(), 1))
			s.Release(1)
		})
		synctest.Wait()
		begin := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), 1500*ms) // would be admitted at 2s
		defer cancel()
		err := s.Acquire(ctx, 1)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, time.Second, time.Since(begin), "fails when it reaches the head, before its deadline")
		wg.Wait()
	})
}

func TestPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := semaphore.New(10, time.Second)
		begin := time.Now()
		s.Pause(begin.Add(3 * time.Second))
		s.Pause(begin.Add(2 * time.Second)) // earlier end: the later one wins
		s.PauseFor(-time.Second)            // no effect
		s.Pause(begin.Add(-time.Second))    // past: no effect
		assert.False(t, s.TryAcquire(1))
		require.NoError(t, s.Acquire(t.Context(), 1))
		assert.Equal(t, 3*time.Second, time.Since(begin))
		s.Release(1)

		s.PauseFor(time.Second)
		time.Sleep(500 * ms)
		s.PauseFor(time.Second) // extends to 4.5s
		assert.True(t, begin.Add(4500*ms).Equal(s.Stats().PausedUntil))
		require.NoError(t, s.Acquire(t.Context(), 1))
		assert.Equal(t, 4500*ms, time.Since(begin))
		s.Release(1)
	})
}

func TestSetLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := semaphore.New(4, time.Second)
		begin := time.Now()
		require.NoError(t, s.Acquire(t.Context(), 4))
		s.Release(4) // 4 units count until 1s

		require.NoError(t, s.SetLimit(2, time.Second))
		assert.False(t, s.TryAcquire(1), "lowering the limit must keep the 4 recent units")

		var wg sync.WaitGroup
		var at time.Duration
		wg.Go(func() {
			require.NoError(t, s.Acquire(t.Context(), 2))
			at = time.Since(begin)
			s.Release(2)
		})
		synctest.Wait()
		time.Sleep(100 * ms)
		require.NoError(t, s.SetLimit(6, time.Second)) // room for 2 more: admits the waiter at once
		wg.Wait()
		assert.Equal(t, 100*ms, at)

		require.Error(t, s.SetLimit(-1, time.Second))
		require.Error(t, s.SetLimit(1, -time.Second))
		assert.Equal(t, "6/1s", s.Limit().String(), "a rejected SetLimit changes nothing")
	})
}

func TestSetLimitFailsWaitersThatNoLongerFit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := semaphore.New(4, time.Second)
		require.NoError(t, s.Acquire(t.Context(), 4))
		errc := make(chan error)
		go func() { errc <- s.Acquire(t.Context(), 3) }()
		synctest.Wait()
		require.NoError(t, s.SetLimit(2, time.Second))
		require.ErrorIs(t, <-errc, ratesem.ErrWeightTooLarge)
		s.Release(4)
	})
}

func TestDo(t *testing.T) {
	s := semaphore.New(1, time.Second)
	want := errors.New("boom")
	ran := false
	err := s.Do(context.Background(), func(ctx context.Context) error {
		ran = true
		assert.Equal(t, int64(1), s.Stats().InFlight)
		return want
	})
	assert.True(t, ran)
	assert.Same(t, want, err)
	assert.Equal(t, int64(0), s.Stats().InFlight)

	assert.PanicsWithValue(t, "oops", func() {
		_ = s.Do(context.Background(), func(context.Context) error { panic("oops") })
	})
	assert.Equal(t, int64(0), s.Stats().InFlight, "released after a panic")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = s.Do(ctx, func(context.Context) error { t.Fatal("fn ran after Acquire failed"); return nil })
	assert.Same(t, context.Canceled, err)
}

func TestReleaseMoreThanHeldPanics(t *testing.T) {
	s := semaphore.New(2, time.Second)
	require.NoError(t, s.Acquire(context.Background(), 1))
	assert.PanicsWithValue(t, "semaphore: released more than held", func() { s.Release(2) })
	assert.Panics(t, func() { s.Release(-1) })
	assert.Panics(t, func() { semaphore.New(-1, time.Second) })
	assert.Panics(t, func() { semaphore.New(1, -time.Second) })
	assert.Panics(t, func() { semaphore.WithMaxUnitsInFlight(-1) })
	assert.Panics(t, func() { semaphore.WithStartWindow(-1) })
}

// TestWithMockClock drives the semaphore with benbjohnson/clock's Mock.
func TestWithMockClock(t *testing.T) {
	mock := clock.NewMock()
	s := semaphore.New(1, time.Second, semaphore.WithClock(mock))
	require.NoError(t, s.Acquire(context.Background(), 1))
	mock.Add(100 * ms)
	s.Release(1) // free again at 1.1s on the mock

	admitted := make(chan time.Time, 1)
	go func() {
		if err := s.Acquire(context.Background(), 1); err == nil {
			admitted <- mock.Now()
		}
	}()
	require.Eventually(t, func() bool { return s.Stats().Waiting == 1 }, 5*time.Second, time.Millisecond)
	mock.Add(999 * ms) // 1.099s
	select {
	case <-admitted:
		t.Fatal("admitted before end + interval")
	default:
	}
	mock.Add(time.Millisecond) // 1.1s: the timer fires
	select {
	case got := <-admitted:
		assert.Equal(t, 1100*ms, got.Sub(time.Unix(0, 0).UTC()))
	case <-time.After(5 * time.Second):
		t.Fatal("not admitted at end + interval")
	}
	s.Release(1)
}

func TestAdmittedAcquireReleaseAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	for name, s := range map[string]*semaphore.RateSemaphore{
		"completion": semaphore.New(1<<40, time.Millisecond),
		"start":      semaphore.New(1<<40, time.Millisecond, semaphore.WithStartWindow(ms)),
		"no rate":    semaphore.New(1, 0),
	} {
		// Warm up: the window's log grows to its steady size first.
		for range 100000 {
			_ = s.Acquire(ctx, 1)
			s.Release(1)
		}
		allocs := testing.AllocsPerRun(1000, func() {
			if err := s.Acquire(ctx, 1); err != nil {
				t.Fatal(err)
			}
			s.Release(1)
		})
		assert.Zero(t, allocs, name)
	}
}
