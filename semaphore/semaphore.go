package semaphore

import (
	"context"
	"fmt"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/engine"
	"github.com/ratesem/ratesem/window"
)

// RateSemaphore is a weighted semaphore that also limits the rate: at most n
// units in flight at once (or a lower concurrency cap) and, by default, at
// most n units per interval counted by the completion window
// (window.NewCompletion): at every instant, units in flight + units of calls
// that ended within the last interval ≤ n. A server that counts arrivals
// therefore never sees more than n per interval, whatever the latency, as
// long as each call is released after its reply (a call released at a
// cancel, before any reply, may still reach the server after its end).
// NewWithPolicy puts any other window of package window in its place.
//
// Its method set is a superset of *semaphore.Weighted from
// golang.org/x/sync, so it is a drop-in replacement: Acquire blocks until
// admitted, TryAcquire never blocks, Release ends a call. Do wraps a call the
// way Python's `async with sem:` does. Waiters are served in FIFO order
// within a priority class (ratesem.WithPriority on the context): a caller
// never overtakes one of its class or a higher one that asked earlier, so
// large weights do not starve, and at most 16 (see ratesem.Priority) later
// callers of each higher class overtake it. A waiter sleeps on one timer,
// set for the instant the head of the queue can be admitted; nothing polls.
//
// A call's start is the instant Acquire returns and its end the instant
// Release is called: release as soon as the call's response has been read,
// since the rate window counts from then.
//
// The zero RateSemaphore is not usable; call New. A RateSemaphore is safe
// for concurrent use by multiple goroutines.
//
// It is the one-rule front of ratesem's waiting engine (the one
// clientpool.Pool drives too): one limiter, and a fast path for a call
// admitted at once with nobody waiting.
type RateSemaphore struct {
	o *engine.One
}

// New returns a RateSemaphore that admits at most n units in flight and at
// most n units per interval (a time.Duration) under the completion window.
//
// interval 0 means no rate limit: the semaphore then behaves like
// golang.org/x/sync/semaphore.NewWeighted(n), edge cases included (n = 0
// admits only zero weights; a weight larger than n waits for its context
// without blocking other callers), with one intended difference: a
// negative weight, on which x/sync panics, is refused instead (Acquire
// returns an error matching ratesem.ErrNegativeWeight, TryAcquire false;
// Release of a negative n panics, as in x/sync). New panics if n or
// interval is negative.
func New(n int64, interval time.Duration, opts ...Option) *RateSemaphore {
	cfg := buildConfig(opts)
	if cfg.One != nil {
		return &RateSemaphore{o: cfg.One} // redisrate.NewSemaphore
	}
	if n < 0 || interval < 0 {
		panic(fmt.Sprintf("ratesem: New(%d, %v): negative limit", n, interval))
	}
	inProcess(&cfg)
	l := window.Limit{N: n, Per: interval}
	if cfg.Start {
		return &RateSemaphore{o: engine.NewOne(window.NewSlidingLog(l, cfg.Margin), cfg)}
	}
	return &RateSemaphore{o: engine.NewOne(window.NewCompletion(l), cfg)}
}

// NewWithPolicy returns a RateSemaphore whose rate window is p, any of the
// windows of package window: window.NewFixedWindow(l) to match a server
// that counts fixed windows, window.NewGCRA(l, burst) or
// window.NewTokenBucket(l, burst) for a token bucket, and so on; each
// documents its exact guarantee. The semaphore admits at most p.Limit().N
// units in flight (or the WithMaxUnitsInFlight cap), and SetLimit(n, interval)
// sets p's limit to n per interval. Waiting, FIFO order, cancellation, Pause
// and Stats work as with New.
//
// A call heavier than can ever start (p.Capacity(), a bucket's burst, or
// p.Limit().N or the concurrency cap, whichever is least) is handled as in
// Acquire: while p has a rate (Per > 0) it fails at once with
// ratesem.ErrWeightTooLarge; with Per 0 the semaphore is x/sync's Weighted
// of N units, and such a call waits for its context, as Weighted does for a
// weight above its size, without holding up other callers, or until a
// SetLimit makes it fit.
//
// A window of another package works too (it implements window.Policy); the
// windows of package window take a faster path, with no time.Time built for
// an admitted call. Its methods run under the semaphore's lock: one that
// blocks stalls every caller meanwhile; one that panics (or calls
// runtime.Goexit) leaves the semaphore unlocked and usable, and the panic
// goes on, unrecovered, to the caller of the method that ran it (Acquire,
// Release, End, SetLimit …; when the semaphore's timer admits a waiter, its
// goroutine, which ends the program).
//
// The semaphore owns p: do not use p elsewhere. NewWithPolicy panics if p is
// nil, if WithStartWindow is given too (the policy already is the window),
// and on an option it cannot honour, as New does.
func NewWithPolicy(p window.Policy, opts ...Option) *RateSemaphore {
	if p == nil {
		panic("ratesem: NewWithPolicy: nil policy")
	}
	cfg := buildConfig(opts)
	inProcess(&cfg)
	if cfg.Start {
		panic("ratesem: NewWithPolicy: WithStartWindow conflicts with the policy given")
	}
	return &RateSemaphore{o: engine.NewOne(p, cfg)}
}

