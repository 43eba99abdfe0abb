package semaphore

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestOneTimerNoPolling counts timer wake-ups: each waiter that must wait for
// time is woken once, at the instant it can be admitted.
func TestOneTimerNoPolling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(2, time.Second)
		var wakeups int
		s.onWake = func() { wakeups++ }
		var wg sync.WaitGroup
		for range 6 {
			wg.Go(func() {
				if err := s.Acquire(t.Context(), 1); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(10 * time.Millisecond)
				s.Release(1)
			})
		}
		wg.Wait()
		// Calls 3-4 wait for the first pair's ends + 1s, calls 5-6 for the
		// second pair's: the first pair's release happens at one instant, so
		// one wake-up admits both; likewise for the second.
		if wakeups != 2 {
			t.Fatalf("timer fired %d times for 2 admission instants; want 2", wakeups)
		}
	})
}
