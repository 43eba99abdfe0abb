package semaphore_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/semaphore"
)

func TestWithMaxQueueNegativePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("WithMaxQueue(-1) did not panic")
		}
	}()
	semaphore.WithMaxQueue(-1)
}

// TestSemaphoreQueueFullAndTimeoutEvents: a queue-full and a queue-timeout
// failure are Refused events with Err set.
func TestSemaphoreQueueFullAndTimeoutEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu     sync.Mutex
			events []ratesem.Event
		)
		s := semaphore.New(1, time.Second, semaphore.WithMaxQueue(1), semaphore.WithObserver(func(e ratesem.Event) {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		}))
		if err := s.Acquire(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
		errc := make(chan error)
		go func() { errc <- s.Acquire(ratesem.WithQueueWait(t.Context(), 500*time.Millisecond), 1) }()
		synctest.Wait()
		if err := s.Acquire(ratesem.WithPriority(t.Context(), ratesem.PriorityHigh), 1); !errors.Is(err, ratesem.ErrQueueFull) {
			t.Errorf("third Acquire: %v, want ErrQueueFull", err)
		}
		start := time.Now()
		err := <-errc
		if !errors.Is(err, ratesem.ErrQueueTimeout) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("queued Acquire: %v, want ErrQueueTimeout only", err)
		}
		if waited := time.Since(start); waited != 500*time.Millisecond {
			t.Errorf("failed after %v, want the budget 500ms", waited)
		}
		s.Release(1)
		if st := s.Stats(); st.Waiting != 0 {
			t.Errorf("Stats().Waiting = %d after the failures, want 0", st.Waiting)
		}
		mu.Lock()
		defer mu.Unlock()
		want := []ratesem.EventKind{ratesem.Admitted, ratesem.Queued, ratesem.Refused, ratesem.Refused}
		if len(events) != len(want) {
			t.Fatalf("%d events %+v, want kinds %v", len(events), events, want)
		}
		for i, e := range events {
			if e.Kind != want[i] {
				t.Fatalf("event %d: %v, want %v", i, e.Kind, want[i])
			}
		}
		if !errors.Is(events[2].Err, ratesem.ErrQueueFull) || events[2].Queued {
			t.Errorf("queue-full event %+v", events[2])
		}
		if !errors.Is(events[3].Err, ratesem.ErrQueueTimeout) || !events[3].Queued {
			t.Errorf("queue-timeout event %+v", events[3])
		}
	})
}

// TestSemaphoreQueueWaitExtremes: a budget known to be too short fails at
// once; the largest and negative budgets never fail a later admission.
func TestSemaphoreQueueWaitExtremes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := semaphore.New(1, time.Hour)
		if err := s.Acquire(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
		s.Release(1) // the next admission is an hour away
		start := time.Now()
		if err := s.Acquire(ratesem.WithQueueWait(t.Context(), time.Minute), 1); !errors.Is(err, ratesem.ErrQueueTimeout) {
			t.Errorf("1m budget for a 1h wait: %v, want ErrQueueTimeout", err)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("failed after %v, want at once", d)
		}
		for _, d := range []time.Duration{math.MaxInt64, -1, math.MinInt64} {
			start := time.Now()
			if err := s.Acquire(ratesem.WithQueueWait(t.Context(), d), 1); err != nil {
				t.Fatalf("budget %v: %v", d, err)
			}
			if waited := time.Since(start); waited != time.Hour {
				t.Errorf("budget %v: admitted after %v, want 1h", d, waited)
			}
			s.Release(1)
		}
	})
}

// TestSemaphorePriorityOvertakes: a high call overtakes queued normal
// ones; a low call waits behind them.
func TestSemaphorePriorityOvertakes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := semaphore.New(1, 0)
		if err := s.Acquire(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
		var (
			mu    sync.Mutex
			order []string
			wg    sync.WaitGroup
		)
		call := func(name string, p ratesem.Priority) {
			wg.Go(func() {
				if err := s.Acquire(ratesem.WithPriority(t.Context(), p), 1); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				order = append(order, name)
				mu.Unlock()
				s.Release(1)
			})
			synctest.Wait()
		}
		call("low", ratesem.PriorityLow)
		call("normal1", ratesem.PriorityNormal)
		call("normal2", ratesem.PriorityNormal)
		call("high", ratesem.PriorityHigh)
		s.Release(1)
		wg.Wait()
		want := []string{"high", "normal1", "normal2", "low"}
		for i := range want {
			if order[i] != want[i] {
				t.Fatalf("order %v, want %v", order, want)
			}
		}
	})
}
