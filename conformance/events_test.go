package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/window"
)

// kinds counts the events an observer saw, by kind.
type kinds struct {
	mu sync.Mutex
	n  map[ratesem.EventKind]int
}

func (k *kinds) observe(e ratesem.Event) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.n == nil {
		k.n = make(map[ratesem.EventKind]int)
	}
	k.n[e.Kind]++
}

func (k *kinds) String() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var s []string
	for _, kind := range slices.Sorted(maps.Keys(k.n)) {
		s = append(s, fmt.Sprintf("%v:%d", kind, k.n[kind]))
	}
	return fmt.Sprint(s)
}

// wantEvents is what the observer must see for the events scenario, in
// both modes: two calls admitted (one at once, one after it queued), a
// failed TryAcquire reporting nothing, a queued call cancelled, a pause.
var wantEvents = map[ratesem.EventKind]int{
	ratesem.Admitted:  2,
	ratesem.Queued:    2,
	ratesem.Cancelled: 1,
	ratesem.Paused:    1,
}

// eventsScenario runs the scenario over a limit of 1: acquire admits a
// unit, queued reports a waiter queued (nil: m.settle), pause pauses.
func eventsScenario(t *testing.T, m mode, acquire func(ctx context.Context) (func(), error), try func() bool, queued func(int) bool, pause func(time.Duration)) {
	t.Helper()
	wait := func(what string, k int) {
		if queued == nil {
			m.settle()
			return
		}
		waitFor(t, m, what, func() bool { return queued(k) })
	}
	held, err := acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if try != nil && try() {
		t.Fatal("TryAcquire admitted a unit over a full limit")
	}
	done := make(chan error, 2)
	go func() {
		release, err := acquire(context.Background())
		if err == nil {
			release()
		}
		done <- err
	}()
	wait("a queued", 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		release, err := acquire(ctx)
		if err == nil {
			release()
			err = errors.New("the cancelled call was admitted")
		} else if errors.Is(err, context.Canceled) {
			err = nil
		}
		done <- err
	}()
	wait("b queued", 2)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	held()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	pause(m.per / 4)
}

func checkEvents(t *testing.T, k *kinds) {
	t.Helper()
	k.mu.Lock()
	got := maps.Clone(k.n)
	k.mu.Unlock()
	if !maps.Equal(got, wantEvents) {
		t.Errorf("events seen %v, want %v", k, fmt.Sprint(wantEvents))
	}
}

// TestEventsSemaphore: the observer of a RateSemaphore sees the same
// events in both modes.
func TestEventsSemaphore(t *testing.T) {
	forModesRun(t, false, func(t *testing.T, m mode) {
		var k kinds
		s := m.mustSem(t, 1, m.per, semCfg{observer: k.observe})
		eventsScenario(t, m, func(ctx context.Context) (func(), error) {
			if err := s.Acquire(ctx, 1); err != nil {
				return nil, err
			}
			return func() { s.Release(1) }, nil
		}, func() bool { return s.TryAcquire(1) },
			func(n int) bool { return s.Stats().Waiting == n },
			s.PauseFor)
		checkEvents(t, &k)
	})
}

// TestEventsPool: the observer of a Pool sees the same events in every
// mode (one per charge: one charge per call here).
func TestEventsPool(t *testing.T) {
	forModesRun(t, true, func(t *testing.T, m mode) {
		var k kinds
		p := m.mustPool(t, poolCfg{observer: k.observe}, ruleSpec{name: "r", limit: window.Limit{N: 1, Per: m.per}})
		eventsScenario(t, m, func(ctx context.Context) (func(), error) {
			tk, err := p.Acquire(ctx, charge("r", "k", 1))
			if err != nil {
				return nil, err
			}
			return tk.Release, nil
		}, nil, nil, func(d time.Duration) {
			if err := p.Pause("r", "k", time.Now().Add(d)); err != nil {
				t.Error(err)
			}
		})
		checkEvents(t, &k)
	})
}