// Acquire acquires n units (n ≥ 0), blocking until they are admitted or ctx
// is done. On success it returns nil and the caller must Release(n) when the
// call ends.
//
// On failure it leaves the semaphore unchanged (no unit held, nothing
// recorded in the window, the waiters behind it move on) and returns:
//   - ctx.Err() itself when ctx is done, even if the units were free: a
//     context done before the call never acquires;
//   - an error matching both ratesem.ErrDeadline and context.DeadlineExceeded
//     (errors.Is) as soon as the wait is known to end after ctx's deadline,
//     without waiting for the deadline; the estimate assumes the limit is
//     not raised meanwhile, and the deadline is compared with instants of
//     the semaphore's clock (with WithClock, derive ctx from that clock, as
//     clock.Mock's WithTimeout does);
//   - an error matching ratesem.ErrWeightTooLarge at once when the semaphore is
//     rate-limited and n exceeds its limit, concurrency cap or window's
//     capacity (a bucket's burst, see NewWithPolicy). Without a
//     rate limit (interval 0) such a call waits for ctx, as x/sync does,
//     without holding up other callers (or until a SetLimit makes it fit);
//   - an error matching ratesem.ErrNegativeWeight at once when n is
//     negative;
//   - an error matching ratesem.ErrQueueFull at once when the call must wait
//     and WithMaxQueue callers already wait;
//   - an error matching ratesem.ErrQueueTimeout (not
//     context.DeadlineExceeded) when the call waited its queue-wait budget
//     (ratesem.WithQueueWait on ctx), or as soon as its admission is known
//     to come after that budget.
//
// A call that must wait reads its priority (ratesem.WithPriority) and its
// queue-wait budget from ctx; a call admitted at once reads neither. Built with
// redisrate.NewSemaphore, priorities, WithMaxQueue and the queue-wait budget
// hold among this process's waiters.
//
// Built with redisrate.NewSemaphore, it may also return an error matching
// ratesem.ErrUnavailable (Redis unreachable, no fallback),
// ratesem.ErrLimitMismatch (another process opened the name with another limit)
// or ratesem.ErrClosed (after Close); a call of 0 units makes no round trip,
// and ctx's deadline holds whatever the Redis client's options.
func (s *RateSemaphore) Acquire(ctx context.Context, n int64) error { return s.o.Acquire(ctx, n) }

// TryAcquire acquires n units (n ≥ 0) without blocking. It returns true on
// success (the caller must Release(n) later); on failure it returns false and
// leaves the semaphore unchanged. It fails whenever other callers are waiting,
// so it never overtakes them. A negative n is refused (false). Built with
// redisrate.NewSemaphore, it makes one admission round trip (bounded by
// redisrate.WithTimeout) unless callers wait, a pause is on or the limit is known
// full, when it fails at once.
func (s *RateSemaphore) TryAcquire(n int64) bool { return s.o.TryAcquire(n) }

