package semaphore

import (
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/obs"
	"github.com/ratesem/ratesem/internal/remote"
)

// WithObserver calls fn for every ratesem.Event of the semaphore: each Acquire
// ends in one Admitted (with its wait), Refused (ErrWeightTooLarge,
// ErrDeadline, ErrNegativeWeight, ErrUnavailable …; Err says which) or
// Cancelled event, preceded by Queued when the call had to wait (in process
// only: over Redis the wait is the round trips' and the queue is not reported);
// a successful TryAcquire reports Admitted (a failed one reports nothing);
// Pause and PauseFor that set a pause report Paused (Source
// ratesem.SourceCaller). For a semaphore built with redisrate.NewSemaphore the
// events' Key is its name; in process it is empty.
//
// fn runs synchronously on the goroutine of the call (Acquire, TryAcquire,
// Begin, Pause), outside every critical section (the semaphore's lock is
// not held), so it may call the semaphore; it must be safe for concurrent
// use. A nil fn means no observer (the default): the semaphore then builds
// no event and the admitted fast path costs one nil check.
// ratesem.Metrics.Observe is an observer that keeps
// Prometheus/OpenTelemetry-style counters.
//
// A fn that panics (or calls runtime.Goexit) cannot corrupt the accounting:
// the call it reports on is put right first, then the panic goes on to the
// caller of the method, unrecovered. A panic on Queued takes the waiter out
// of the queue (or undoes its admission, if it came meanwhile), so no
// admission is granted to a caller that is gone; a panic on Admitted gives
// the admission back, so the caller, who gets the panic instead, holds
// nothing: a call that waited is undone exactly (as when its context ends as
// it is granted), one admitted at once is released as by Release (the
// window counts it as a call that ended at once, on the safe side), and over
// Redis the call leaves flight in Redis. Refused and Cancelled events hold
// nothing; a pause is set before Paused is reported and stays set.
//
// A fn that blocks stalls its own caller only: every other goroutine's
// Acquire, Release and End go on meanwhile. But the call it reports on keeps
// its place while fn blocks: after Admitted it holds its units (as a slow
// call would), and after Queued it waits in the queue, may be granted and
// then holds its units until fn returns and its Acquire sees that its
// context is done (the admission is then undone) or returns. So fn should
// not block.
func WithObserver(fn func(ratesem.Event)) Option {
	return func(c *config) { c.Observer = fn }
}

// The observe methods are inlined as a nil check; the event is built in
// emit, out of line, so that the admitted fast path's frame does not grow.

// observeAdmitted reports the admission of n units, which the caller now
// holds: w is its waiter when it had queued, else nil; c is its Call when
// Begin admitted it, else nil.
func (s *RateSemaphore) observeAdmitted(n int64, w *waiter, c *Call) {
	if s.obs != nil {
		s.emitHeld(n, w, c)
	}
}

// emitHeld sends the Admitted event of observeAdmitted. When the observer
// panics (or calls runtime.Goexit), the admission is taken back before the
// panic goes on to the caller, who never got it: the waiter's exactly
// (undoLocked, as when its context ends as it is granted), an admission
// at once as a Release (the window counts a call that ended at once, on
// the safe side: it cannot always tell the instant it admitted at). The
// deferred call does not recover, so the panic keeps its stack.
//
//go:noinline
func (s *RateSemaphore) emitHeld(n int64, w *waiter, c *Call) {
	returned := false
	defer func() {
		if !returned {
			s.takeBack(n, w, c)
		}
	}()
	wait := time.Duration(0)
	if w != nil {
		wait = max(w.granted.Sub(w.since), 0)
	}
	s.emit(ratesem.Admitted, n, w, wait, nil)
	returned = true
}

// takeBack undoes the admission of n units whose observer panicked (see
// emitHeld).
func (s *RateSemaphore) takeBack(n int64, w *waiter, c *Call) {
	s.lockDeferred()
	defer s.unlockDeferred()
	if c != nil {
		s.endCallLocked(*c)
	}
	if w != nil {
		s.undoLocked(w)
		return
	}
	s.cur -= n
	s.admitted--
	now := s.now()
	var ns int64 // as in Release: 0 when the window does not read it
	if s.doneUsesTime && s.interval > 0 {
		ns = s.nanosOf(now)
	}
	s.policy.Done(ns, n)
	if s.waiters.Len() > 0 {
		s.notifyLocked(now)
	}
}

// observeQueued reports that the call of w joined the queue. When the
// observer panics (or calls runtime.Goexit), w leaves the queue (or its
// admission, if it came meanwhile, is undone) before the panic goes on to
// the caller: no admission is ever granted to a caller that is gone.
func (s *RateSemaphore) observeQueued(w *waiter) {
	if s.obs == nil {
		return
	}
	returned := false
	defer func() {
		if !returned {
			s.abandon(w)
		}
	}()
	s.emit(ratesem.Queued, w.n, nil, 0, nil)
	returned = true
}

// observeFailed reports the failure err of an Acquire of n units; w is its
// waiter when it had queued, else nil.
func (s *RateSemaphore) observeFailed(n int64, w *waiter, err error) {
	if s.obs != nil {
		s.emit(obs.FailKind(err), n, w, -1, err)
	}
}

// emit builds and sends an event of kind for a call of n units; w is its
// waiter when it had queued (the wait is then wait, or the time since it
// began waiting when wait < 0).
//
//go:noinline
func (s *RateSemaphore) emit(kind ratesem.EventKind, n int64, w *waiter, wait time.Duration, err error) {
	e := ratesem.Event{Kind: kind, Weight: n, Err: err}
	if w != nil {
		if wait < 0 {
			wait = max(s.now().Sub(w.since), 0)
		}
		e.Queued, e.Wait = true, wait
	}
	s.obs(e)
}

// observePaused reports a pause until until, if Pause set one.
func (s *RateSemaphore) observePaused(set bool, until time.Time) {
	if set && s.obs != nil {
		s.obs(ratesem.Event{Kind: ratesem.Paused, Until: until, Pause: until.Sub(s.now()), Source: ratesem.SourceCaller})
	}
}

// observeAdmitted reports, over Redis, the admission of n units begun at
// since, as the call c (nil for 0 units without a round trip). If the
// observer panics (or calls runtime.Goexit), c is released before the panic
// goes on to the caller, who never got it; the deferred call does not
// recover, so the panic keeps its stack.
func (r *redisSem) observeAdmitted(n int64, since time.Time, c *remote.Call) {
	if r.obs == nil {
		return
	}
	returned := false
	defer func() {
		if !returned && c != nil {
			c.Release()
		}
	}()
	e := ratesem.Event{Kind: ratesem.Admitted, Key: r.name, Weight: n}
	if !since.IsZero() {
		e.Wait = time.Since(since)
	}
	r.obs(e)
	returned = true
}

// observeFailed reports, over Redis, the failure err of an admission of n
// units begun at since.
func (r *redisSem) observeFailed(n int64, since time.Time, err error) {
	if r.obs != nil {
		r.obs(ratesem.Event{Kind: obs.FailKind(err), Key: r.name, Weight: n, Wait: time.Since(since), Err: err})
	}
}

// observe reports e for the semaphore over Redis, if it has an observer.
func (r *redisSem) observe(e ratesem.Event) {
	if r.obs != nil {
		e.Key = r.name
		r.obs(e)
	}
}
