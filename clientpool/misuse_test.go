package clientpool_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/redistest"
)

// caught runs f and returns what it panicked with (nil: no panic).
func caught(f func()) (r any) {
	defer func() { r = recover() }()
	f()
	return nil
}

// inFlight returns the units in flight on every key of p.
func inFlight(p *clientpool.Pool) int64 {
	var n int64
	for _, k := range p.Snapshot() {
		n += k.InFlight
	}
	return n
}

// An observer that panics on Queued: the panic reaches the caller of
// Acquire and the waiter leaves its queues, so no admission is granted to
// nobody. On 3c9e6ad the waiter stayed, was granted once the window had
// room and held its unit for good: 2 units never fitted again.
func TestPoolObserverPanicOnQueuedLeavesNoWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{ruleN("ip", 2, time.Second), ruleN("acct", 5, time.Second)},
			clientpool.WithObserver(func(e ratesem.Event) {
				if e.Kind == ratesem.Queued {
					panic("queued")
				}
			}))
		two := []clientpool.Charge{{Rule: "ip", Key: "a", Weight: 2}, {Rule: "acct", Weight: 2}}
		tk := acquire(t, p, two...)
		for range 3 {
			if caught(func() { _, _ = p.Acquire(t.Context(), clientpool.Charge{Rule: "ip", Key: "a", Weight: 1}) }) == nil {
				t.Fatal("the observer's panic did not reach the caller")
			}
		}
		tk.Release()
		time.Sleep(time.Second) // the window forgets the call
		synctest.Wait()
		if got := inFlight(p); got != 0 {
			t.Fatalf("%d units in flight after every call ended (a waiter granted to nobody)", got)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
		defer cancel()
		tk, err := p.Acquire(ctx, two...)
		if err != nil {
			t.Fatalf("2 units refused after every call ended: %v", err)
		}
		tk.Release()
	})
}

// An observer that panics on Admitted: the caller gets the panic and holds
// nothing, and the window keeps no trace of the call (admitted at once or
// after waiting). On 3c9e6ad the admission's units were lost.
func TestPoolObserverPanicOnAdmittedTakesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		boom := false
		p := newPool(t, []clientpool.Rule{ruleN("ip", 2, time.Second)},
			clientpool.WithObserver(func(e ratesem.Event) {
				if boom && e.Kind == ratesem.Admitted {
					panic("admitted")
				}
			}))
		two := clientpool.Charge{Rule: "ip", Key: "a", Weight: 2}
		boom = true
		if caught(func() { _, _ = p.Acquire(t.Context(), two) }) == nil {
			t.Fatal("at once: the observer's panic did not reach the caller")
		}
		boom = false
		if got := inFlight(p); got != 0 {
			t.Fatalf("at once: %d units in flight after the panic", got)
		}
		// No trace in the window: 2 units fit again at once.
		tk := acquire(t, p, two)
		go func() { time.Sleep(10 * time.Millisecond); tk.Release() }()
		boom = true
		start := time.Now()
		if caught(func() { _, _ = p.Acquire(t.Context(), two) }) == nil {
			t.Fatal("after waiting: the observer's panic did not reach the caller")
		}
		boom = false
		if waited := time.Since(start); waited != time.Second+10*time.Millisecond {
			t.Fatalf("waited %v", waited)
		}
		if got := inFlight(p); got != 0 {
			t.Fatalf("after waiting: %d units in flight after the panic", got)
		}
		tk = acquire(t, p, two) // the undone call left no trace either
		tk.Release()
	})
}

