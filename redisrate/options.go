package redisrate

import (
	"time"

	"github.com/ratesem/ratesem/internal/engine"
	"github.com/ratesem/ratesem/semaphore"
)

// The options of Redis mode. Each is a semaphore.Option, the same type as
// clientpool.Option: it applies to NewSemaphore, NewSemaphoreWithPolicy and
// a clientpool.Pool built with Shared. Given to a front in process
// (semaphore.New, clientpool.New without Shared) it is refused:
// clientpool.New returns an error and semaphore.New panics. An invalid
// value makes the constructor return an error naming the option.

// DefaultPrefix is the prefix of the keys of a RateSemaphore built with
// NewSemaphore, unless WithPrefix sets another.
const DefaultPrefix = engine.DefaultPrefix

// WithPrefix sets the prefix of a RateSemaphore's Redis keys (default
// DefaultPrefix): the limit's keys are the prefix, the name as a hash tag,
// and a suffix. Every process sharing the limit must use the same prefix.
// It must not be empty. A Pool's prefix is Shared's: WithPrefix is refused
// there.
func WithPrefix(prefix string) semaphore.Option { return engine.WithPrefix(prefix) }

// WithLease sets how long a call admitted by Redis counts as in flight
// without a release reaching Redis (default one minute; it must be
// positive, a whole number of microseconds and at most 2^40 µs, about 12.7
// days). If the process dies, or its release is lost (Redis unreachable,
// Close), the call's units come back when the lease runs out (and, under
// the completion window, count an interval more). Pick a lease longer than
// the calls take: a call still running when its lease runs out is taken as
// ended then.
func WithLease(d time.Duration) semaphore.Option { return engine.WithLease(d) }

// WithTimeout bounds each round trip to Redis (default one second; it
// must be positive; one above about 73 years counts as 73 years), whatever the go-redis client's own options: an
// admission, a release, a cancellation or a pause that gets no answer by
// then counts as Redis being unreachable. Each admission runs on a
// goroutine of its own, so a client built without ContextTimeoutEnabled
// cannot hold a caller longer. It also bounds the checks NewSemaphore and
// clientpool.New make.
func WithTimeout(d time.Duration) semaphore.Option { return engine.WithTimeout(d) }

// WithJitter sets the most random extra sleep added to each wait that Redis
// prescribes, so that processes told the same wait do not all come back in
// the same instant: a uniform draw in [0, min(max, wait/10)]. 0 turns
// jitter off; a negative max is an error. Default: 5 ms.
func WithJitter(max time.Duration) semaphore.Option { return engine.WithJitter(max) }

// WithBlocks turns on blocks (off by default): a process takes k calls'
// worth of a limit from Redis in one admission (a block; fewer calls when
// k times a call's weight exceeds the limit) and hands them to its own
// callers with no round trip each, for hold at most (a duration, e.g.
// 50 ms; it must be positive and at most the lease, WithLease; k must be
// at least 2 calls; under window.NewFixedCompletion, only within the
// window the block was taken in). For very hot limits: with k = 64, about one round
// trip to take a block and one to give it back per 64 calls.
//
// Only calls whose every rule is a completion window (the default window,
// window.NewCompletion, and window.NewFixedCompletion) use blocks; the
// others (sliding log, fixed window, counters, buckets, GCRA count starts)
// go to Redis one by one as without the option. A block is as exact as
// calls one by one, on the safe side: Redis counts its used calls in
// flight from the block's admission until it goes back (when it has
// handed out its k calls or its hold ended, and every call taken from it
// ended), and as ended then; its unused calls are given back at once then.
// Near the limit, when Redis refuses a whole block, calls are admitted one
// by one (for a hold, no block is asked).
//
// The trade: a process holds up to k calls it may not use for up to
// hold, which the other processes wait for meanwhile (longer when a call
// taken from a block outlasts the hold: the block goes back only when its
// last call ends, so blocks suit short calls); a process that dies
// holds its block until its lease ends (WithLease), as any call in
// flight. A call taken from a block counts in Redis until the block's
// lease runs out at the latest, a lease after the block's admission (not
// the call's): pick a lease longer than hold plus the longest call. A
// loss of Redis's state (FLUSHALL, a restart without persistence) loses
// the blocks too: the calls taken from a block after the loss, until its
// hold ends or an admission of this process learns of the loss, are not
// counted in Redis (keep hold well below the limit's interval). A pause stored in Redis by another process (or a lower limit)
// reaches this one within hold. While Redis is unreachable no block is
// used (WithFallback decides, or Acquire fails); a block taken before
// keeps counting in Redis as the calls in flight do. Refused in process,
// as every option of this package.
func WithBlocks(k int64, hold time.Duration) semaphore.Option { return engine.WithBlocks(k, hold) }

