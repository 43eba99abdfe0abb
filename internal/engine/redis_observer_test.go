package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/rstore"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// Over Redis, an observer that panics on an event kept for a caller's
// goroutine (Reconciled, Evicted: flushEvicted), reported by an Acquire
// whose call has already joined the queues, leaves nothing behind: the
// call gives up, and the next call is admitted at once.
func TestRedisObserverPanicInFlushLeavesNoWaiter(t *testing.T) {
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	p := flushPanicPool(t, &Shared{Opener: rstore.NewOpener(c), Prefix: "obspanic"})
	t.Cleanup(func() { p.Close() })
	mustPanic(t, "Acquire", func() { _ = p.Acquire(context.Background(), new(Ticket), []Charge{{Rule: "r", Weight: 1}}) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tk := new(Ticket)
	if err := p.Acquire(ctx, tk, []Charge{{Rule: "r", Weight: 1}}); err != nil {
		t.Fatalf("Acquire after the observer's panic: %v (the first call was left queued)", err)
	}
	tk.Release()
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.rules["r"].keys[""]
	if l == nil {
		return
	}
	if l.refs != 0 || l.q != nil && l.q.head != nil {
		t.Fatalf("after both calls ended: limiter refs %d, a waiter queued %v; want none", l.refs, l.q != nil && l.q.head != nil)
	}
}

// In process the same: the call start admitted at once is taken back.
func TestObserverPanicInFlushTakesBack(t *testing.T) {
	p := flushPanicPool(t, nil)
	mustPanic(t, "Acquire", func() { _ = p.Acquire(context.Background(), new(Ticket), []Charge{{Rule: "r", Weight: 1}}) })
	tk := new(Ticket)
	if _, err := p.TryAcquire(tk, []Charge{{Rule: "r", Weight: 1}}); err != nil {
		t.Fatalf("TryAcquire after the observer's panic: %v (the first call's unit was kept)", err)
	}
	tk.Release()
}

// TryAcquire the same, in process and over Redis.
func TestObserverPanicInFlushTry(t *testing.T) {
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	for _, redis := range []bool{false, true} {
		var sh *Shared
		if redis {
			sh = &Shared{Opener: rstore.NewOpener(c), Prefix: "obspanictry"}
		}
		p := flushPanicPool(t, sh)
		mustPanic(t, "TryAcquire", func() { _, _ = p.TryAcquire(new(Ticket), []Charge{{Rule: "r", Weight: 1}}) })
		tk := new(Ticket)
		if _, err := p.TryAcquire(tk, []Charge{{Rule: "r", Weight: 1}}); err != nil {
			t.Fatalf("redis %v: TryAcquire after the observer's panic: %v (the first call's unit was kept)", redis, err)
		}
		tk.Release()
		p.mu.Lock()
		if l := p.rules["r"].keys[""]; l != nil && l.refs != 0 {
			t.Errorf("redis %v: limiter refs %d after both calls ended; want 0", redis, l.refs)
		}
		p.mu.Unlock()
		p.Close()
	}
}

// Over Redis, an observer that panics on Queued (from the first refusal
// by Redis) or on Admitted: the panic reaches the caller, and the call
// keeps nothing: no limiter reference, no units in flight, no waiter.
func TestRedisObserverPanicQueuedAdmitted(t *testing.T) {
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	for _, kind := range []ratesem.EventKind{ratesem.Queued, ratesem.Admitted} {
		var armed atomic.Bool
		p, err := New([]Rule{{Name: "r", Limit: window.Limit{N: 1, Per: time.Hour}}}, "", func(cfg *Config) {
			cfg.Observer = func(e ratesem.Event) {
				if e.Kind == kind && armed.Load() {
					panic("observer")
				}
			}
			cfg.Shared = &Shared{Opener: rstore.NewOpener(c), Prefix: "obspanic" + kind.String()}
		})
		if err != nil {
			t.Fatal(err)
		}
		var first *Ticket
		if kind == ratesem.Queued {
			first = acquireKey(t, p, "", 1) // the next call is refused: queued
		}
		armed.Store(true)
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%v: the observer's panic did not reach the caller", kind)
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = p.Acquire(ctx, new(Ticket), []Charge{{Rule: "r", Weight: 1}})
		}()
		if first != nil {
			first.Release()
		}
		p.mu.Lock()
		if l := p.rules["r"].keys[""]; l != nil && (l.refs != 0 || l.inflight != 0 || l.q != nil && l.q.head != nil) {
			t.Errorf("%v: after every call ended: refs %d, in flight %d, a waiter queued %v; want none", kind, l.refs, l.inflight, l.q != nil && l.q.head != nil)
		}
		p.mu.Unlock()
		p.Close()
	}
}

// flushPanicPool returns a pool of one rule (N 1 per hour; over Redis when
// sh is set) whose observer panics on Reconciled, with a Reconciled event
// queued: the next call's flush of the events panics.
func flushPanicPool(t *testing.T, sh *Shared) *Engine {
	t.Helper()
	p, err := New([]Rule{{Name: "r", Limit: window.Limit{N: 1, Per: time.Hour}}}, "", func(cfg *Config) {
		cfg.Observer = func(e ratesem.Event) {
			if e.Kind == ratesem.Reconciled {
				panic("observer")
			}
		}
		cfg.Shared = sh
	})
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.noteLocked(ratesem.Event{Kind: ratesem.Reconciled, Rule: "r", Weight: 1})
	p.mu.Unlock()
	return p
}

// mustPanic runs f and fails the test unless f panicked (what names it).
func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s: the observer's panic did not reach the caller", what)
		}
	}()
	f()
}
