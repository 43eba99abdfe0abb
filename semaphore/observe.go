package semaphore

import (
	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/engine"
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
// In process a fn that blocks stalls its own caller only: every other goroutine's
// Acquire, Release and End go on meanwhile.
// Over Redis (package redisrate) a waiter asks Redis on its own goroutine,
// so a fn that blocks on the Queued event of a call at the head of a
// queue also holds up the calls queued behind it on the same keys until
// fn returns. But the call it reports on keeps
// its place while fn blocks: after Admitted it holds its units (as a slow
// call would), and after Queued it waits in the queue, may be granted and
// then holds its units until fn returns and its Acquire sees that its
// context is done (the admission is then undone) or returns. So fn should
// not block.
func WithObserver(fn func(ratesem.Event)) Option {
	return func(c *engine.Config) { c.Observer = fn }
}