// In Redis mode the same: an observer's panic on Admitted releases the
// call in Redis, so a second process finds the units free.
func TestRedisPoolObserverPanicOnAdmitted(t *testing.T) {
	addr := redistest.Start(t).Addr()
	prefix := "misuse-" + t.Name()
	table := clientpool.Table{Rules: []clientpool.Rule{{Name: "ip", Limit: ruleN("ip", 2, time.Hour).Limit, MaxUnitsInFlight: 1}}}
	p := newRedisPool(t, table, newClient(t, addr), prefix, clientpool.WithObserver(func(e ratesem.Event) {
		if e.Kind == ratesem.Admitted {
			panic("admitted")
		}
	}))
	q := newRedisPool(t, table, newClient(t, addr), prefix)
	c := clientpool.Charge{Rule: "ip", Weight: 1}
	if caught(func() { _, _ = p.Acquire(context.Background(), c) }) == nil {
		t.Fatal("the observer's panic did not reach the caller")
	}
	if got := inFlight(p); got != 0 {
		t.Fatalf("%d units in flight here after the panic", got)
	}
	// At most 1 unit in flight: the second process is admitted only once
	// Redis has the first call released. The release goes out in the
	// background, and a waiter of another process refused by a call in
	// flight sleeps up to a quarter of Per before asking again, so ask
	// afresh (each Acquire a round trip) until Redis has it, for 5 s.
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		tk, err := q.Acquire(ctx, c)
		cancel()
		if err == nil {
			tk.Release()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the other process: %v after 5 s (the panicked call still in flight in Redis)", err)
		}
	}
}

// Misuse of a Ticket panics or errs as documented and touches no other
// ticket's charges: Release twice panics, Settle after Release and Settle
// of a negative weight or of a rule the ticket does not hold return errors,
// while another ticket holds units on the same key.
func TestTicketMisuseTouchesNoOtherTicket(t *testing.T) {
	p := newPool(t, []clientpool.Rule{ruleN("ip", 4, time.Minute)})
	c := clientpool.Charge{Rule: "ip", Key: "a", Weight: 2}
	a, b := acquire(t, p, c), acquire(t, p, c)
	a.Release()
	if caught(a.Release) == nil {
		t.Fatal("Release twice did not panic while another ticket held units")
	}
	if err := a.Settle("ip", 0); err == nil {
		t.Fatal("Settle after Release: no error")
	}
	if err := b.Settle("ip", -1); !errors.Is(err, ratesem.ErrNegativeWeight) {
		t.Fatalf("Settle(-1): %v", err)
	}
	if err := b.Settle("other", 1); !errors.Is(err, ratesem.ErrUnknownRule) {
		t.Fatalf("Settle of a rule not held: %v", err)
	}
	if got := inFlight(p); got != 2 {
		t.Fatalf("%d units in flight after the misuse, want b's 2", got)
	}
	b.Release()
	if got := inFlight(p); got != 0 {
		t.Fatalf("%d units in flight after every Release", got)
	}
}

// A hammer: calls over two rules whose observer panics at random on Queued
// and Admitted. The units held by callers that got their ticket never
// exceed a rule's cap, and once all are done nothing is in flight.
func TestPoolObserverPanicsHammer(t *testing.T) {
	const workers, rounds = 8, 300
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	rules := []clientpool.Rule{
		{Name: "ip", Limit: ruleN("ip", 1000, time.Millisecond).Limit, MaxUnitsInFlight: 4},
		{Name: "acct", Limit: ruleN("acct", 1000, time.Millisecond).Limit, MaxUnitsInFlight: 6},
	}
	p := newPool(t, rules, clientpool.WithObserver(func(e ratesem.Event) {
		mu.Lock()
		boom := (e.Kind == ratesem.Queued || e.Kind == ratesem.Admitted) && rng.IntN(4) == 0
		mu.Unlock()
		if boom {
			panic("random")
		}
	}))
	var ip, acct atomic.Int64
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			for r := range rounds {
				w := int64(1 + (i+r)%4)
				var tk *clientpool.Ticket
				var err error
				if caught(func() {
					tk, err = p.Acquire(context.Background(), clientpool.Charge{Rule: "ip", Weight: w}, clientpool.Charge{Rule: "acct", Weight: w})
				}) != nil || err != nil {
					continue
				}
				if a, b := ip.Add(w), acct.Add(w); a > 4 || b > 6 {
					t.Errorf("in flight: ip %d of 4, acct %d of 6", a, b)
				}
				runtime.Gosched()
				ip.Add(-w)
				acct.Add(-w)
				tk.Release()
			}
		})
	}
	wg.Wait()
	if got := inFlight(p); got != 0 {
		t.Fatalf("%d units in flight after every call", got)
	}
}
