package engine

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/internal/rstore"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// TestAskAheadNotLighter: a call queued behind a heavier one that asks
// Redis does not ask ahead of its turn (admitted where the heavier one is
// refused, it would overtake it); one of the same weight does.
func TestAskAheadNotLighter(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: redistest.Start(t).Addr()})
	t.Cleanup(func() { c.Close() })
	p, err := New([]Rule{{Name: "r", Limit: window.Limit{N: 5, Per: time.Hour}}}, "",
		func(cfg *Config) { cfg.Shared = &Shared{Opener: rstore.NewOpener(c), Prefix: "asklighter"} })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
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
	// waitUntil polls the engine's state (no timing is assumed: it waits
	// for a state the calls reach, at most 5 s).
	waitUntil := func(what string, f func() bool) {
		t.Helper()
		for end := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			p.mu.Lock()
			ok := f()
			p.mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(end) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
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