// WithFallback keeps a RateSemaphore built with NewSemaphore working while
// Redis is unreachable: the process then admits calls through a local
// RateSemaphore of floor(share·n) units per interval (at least 1), the same
// kind of window, on the assumption that it owns share of the limit (set
// share to 1/P for P processes to stay within n overall). share must be in
// (0, 1]. Default: no fallback; Acquire returns an error matching
// ratesem.ErrUnavailable. A Pool has no fallback: it refuses the option.
//
// When Redis answers again (a probe every 100 to 200 ms while the fallback
// has calls that still count, made even when no caller asks), the calls the
// fallback admitted are carried into Redis before any other call of the
// process: those in flight as calls in flight there (their Release goes to
// Redis), those that ended within the interval as ended then (counted from
// then on: longer than they need, never less); a carry that a frozen Redis
// runs after the process gave up on it is refused there, as a late
// admission is, and a carry that finds Redis's state lost holds the limit
// from then, as an admission would. Until the fallback's window
// has drained (the interval after its last call ended) a call must fit both
// Redis and the local share, so processes that reach Redis again at
// different moments still stay within n together; callers waiting on the
// local share go to Redis as soon as it answers. What this cannot cover: a
// process that made no call during the outage and calls before the others
// have carried theirs (at most their next probe) is admitted by Redis without
// them; a network split, where some processes still reach Redis while others
// fall back, lets the fleet exceed n; and Redis's calls of the moments before
// the outage are not known to the local share.
func WithFallback(share float64) semaphore.Option { return engine.WithFallback(share) }

// WithEvictionAllowed lets NewSemaphore, NewSemaphoreWithPolicy and
// clientpool.New with Shared use a server whose maxmemory-policy is not
// noeviction (they fail with ratesem.ErrEviction otherwise). Under such a
// policy Redis may delete the limits' keys when memory runs short: the
// state then forgets the calls it counted. A loss that a process saw the
// state of is detected and the limit held full for the time the state
// mattered (semaphore.Stats.StateLost), but a loss no process can see goes
// unnoticed, and the fleet may exceed a limit.
func WithEvictionAllowed() semaphore.Option { return engine.WithEvictionAllowed() }

// WithDeferredChecks makes NewSemaphore, NewSemaphoreWithPolicy and
// clientpool.New with Shared build without asking Redis, for a program that
// starts before Redis does. Without it they make one round trip, bounded by
// WithTimeout, and fail with an error that says which check failed:
// ratesem.ErrUnavailable (Redis does not answer), ratesem.ErrLimitMismatch
// (another process stored another limit under the name, or for a rule's
// key "") or ratesem.ErrEviction (see WithEvictionAllowed). With it the
// first two show at the first Acquire (which, with WithFallback, admits
// calls locally while Redis does not answer), and the eviction check runs
// at the first call that finds Redis answering: an evicting server then
// fails that call and every later one with ratesem.ErrEviction.
func WithDeferredChecks() semaphore.Option { return engine.WithDeferredChecks() }