// TryAcquireWait is TryAcquire that says how long the call would wait,
// with window.Limiter.TryN's contract: admitted, it returns (0, nil) and
// the caller must Release(n) later; refused by time alone, it changes
// nothing and returns how long from now the call could start if nothing
// else changed (a time.Duration > 0, nil error; with callers waiting, the
// wait of the first of them, which this call would queue behind); an
// error matching ratesem.ErrInFlight when only calls in flight ending (or
// a larger limit) can make room, or callers wait whose admission time is
// not known; an error matching ratesem.ErrWeightTooLarge when n exceeds
// what can ever start under a rate; one matching ratesem.ErrNegativeWeight
// for a negative n. It never blocks in process. Built with
// redisrate.NewSemaphore it makes one admission round trip (as TryAcquire)
// and a refusal by Redis is reported as ratesem.ErrInFlight: the wait
// Redis names is not known to this process yet.
func (s *RateSemaphore) TryAcquireWait(n int64) (retryAfter time.Duration, err error) {
	return s.o.TryAcquireWait(n)
}

// Release releases n units (n ≥ 0) held by a call that has ended; under the
// completion window the instant of Release is the call's end. It never blocks,
// over Redis either: the release is sent in the background (see
// redisrate.NewSemaphore), and Release of n units ends the oldest call of
// exactly n units that Acquire or TryAcquire admitted in this process, or else
// n units of the oldest such calls (a call partly released stays in flight in
// Redis until all its units are). It panics
// if n is negative or more units are released than Acquire and TryAcquire
// admitted and are not yet released (caller bugs), as x/sync does; the units
// of a Call from Begin are not Release's to give back (its End does), so a
// Release that would take them panics too, whoever else holds units.
func (s *RateSemaphore) Release(n int64) { s.o.Release(n) }

// Do acquires one unit, runs fn, and releases the unit when fn returns or
// panics (the panic then goes on). It returns Acquire's error without
// running fn, or fn's error. It blocks like Acquire. For a call of n
// units, Acquire(ctx, n) and defer Release(n) do the same.
func (s *RateSemaphore) Do(ctx context.Context, fn func(context.Context) error) error {
	if err := s.o.Acquire(ctx, 1); err != nil {
		return err
	}
	defer s.o.Release(1)
	return fn(ctx)
}

// Pause holds every new start until the instant until (read on the
// semaphore's clock): callers keep waiting, in order, and calls in flight go
// on. Overlapping pauses do not add up; the later end wins. A time in the
// past changes nothing. It never blocks. Feed it from a 429 or 418 response's
// Retry-After; PauseFor takes the delay form.
//
// Built with redisrate.NewSemaphore, the pause is measured on the real clock,
// capped at 5 minutes (a hostile Retry-After cannot hold the fleet longer),
// holds this process at once and is sent to Redis in the background (one
// round trip bounded by redisrate.WithTimeout, skipped while Redis is unreachable),
// so every process sharing the name pauses.
func (s *RateSemaphore) Pause(until time.Time) { s.o.Pause(until) }

// PauseFor is Pause(now + d): no new starts for the time.Duration d from now.
// A d ≤ 0 changes nothing.
func (s *RateSemaphore) PauseFor(d time.Duration) {
	if d <= 0 {
		return
	}
	s.o.Pause(s.o.Now().Add(d))
}

// SetLimit changes the limit to n units per interval, at run time, keeping the
// accounting: units in flight and the window's record of calls still inside the
// old window count against the new limit at once, so lowering it never lets a
// burst through, and raising it admits waiters at once. A concurrency cap set
// by WithMaxUnitsInFlight stays in force (never above n). Waiters whose weight
// no longer fits fail at once with ratesem.ErrWeightTooLarge; with interval 0
// they wait aside, as in Acquire, until their context ends or a later SetLimit
// makes them fit, and then rejoin the queue in their order of arrival. It
// returns an error matching ratesem.ErrInvalidLimit, and changes nothing, if n
// or interval is negative. It never blocks in process.
//
// For a RateSemaphore built with redisrate.NewSemaphore, SetLimit stores the
// new limit in Redis for every process sharing the name (each adopts it at its
// next admission), in one round trip bounded by redisrate.WithTimeout; it returns an
// error matching ratesem.ErrUnavailable when Redis cannot be reached, and one
// matching ratesem.ErrInvalidLimit for n = 0, interval 0 or an interval that is
// not a whole number of microseconds.
//
// Calls that ended while interval was 0 read no clock, so a switch from
// interval 0 to a positive interval starts the window afresh: only units in
// flight count.
func (s *RateSemaphore) SetLimit(n int64, interval time.Duration) error {
	if n < 0 || interval < 0 {
		return fmt.Errorf("%w: SetLimit(%d, %v): negative", ratesem.ErrInvalidLimit, n, interval)
	}
	return s.o.SetLimit(n, interval)
}

