package semaphore

import (
	"context"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/obs"
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
// Pause), after the semaphore's lock is released, so it may call the
// semaphore; it must be safe for concurrent use and must not block. A nil
// fn means no observer (the default): the semaphore then builds no event
// and the admitted fast path costs one nil check. ratesem.Metrics.Observe
// is an observer that keeps Prometheus/OpenTelemetry-style counters.
func WithObserver(fn func(ratesem.Event)) Option {
	return func(c *config) { c.observer = fn }
}

// The observe methods are inlined as a nil check; the event is built in
// emit, out of line, so that the admitted fast path's frame does not grow.

// observeAdmitted reports an admission of n units at once (no queueing).
func (s *RateSemaphore) observeAdmitted(n int64) {
	if s.obs != nil {
		s.emit(ratesem.Admitted, n, nil, 0, nil)
	}
}

// observeQueued reports that a call of n units joined the queue.
func (s *RateSemaphore) observeQueued(n int64) {
	if s.obs != nil {
		s.emit(ratesem.Queued, n, nil, 0, nil)
	}
}

// observeKept reports the end of the wait of w, granted: its admission if
// kept, else its cancellation (ctx ended as it was granted).
func (s *RateSemaphore) observeKept(w *waiter, kept bool, ctx context.Context) {
	switch {
	case s.obs == nil:
	case kept:
		s.emit(ratesem.Admitted, w.n, w, max(w.granted.Sub(w.since), 0), nil)
	default:
		s.emit(ratesem.Cancelled, w.n, w, -1, ctx.Err())
	}
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

// observeTry reports the admission of a TryAcquire of n units, if ok.
func (s *RateSemaphore) observeTry(n int64, ok bool) {
	if ok && s.obs != nil {
		s.emit(ratesem.Admitted, n, nil, 0, nil)
	}
}

// observePaused reports a pause until until, if Pause set one.
func (s *RateSemaphore) observePaused(set bool, until time.Time) {
	if set && s.obs != nil {
		s.obs(ratesem.Event{Kind: ratesem.Paused, Until: until, Pause: until.Sub(s.now()), Source: ratesem.SourceCaller})
	}
}

// acquireObserved is Acquire over Redis with an observer: the wait is the
// time Acquire took on the real clock.
func (r *redisSem) acquireObserved(ctx context.Context, n int64) error {
	since := time.Now()
	_, err := r.acquireLocal(ctx, n)
	e := ratesem.Event{Kind: ratesem.Admitted, Key: r.name, Weight: n, Wait: time.Since(since)}
	if err != nil {
		e.Kind, e.Err = obs.FailKind(err), err
	}
	r.obs(e)
	return err
}

// observe reports e for the semaphore over Redis, if it has an observer.
func (r *redisSem) observe(e ratesem.Event) {
	if r.obs != nil {
		e.Key = r.name
		r.obs(e)
	}
}
