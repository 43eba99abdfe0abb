package ratesem

import "errors"

// The errors of ratesem. Every package returns these sentinels (wrapped,
// with the details of the case) and defines no sentinel of its own, so one
// errors.Is check works whichever package the error came from:
//
//	if errors.Is(err, ratesem.ErrDeadline) { … }
//
// Every message starts with "ratesem: ".
var (
	// ErrInvalidLimit: a limit that is negative, zero where a rate is
	// needed, too large, or malformed text (window.ParseLimit, a Table, a
	// server's header). A limit passed to a constructor as numbers panics
	// instead (see the package doc).
	ErrInvalidLimit = errors.New("ratesem: invalid limit")

	// ErrNegativeWeight: a call's weight below zero, which would credit
	// the window instead of charging it. Returned at once.
	ErrNegativeWeight = errors.New("ratesem: negative weight")

	// ErrWeightTooLarge: a call heavier than the limit can ever admit (its
	// capacity). Returned at once rather than waiting forever.
	ErrWeightTooLarge = errors.New("ratesem: weight exceeds the limit")

	// ErrInFlight: a non-blocking try found no room that waiting alone can
	// make: only calls in flight ending (a release) can.
	ErrInFlight = errors.New("ratesem: no room until calls in flight end")

	// ErrDeadline: a wait failed early because the admission would come
	// after the context's deadline. The error also matches
	// context.DeadlineExceeded.
	ErrDeadline = errors.New("ratesem: admission would come after the context deadline")

	// ErrQueueFull: a wait was refused at once because the limiter's queue
	// already held its maximum number of waiters.
	ErrQueueFull = errors.New("ratesem: queue full")

	// ErrQueueTimeout: a call waited in the queue for longer than its
	// queue-wait budget (separate from the context's deadline, which the
	// call's own request keeps).
	ErrQueueTimeout = errors.New("ratesem: queue-wait budget exceeded")

	// ErrClosed: the limiter was closed.
	ErrClosed = errors.New("ratesem: closed")

	// ErrUnavailable: Redis could not be reached (no answer in time, or a
	// Redis error) and no fallback admitted the call; it wraps the Redis
	// error.
	ErrUnavailable = errors.New("ratesem: redis unavailable")

	// ErrLimitMismatch: the limit given differs from the one another
	// process stored in Redis under the same name.
	ErrLimitMismatch = errors.New("ratesem: limit differs from the one stored in Redis")

	// ErrEviction: the Redis server may evict the limit's keys (its
	// maxmemory-policy is not noeviction), which would forget calls and
	// let the fleet exceed the limit.
	ErrEviction = errors.New("ratesem: the Redis server may evict the limit's keys")

	// ErrUnknownRule: a charge names a rule the Table does not have.
	ErrUnknownRule = errors.New("ratesem: unknown rule")

	// ErrNoEndpoint: a request matches no endpoint of a clientpool.Table
	// that has no Default and does not set UnmatchedUnlimited; the request
	// is not sent. Add the endpoint (or a Default) to the Table.
	ErrNoEndpoint = errors.New("ratesem: request matches no endpoint")

	// ErrTooManyKeys: a pool already holds its maximum number of live keys.
	ErrTooManyKeys = errors.New("ratesem: too many live keys")

	// ErrTooManyCharges: a call falls under more rules than one Redis
	// admission can decide.
	ErrTooManyCharges = errors.New("ratesem: too many charges for one call")
)
