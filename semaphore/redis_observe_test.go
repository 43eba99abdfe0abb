package semaphore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/redistest"
)

// Over Redis the observer sees admissions with the semaphore's name as
// Key, refusals, cancellations and pauses; the fallback, a semaphore of
// its own, reports nothing twice.
func TestRedisObserver(t *testing.T) {
	var mu sync.Mutex
	var evs []ratesem.Event
	obs := func(e ratesem.Event) {
		mu.Lock()
		evs = append(evs, e)
		mu.Unlock()
	}
	name := uniqueName(t)
	s := newRedisSem(t, newClient(t, redistest.Start(t).Addr()), name, 2, 200*time.Millisecond, WithObserver(obs), WithFallback(0.5))
	if err := s.Acquire(ctxT(t, 5*time.Second), 1); err != nil {
		t.Fatal(err)
	}
	if !s.TryAcquire(1) {
		t.Fatal("TryAcquire of the second unit failed")
	}
	if err := s.Acquire(context.Background(), 3); !errors.Is(err, ratesem.ErrWeightTooLarge) {
		t.Fatalf("Acquire(3) of 2: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	err := s.Acquire(ctx, 1) // both units held: waits for its context
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire while full: %v", err)
	}
	s.Release(1)
	s.Release(1)
	s.PauseFor(time.Second)

	mu.Lock()
	defer mu.Unlock()
	want := []ratesem.EventKind{ratesem.Admitted, ratesem.Admitted, ratesem.Refused, 0, ratesem.Paused}
	if len(evs) == len(want)+1 && evs[3].Kind == ratesem.Queued {
		// The waiter queued (it is reported over Redis as in process).
		evs = slices.Delete(evs, 3, 4)
	}
	if len(evs) != len(want) {
		t.Fatalf("events %+v", evs)
	}
	for i, e := range evs {
		if e.Key != name {
			t.Errorf("event %d: Key %q, want %q", i, e.Key, name)
		}
		if want[i] != 0 && e.Kind != want[i] {
			t.Errorf("event %d: %v, want %v", i, e.Kind, want[i])
		}
	}
	// The full semaphore's waiter: cancelled, or refused early when Redis
	// said how long to wait and that is past the deadline.
	if k := evs[3].Kind; k != ratesem.Cancelled && k != ratesem.Refused || evs[3].Wait < 0 || evs[3].Err == nil {
		t.Errorf("the waiter's event %+v", evs[3])
	}
	if p := evs[4]; p.Source != ratesem.SourceCaller || p.Pause <= 0 || p.Pause > time.Second {
		t.Errorf("the pause's event %+v", p)
	}
}
