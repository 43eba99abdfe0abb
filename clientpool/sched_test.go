package clientpool_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/window"
)

func TestWithMaxQueueInvalid(t *testing.T) {
	table := clientpool.Table{Rules: []clientpool.Rule{{Name: "r", Limit: window.Limit{N: 1, Per: time.Second}}}}
	for _, n := range []int{-1, math.MinInt, math.MaxInt32 + 1, math.MaxInt} {
		if _, err := clientpool.New(table, clientpool.WithMaxQueue(n)); err == nil {
			t.Errorf("New(WithMaxQueue(%d)) = nil error", n)
		}
	}
	if _, err := clientpool.New(table, clientpool.WithMaxQueue(math.MaxInt32)); err != nil {
		t.Errorf("New(WithMaxQueue(MaxInt32)): %v", err)
	}
}

// TestQueueFullAndTimeoutEvents: a queue-full and a queue-timeout failure
// are Refused events with Err set; the timed-out call reports Queued first.
func TestQueueFullAndTimeoutEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu     sync.Mutex
			events []ratesem.Event
		)
		p, err := clientpool.New(clientpool.Table{Rules: []clientpool.Rule{{Name: "r", Limit: window.Limit{N: 1, Per: time.Second}}}},
			clientpool.WithMaxQueue(1), clientpool.WithObserver(func(e ratesem.Event) {
				mu.Lock()
				events = append(events, e)
				mu.Unlock()
			}))
		if err != nil {
			t.Fatal(err)
		}
		c := clientpool.Charge{Rule: "r", Weight: 1}
		tk, err := p.Acquire(t.Context(), c)
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error)
		go func() {
			_, err := p.Acquire(ratesem.WithQueueWait(t.Context(), 500*time.Millisecond), c)
			errc <- err
		}()
		synctest.Wait()
		if _, err := p.Acquire(ratesem.WithPriority(t.Context(), ratesem.PriorityHigh), c); !errors.Is(err, ratesem.ErrQueueFull) {
			t.Errorf("third Acquire: %v, want ErrQueueFull", err)
		}
		start := time.Now()
		err = <-errc // the first call holds its unit: only the budget can end the wait
		if !errors.Is(err, ratesem.ErrQueueTimeout) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("queued Acquire: %v, want ErrQueueTimeout only", err)
		}
		if waited := time.Since(start); waited != 500*time.Millisecond {
			t.Errorf("failed after %v, want the budget 500ms", waited)
		}
		tk.Release()
		mu.Lock()
		defer mu.Unlock()
		var kinds []ratesem.EventKind
		for _, e := range events {
			kinds = append(kinds, e.Kind)
			if e.Kind == ratesem.Refused && e.Err == nil {
				t.Errorf("Refused event without Err: %+v", e)
			}
		}
		want := []ratesem.EventKind{ratesem.Admitted, ratesem.Queued, ratesem.Refused, ratesem.Refused}
		if len(kinds) != len(want) {
			t.Fatalf("events %v, want %v", kinds, want)
		}
		for i := range want {
			if kinds[i] != want[i] {
				t.Fatalf("events %v, want %v", kinds, want)
			}
		}
		if !errors.Is(events[2].Err, ratesem.ErrQueueFull) || events[2].Queued {
			t.Errorf("queue-full event %+v", events[2])
		}
		if !errors.Is(events[3].Err, ratesem.ErrQueueTimeout) || !events[3].Queued || events[3].Wait != 500*time.Millisecond {
			t.Errorf("queue-timeout event %+v", events[3])
		}
	})
}

// TestQueueWaitExtremes: the largest budget never fails a call that is
// admitted later, a negative one means none, and a budget known to be
// too short fails at once (not at the budget).
func TestQueueWaitExtremes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := clientpool.New(clientpool.Table{Rules: []clientpool.Rule{{Name: "r", Limit: window.Limit{N: 1, Per: time.Hour}}}})
		if err != nil {
			t.Fatal(err)
		}
		c := clientpool.Charge{Rule: "r", Weight: 1}
		tk, err := p.Acquire(t.Context(), c)
		if err != nil {
			t.Fatal(err)
		}
		tk.Release() // the next admission is an hour away
		start := time.Now()
		if _, err := p.Acquire(ratesem.WithQueueWait(t.Context(), time.Minute), c); !errors.Is(err, ratesem.ErrQueueTimeout) {
			t.Errorf("1m budget for a 1h wait: %v, want ErrQueueTimeout", err)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("failed after %v, want at once", d)
		}
		for _, d := range []time.Duration{math.MaxInt64, -1, math.MinInt64} {
			start := time.Now()
			tk, err := p.Acquire(ratesem.WithQueueWait(t.Context(), d), c)
			if err != nil {
				t.Fatalf("budget %v: %v", d, err)
			}
			if waited := time.Since(start); waited != time.Hour {
				t.Errorf("budget %v: admitted after %v, want 1h", d, waited)
			}
			tk.Release()
		}
	})
}

// TestQueueWaitVersusDeadline: the earlier of the two decides the error.
func TestQueueWaitVersusDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := clientpool.New(clientpool.Table{Rules: []clientpool.Rule{{Name: "r", Limit: window.Limit{N: 1, Per: time.Second}}}})
		if err != nil {
			t.Fatal(err)
		}
		c := clientpool.Charge{Rule: "r", Weight: 1}
		tk, err := p.Acquire(t.Context(), c)
		if err != nil {
			t.Fatal(err)
		}
		defer tk.Release() // held: only time ends the waits below
		ctx, cancel := context.WithTimeout(ratesem.WithQueueWait(t.Context(), time.Second), 100*time.Millisecond)
		defer cancel()
		if _, err := p.Acquire(ctx, c); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ratesem.ErrQueueTimeout) {
			t.Errorf("deadline before budget: %v, want DeadlineExceeded", err)
		}
		ctx2, cancel2 := context.WithTimeout(ratesem.WithQueueWait(t.Context(), 100*time.Millisecond), time.Second)
		defer cancel2()
		if _, err := p.Acquire(ctx2, c); !errors.Is(err, ratesem.ErrQueueTimeout) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("budget before deadline: %v, want ErrQueueTimeout", err)
		}
	})
}
