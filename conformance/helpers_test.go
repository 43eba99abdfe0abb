package conformance_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/clientpool"
)

// waitFor returns once cond holds. In process (a synctest bubble) it waits
// until every goroutine of the scenario is blocked, and cond must hold
// then; over Redis it polls cond every 2 ms for at most 5 s: cond is a
// state the fronts reach on their own (a waiter queued), not a wish about
// timing.
func waitFor(t *testing.T, m mode, what string, cond func() bool) {
	t.Helper()
	if !m.redis {
		synctest.Wait()
		if !cond() {
			t.Fatalf("%s: not so once every goroutine blocked", what)
		}
		return
	}
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not so after 5 s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// sleepUntil sleeps until the instant at (on the clock the scenario runs
// on).
func sleepUntil(at time.Time) { time.Sleep(time.Until(at)) }

// tryPool asks p to admit charges without waiting longer than wait: the
// Ticket, or nil when the pool refused (a wait known to end after the
// deadline fails at once; one only calls in flight can end waits for it).
func tryPool(t *testing.T, p poolFront, wait time.Duration, charges ...clientpool.Charge) *ticket {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	tk, err := p.Acquire(ctx, charges...)
	if err != nil {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire(%v): %v, want admission or a deadline", charges, err)
		}
		return nil
	}
	return tk
}

// quick is how long tryPool waits: a twentieth of the mode's interval.
func (m mode) quick() time.Duration { return m.per / 20 }

// order records the order in which calls were admitted.
type order struct {
	mu  sync.Mutex
	ids []string
}

func (o *order) add(id string) {
	o.mu.Lock()
	o.ids = append(o.ids, id)
	o.mu.Unlock()
}

func (o *order) get() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.ids...)
}
