package semaphore

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/win"
	"github.com/ratesem/ratesem/window"
)

// bomb is a window.Policy of another package (a completion window under
// it) whose methods panic while armed.
type bomb struct {
	*win.Completion
	admit, done, cancel, capacity, setLimit bool
}

func (b *bomb) Admit(now time.Time, n int64) (time.Time, bool) {
	if b.admit {
		panic("bomb: Admit")
	}
	return b.Completion.Admit(now, n)
}

func (b *bomb) Done(now time.Time, n int64) {
	if b.done {
		panic("bomb: Done")
	}
	b.Completion.Done(now, n)
}

func (b *bomb) Settle(now, at time.Time, n, actual int64) {
	if b.done {
		panic("bomb: Settle")
	}
	b.Completion.Settle(now, at, n, actual)
}

func (b *bomb) Cancel(at time.Time, n int64) {
	if b.cancel {
		panic("bomb: Cancel")
	}
	b.Completion.Cancel(at, n)
}

func (b *bomb) Capacity() int64 {
	if b.capacity {
		panic("bomb: Capacity")
	}
	return b.Completion.Capacity()
}

func (b *bomb) SetLimit(now time.Time, l window.Limit) {
	if b.setLimit {
		panic("bomb: SetLimit")
	}
	b.Completion.SetLimit(now, l)
}

// unlocked fails t when s's mutex is held.
func unlocked(t *testing.T, s *RateSemaphore, after string) {
	t.Helper()
	if s.o.Locked() {
		t.Fatalf("after %s: the semaphore is left locked", after)
	}
}

// A window.Policy of the caller's that panics under the semaphore's lock
// (Admit on Acquire, TryAcquire, Begin and for a waiter behind a Release,
// Done on Release, Settle on End, Capacity and SetLimit on SetLimit, Cancel
// as an observer's panic takes a waiter's admission back) leaves the
// semaphore unlocked, once: the panic reaches the caller, and every other
// call goes on. On the base commit Acquire's, Release's and Begin's panics
// left it locked for good.
func TestForeignPolicyPanicLeavesUnlocked(t *testing.T) {
	ctx := context.Background()
	mk := func() (*RateSemaphore, *bomb) {
		b := &bomb{Completion: win.NewCompletion(window.Limit{N: 2, Per: time.Hour})}
		return NewWithPolicy(b), b
	}
	mustPanic := func(what string, f func()) {
		t.Helper()
		if r := func() (r any) { defer func() { r = recover() }(); f(); return nil }(); r == nil {
			t.Fatalf("%s: no panic", what)
		}
	}

	s, b := mk()
	b.admit = true
	mustPanic("Acquire", func() { _ = s.Acquire(ctx, 1) })
	unlocked(t, s, "Admit panicked in Acquire")
	mustPanic("TryAcquire", func() { s.TryAcquire(1) })
	unlocked(t, s, "Admit panicked in TryAcquire")
	mustPanic("Begin", func() { _, _ = s.Begin(ctx, 1) })
	unlocked(t, s, "Admit panicked in Begin")
	b.admit = false

	s, b = mk()
	if err := s.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	b.done = true
	mustPanic("Release", func() { s.Release(1) })
	unlocked(t, s, "Done panicked in Release")
	c, err := s.Begin(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	mustPanic("End", func() { c.End(1) })
	unlocked(t, s, "Settle panicked in End")

	s, b = mk()
	b.capacity = true
	mustPanic("SetLimit reading the capacity", func() { _ = s.SetLimit(3, time.Hour) })
	unlocked(t, s, "Capacity panicked in SetLimit")
	b.capacity = false
	b.setLimit = true
	mustPanic("SetLimit", func() { _ = s.SetLimit(3, time.Hour) })
	unlocked(t, s, "SetLimit panicked")
	b.setLimit = false

	// A waiter behind a full window: the Release that would grant it runs
	// Admit for it.
	synctest.Test(t, func(t *testing.T) {
		s, b := mk()
		if err := s.Acquire(ctx, 2); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		got := make(chan error, 1)
		go func() { got <- s.Acquire(wctx, 1) }()
		synctest.Wait()
		b.admit = true
		mustPanic("Release with a waiter", func() { s.Release(1) })
		unlocked(t, s, "Admit panicked for a waiter in Release")
		b.admit = false
		cancel()
		<-got
		unlocked(t, s, "the waiter gave up")
	})

	// Cancel runs in a frame that unlocks in a deferred call (takeBack,
	// after an observer's panic on a waiter's Admitted): unlocked once, not
	// twice (a fatal error).
	synctest.Test(t, func(t *testing.T) {
		var arm atomic.Bool
		b := &bomb{Completion: win.NewCompletion(window.Limit{N: 2, Per: time.Hour})}
		s := NewWithPolicy(b, WithObserver(func(e ratesem.Event) {
			if e.Kind == ratesem.Admitted && arm.Load() {
				panic("observer: Admitted")
			}
		}))
		if err := s.Acquire(ctx, 2); err != nil {
			t.Fatal(err)
		}
		got := make(chan any, 1)
		go func() {
			defer func() { got <- recover() }()
			_ = s.Acquire(ctx, 1)
		}()
		synctest.Wait()
		arm.Store(true)
		b.cancel = true
		s.Release(2)
		if r := <-got; r != "bomb: Cancel" {
			t.Fatalf("the waiter's Acquire panicked with %v, want the Policy's Cancel", r)
		}
		unlocked(t, s, "Cancel panicked in takeBack")
	})
}