// Limit returns the current limit: n units per interval (Per 0: no rate). For a
// RateSemaphore built with redisrate.NewSemaphore it is the limit this process
// set (redisrate.NewSemaphore or SetLimit): a SetLimit in another process is
// adopted in Redis, where every admission is decided, but not shown here, and
// this process still refuses at once a weight above its own n.
func (s *RateSemaphore) Limit() window.Limit { return s.o.Limit() }

// Stats is a snapshot of a RateSemaphore's counters (RateSemaphore.Stats).
// Counts are totals since New; durations are time.Duration. A plain value.
type Stats struct {
	// InFlight is the units held by admitted calls not yet released.
	InFlight int64
	// Waiting is the number of callers blocked in Acquire.
	Waiting int
	// Admitted counts the calls admitted since New, by Acquire or
	// TryAcquire; an admission its caller gave up on is not counted.
	Admitted uint64
	// TotalWait is the time admitted calls spent waiting in Acquire, summed;
	// TotalWait / Admitted is the mean wait.
	TotalWait time.Duration
	// MaxWait is the longest wait of one admitted call.
	MaxWait time.Duration
	// PausedUntil is when the current pause ends; zero when none is set.
	// It may lie in the past once the pause is over. Over Redis it is the
	// latest pause set in this process.
	PausedUntil time.Time

	// The counters below are of a RateSemaphore built with
	// redisrate.NewSemaphore; they are zero in process.

	// FallbackAdmitted counts the calls of Admitted that the fallback
	// (redisrate.WithFallback) admitted while Redis was unreachable.
	FallbackAdmitted uint64
	// FallbackCarried counts the calls of the fallback carried into Redis
	// when it answered again (see redisrate.WithFallback).
	FallbackCarried uint64
	// RedisAdmits counts the admission round trips (refused, admitted or
	// failed).
	RedisAdmits uint64
	// RedisErrors counts the round trips of any kind that failed (no answer
	// within redisrate.WithTimeout, or a Redis error).
	RedisErrors uint64
	// Cancelled counts admissions taken back from Redis because the
	// caller's context ended (or Close came) as Redis admitted it.
	Cancelled uint64
	// CancelsFailed counts the cancellations that could not reach Redis:
	// those units count until the lease runs out.
	CancelsFailed uint64
	// ReleasesFailed counts the releases that failed in Redis (an error,
	// no answer in time): those units count until the lease runs out.
	ReleasesFailed uint64
	// ReleasesDropped counts the releases never sent: the release queue
	// was full, or Close came first. Those units count until the lease
	// runs out.
	ReleasesDropped uint64
	// ReleasesLost counts the releases of calls Redis no longer knew: it
	// lost its state (a restart), or the call outlived its lease.
	ReleasesLost uint64
	// Recoveries counts the times Redis answered again after being taken
	// as unreachable.
	Recoveries uint64
	// StateLost counts the admissions that found the limit's state lost in
	// Redis (evicted, deleted, a restart); the limit is then held full for
	// the time the state mattered.
	StateLost uint64
	// LimitMismatches counts the admissions refused with ratesem.ErrLimitMismatch.
	LimitMismatches uint64
	// Unavailable reports whether Redis is taken as unreachable now (until
	// a probe gets an answer): admissions go to the fallback, or fail.
	Unavailable bool
}

// Stats returns a snapshot of the counters. It makes no round trip to Redis
// and blocks only for the semaphore's lock.
func (s *RateSemaphore) Stats() Stats { return Stats(s.o.Stats()) }

// Close stops a RateSemaphore built with redisrate.NewSemaphore: callers in
// Acquire return ratesem.ErrClosed, and so do later calls to Acquire
// (TryAcquire returns false); once Close has returned, no Acquire succeeds.
// Releases already queued are sent for at most redisrate.WithTimeout; a Release
// after Close is not sent (the lease covers it; Stats.ReleasesDropped counts
// it). Close waits for the round trips still running, at most twice
// redisrate.WithTimeout, does not close the Redis client, and returns nil; calling
// it again only waits again. In process Close does nothing and returns nil.
func (s *RateSemaphore) Close() error { return s.o.Close() }
