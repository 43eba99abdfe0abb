package semaphore

import (
	"time"

	"github.com/ratesem/ratesem/internal/winfast"
)

// guarded is the engine's form of a window.Policy of another package
// (winfast.Foreign): its methods run the caller's code under s.mu, so when
// one panics (or calls runtime.Goexit) s.mu is unlocked before the panic
// goes on, unless the frame that locked it unlocks it in a deferred call
// (lockDeferred). The panic is not recovered: it keeps its value and stack,
// and reaches the caller of the method that ran the Policy (a Release, a
// waiter's Acquire, or the timer's goroutine, which then ends the
// program). The semaphore stays usable; the Policy's own state is what the
// panic left. The windows of package window are not wrapped: they cost the
// hot path nothing more.
//
// A Policy that blocks stalls every caller of the semaphore meanwhile, as
// the engine holds its lock around every call of it.
type guarded struct {
	winfast.Window
	s *RateSemaphore
}

// guard returns w, wrapped in guarded when it runs a caller's code.
func guard(w winfast.Window, s *RateSemaphore) winfast.Window {
	if _, ok := w.(winfast.Foreign); ok {
		return &guarded{Window: w, s: s}
	}
	return w
}

// left is deferred by every method of guarded: returned false means the
// Policy panicked (or exited its goroutine).
func (g *guarded) left(returned *bool) {
	if !*returned && !g.s.deferredUnlock {
		g.s.mu.Unlock()
	}
}

// Capacity implements winfast.Window.
func (g *guarded) Capacity() (c int64) {
	returned := false
	defer g.left(&returned)
	c = g.Window.Capacity()
	returned = true
	return c
}

// SetLimit implements winfast.Window.
func (g *guarded) SetLimit(now, n int64, per time.Duration) {
	returned := false
	defer g.left(&returned)
	g.Window.SetLimit(now, n, per)
	returned = true
}

// Admit implements winfast.Window.
func (g *guarded) Admit(now, n int64) (at int64, ok bool) {
	returned := false
	defer g.left(&returned)
	at, ok = g.Window.Admit(now, n)
	returned = true
	return at, ok
}

// Cancel implements winfast.Window.
func (g *guarded) Cancel(at, n int64) {
	returned := false
	defer g.left(&returned)
	g.Window.Cancel(at, n)
	returned = true
}

// Done implements winfast.Window.
func (g *guarded) Done(now, n int64) {
	returned := false
	defer g.left(&returned)
	g.Window.Done(now, n)
	returned = true
}

// lockDeferred locks s.mu for a frame that unlocks it with a deferred
// unlockDeferred: a Policy's panic then leaves the unlock to that frame
// (see guarded).
func (s *RateSemaphore) lockDeferred() {
	s.mu.Lock()
	s.deferredUnlock = true
}

// unlockDeferred unlocks s.mu locked by lockDeferred.
func (s *RateSemaphore) unlockDeferred() {
	s.deferredUnlock = false
	s.mu.Unlock()
}
