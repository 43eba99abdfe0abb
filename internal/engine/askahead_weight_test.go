package engine

import (
	"context"
	"testing"
)

// TestAskAheadNotLighter: a call queued behind a heavier one that asks
// Redis does not ask ahead of its turn (admitted where the heavier one is
// refused, it would overtake it); one of the same weight does.
func TestAskAheadNotLighter(t *testing.T) {
	p := redisEngine(t, "asklighter", 5)
	keep := new(Ticket) // the limit is full
	if err := p.Acquire(context.Background(), keep, []Charge{{Rule: "r", Weight: 5}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 2)
	acquire := func(n int64) {
		tk := new(Ticket)
		err := p.Acquire(ctx, tk, []Charge{{Rule: "r", Weight: n}})
		if err == nil {
			tk.Release()
		}
		done <- err
	}
	waitUntil := func(what string, f func() bool) { t.Helper(); waitState(t, p, what, f) }
	var a, b *waiter
	go acquire(5)
	waitUntil("the heavy call refused", func() bool {
		if p.waiters.Len() != 1 {
			return false
		}
		a = p.waiters.Front().Value.(*waiter)
		return a.refused && !a.asking
	})
	go acquire(1)
	waitUntil("the light call queued behind it", func() bool {
		if p.waiters.Len() != 2 {
			return false
		}
		b = p.waiters.Back().Value.(*waiter)
		return !b.asking && b.nodes[0].inq
	})
	p.mu.Lock()
	// As if the heavy call asked Redis and was never refused (a queue
	// formed by calls asking at once).
	a.refused, a.asking = false, true
	askAheadLocked(a.held)
	light := b.asking
	b.held[0].n = 5 // the same weight as the call ahead
	askAheadLocked(a.held)
	same := b.asking
	b.held[0].n = 1
	a.refused, a.asking = true, false
	p.mu.Unlock()
	if light {
		t.Error("a call of 1 unit queued behind one of 5 that asks Redis asked ahead of its turn")
	}
	if !same {
		t.Error("a call of 5 units queued behind one of 5 that asks Redis (never refused) did not ask ahead")
	}
	cancel()
	<-done
	<-done
	keep.Release()
}
