package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/internal/rstore"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// TestReviewFreeAskLeftUncounted: a call told to ask Redis outside the
// queues (askFreeLocked: counted in its limiter's asking) whose context
// ends before its goroutine takes the ask leaves the count as it found
// it: otherwise maxFreeAsks such leaves stop every later call of the
// limiter from asking at once or ahead of its turn.
func TestReviewFreeAskLeftUncounted(t *testing.T) {
	p := redisEngine(t, "askleft", 1000)
	keep := new(Ticket) // keeps the limiter (and its counts) alive
	if err := p.Acquire(context.Background(), keep, []Charge{{Rule: "r", Weight: 1}}); err != nil {
		t.Fatal(err)
	}
	defer keep.Release()
	lim := keep.held[0].lim
	for range 40 {
		ctx, cancel := context.WithCancel(context.Background())
		p.mu.Lock()
		p.hook = func(w *waiter, done bool) { // under p.mu, as the waiter is made
			if !done {
				cancel()
			}
		}
		p.mu.Unlock()
		tk := new(Ticket)
		if err := p.Acquire(ctx, tk, []Charge{{Rule: "r", Weight: 1}}); err == nil {
			tk.Release()
		} else if !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		cancel()
	}
	p.mu.Lock()
	p.hook = nil
	n := lim.asking
	p.mu.Unlock()
	if n != 0 {
		t.Fatalf("the limiter counts %d calls asking Redis outside its queues; none does", n)
	}
}

// TestReviewNoAskBehindRefused: a call queued behind one Redis refused
// does not ask ahead of it, not even while the refused call asks again
// (askAheadLocked's promise: nobody queued behind it asks before it).
func TestReviewNoAskBehindRefused(t *testing.T) {
	p := redisEngine(t, "askbehind", 1)
	keep := new(Ticket) // the limit is full
	if err := p.Acquire(context.Background(), keep, []Charge{{Rule: "r", Weight: 1}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 2)
	acquire := func() {
		tk := new(Ticket)
		err := p.Acquire(ctx, tk, []Charge{{Rule: "r", Weight: 1}})
		if err == nil {
			tk.Release()
		}
		done <- err
	}
	go acquire()
	var a, b *waiter
	waitUntil := func(what string, f func() bool) { t.Helper(); waitState(t, p, what, f) }
	waitUntil("the first call refused", func() bool {
		if p.waiters.Len() != 1 {
			return false
		}
		a = p.waiters.Front().Value.(*waiter)
		return a.refused && !a.asking
	})
	go acquire()
	waitUntil("the second call queued", func() bool {
		if p.waiters.Len() != 2 {
			return false
		}
		b = p.waiters.Back().Value.(*waiter)
		return !b.asking
	})
	p.mu.Lock()
	a.asking = true // the refused call asks again (its wake): another's answer comes meanwhile
	askAheadLocked(a.held)
	asked := b.asking
	a.asking = false
	p.mu.Unlock()
	if asked {
		t.Fatal("a call queued behind a refused one asked Redis ahead of it")
	}
	cancel()
	<-done
	<-done
	keep.Release()
}

// redisEngine returns an Engine of one rule "r" of n units per hour over a
// redis-server of its own, its keys under prefix.
func redisEngine(t *testing.T, prefix string, n int64) *Engine {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: redistest.Start(t).Addr()})
	t.Cleanup(func() { c.Close() })
	p, err := New([]Rule{{Name: "r", Limit: window.Limit{N: n, Per: time.Hour}}}, "",
		func(cfg *Config) { cfg.Shared = &Shared{Opener: rstore.NewOpener(c), Prefix: prefix} })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// waitState polls p's state under its lock until f holds, at most 5 s: it
// waits for a state the calls reach, it assumes no timing.
func waitState(t *testing.T, p *Engine, what string, f func() bool) {
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
