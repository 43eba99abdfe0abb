// Package redisrate keeps the limits of packages semaphore and clientpool
// in Redis, so that every process sharing an API key or an IP shares one
// limit: NewSemaphore and NewSemaphoreWithPolicy return a
// *semaphore.RateSemaphore, and Shared is the option that puts a
// clientpool.Pool's rules in Redis. It is the one package of ratesem that
// imports go-redis (github.com/redis/go-redis/v9): a program that uses only
// the in-process semaphore and pool does not link it.
//
// Every decision is made atomically by one Lua script on the Redis
// server's clock; waiting stays in each process, in the same engine and
// queues as in process (FIFO per limiter by priority class; a refused head
// talks to Redis and sleeps until the instant Redis gives). The options of this mode are in this package: WithLease,
// WithTimeout, WithJitter, WithEvictionAllowed and WithDeferredChecks for
// both fronts, WithFallback and WithPrefix for a semaphore. Each is a
// semaphore.Option, the same type as clientpool.Option; an option a mode
// cannot honour is refused with an error (a virtual clock over Redis, a
// Redis option in process), never ignored. A Redis server, a Sentinel
// group or a Redis Cluster (any goredis.UniversalClient) will do; on a
// cluster one limit (one semaphore name, one pool scope) lives on one node.
//
//	rdb := goredis.NewClient(&goredis.Options{Addr: "localhost:6379"})
//	sem, err := redisrate.NewSemaphore(rdb, "binance-ip", 1200, time.Minute)
//	if err != nil {
//		return err
//	}
//	defer sem.Close()
//
// The functions are safe for concurrent use; what they return is safe for
// concurrent use by many goroutines, as in process.
package redisrate

import (
	"errors"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/internal/engine"
	"github.com/ratesem/ratesem/internal/rstore"
	"github.com/ratesem/ratesem/semaphore"
	"github.com/ratesem/ratesem/window"
)

// NewSemaphore returns a *semaphore.RateSemaphore named name whose state is
// kept in Redis through c, so that every RateSemaphore built with the same
// name (and the same limit) in any process shares one limit of n units per
// interval (a time.Duration): replicas sharing one API key or one IP. It is
// the same type as semaphore.New's; Acquire, TryAcquire, Release, Do,
// Pause, PauseFor, SetLimit, Limit, Stats and Close all work, and the limit
// is decided on the Redis server's clock (TIME), so processes with skewed
// clocks agree.
//
// The window is the completion window by default (at every instant, units
// in flight + units of calls that ended within the last interval ≤ n,
// across all processes), or the start window with a margin
// (semaphore.WithStartWindow); semaphore.WithMaxUnitsInFlight caps the
// units in flight across every process. semaphore.WithClock is an error:
// the server's clock is the only one.
//
// # Round trips and waiting
//
// A lone call costs two round trips: the admission and the release, which
// is sent in the background (Release never waits on Redis; a release that
// cannot be sent is covered by the call's lease, WithLease). Concurrent
// calls of one process share them: the admissions of one scope that queue
// while a round trip is under way go out together in the next, as one
// script call (at most 64, decided in queue order, each all or nothing,
// strict FIFO per limit within it), and releases ride on the next
// admission's round trip or go out batched at once, never delayed by a
// timer (so at 16 goroutines a call costs about half a round trip). With
// WithBlocks a process takes k calls of a completion window in one
// admission and hands them out with no round trip at all. Waiters of one
// process queue FIFO; the calls queued on a limit Redis has not refused
// ask together; a refused head sleeps until the instant Redis
// gives, plus jitter (WithJitter), never polling; when only calls
// in flight ending can make room it re-asks at most every interval/4, or at
// once when a release of this process reached Redis. Every round trip is
// bounded by WithTimeout whatever the client's options.
// Acquire fails at once with ratesem.ErrDeadline when the wait Redis gives
// ends after ctx's deadline.
//
// # Limits agree across processes
//
// The limit is stored in Redis with the state. A process built with
// another limit for the same name gets an error matching
// ratesem.ErrLimitMismatch from NewSemaphore (or, when the other stores it
// later, from Acquire); SetLimit changes the limit for every process (each
// adopts it at its next admission).
//
// # When Redis is unreachable
//
// Without WithFallback, Acquire fails with an error matching
// ratesem.ErrUnavailable, at once while the last failure is recent (a probe
// goes out 100 ms after a failure, then after twice as long each time, up
// to 1 s). With WithFallback(share), admissions go to a local
// RateSemaphore of floor(share·n) units per interval meanwhile, and its
// calls are carried into Redis when it answers again (see WithFallback).
//
// NewSemaphore blocks for one round trip, bounded by
// WithTimeout, and fails with an error that says which
// check failed: ratesem.ErrUnavailable when Redis does not answer in time
// or refuses the connection, ratesem.ErrLimitMismatch when another process
// stored another limit under the name, and ratesem.ErrEviction when the
// server's maxmemory-policy is not noeviction (Redis may then evict the
// limit's keys) unless WithEvictionAllowed is given (a server
// that forbids CONFIG is not checked). WithDeferredChecks
// skips the round trip, for a program that starts before Redis: the checks
// then show at the first call. It returns an error
// matching ratesem.ErrInvalidLimit for n ≤ 0, an interval ≤ 0 or not a
// whole number of microseconds, a start-window margin not a whole number
// of microseconds, or semaphore.WithMaxUnitsInFlight(0); and a plain error
// for a nil client, an empty name or one longer than 512 bytes, and an
// invalid option (each Redis option names its valid range). It is safe for
// concurrent use. Close the RateSemaphore when done; Close does not close c.
func NewSemaphore(c goredis.UniversalClient, name string, n int64, interval time.Duration, opts ...semaphore.Option) (*semaphore.RateSemaphore, error) {
	if c == nil {
		return nil, errors.New("ratesem: redisrate.NewSemaphore: nil client")
	}
	return newSemaphore(c, name, n, interval, nil, opts)
}

// NewSemaphoreWithPolicy is NewSemaphore with any window of package window
// that has a Redis form (every one: window.NewCompletion,
// NewFixedCompletion, NewSlidingLog, NewFixedWindow,
// NewSlidingWindowCounter, NewSubWindowCounter, NewTokenBucket,
// NewLeakyBucket, NewGCRA, NewPacer): p, a fresh Policy, gives the kind and
// the limit kept in Redis, with the exact guarantee its doc states, across
// every process sharing the name. semaphore.WithMaxUnitsInFlight caps the
// units in flight across every process; semaphore.WithStartWindow is an
// error (the policy is the window). With WithFallback, p itself,
// set to floor(share·N) units per Per, becomes the local fallback (a bucket
// keeps its burst). The semaphore owns p. It blocks like NewSemaphore and
// returns its errors (ErrInvalidLimit for N ≤ 0 or Per ≤ 0), an error for a
// nil p, and one for a limit its Redis form cannot keep exactly (a Per not
// a whole number of microseconds, or N or Per too large; that error does
// not match ratesem.ErrInvalidLimit).
func NewSemaphoreWithPolicy(c goredis.UniversalClient, name string, p window.Policy, opts ...semaphore.Option) (*semaphore.RateSemaphore, error) {
	if c == nil {
		return nil, errors.New("ratesem: redisrate.NewSemaphoreWithPolicy: nil client")
	}
	if p == nil {
		return nil, errors.New("ratesem: redisrate.NewSemaphoreWithPolicy: nil policy")
	}
	return newSemaphore(c, name, 0, 0, p, opts)
}

// newSemaphore builds the engine of NewSemaphore (p nil) and
// NewSemaphoreWithPolicy, and the front over it.
func newSemaphore(c goredis.UniversalClient, name string, n int64, per time.Duration, p window.Policy, opts []semaphore.Option) (*semaphore.RateSemaphore, error) {
	cfg := engine.Config{Concurrency: -1}
	cfg.Build(opts)
	one, err := engine.NewShared(rstore.NewOpener(c), name, n, per, p, cfg)
	if err != nil {
		return nil, err
	}
	return semaphore.New(0, 0, engine.Built(one)), nil
}

// Shared returns the clientpool.Option that keeps the state of every rule
// in Redis, shared by every Pool (in this process or another) built over
// the same Redis with the same prefix and clientpool.Table.Scope: a fleet
// of replicas behind one IP or account then shares each rule's limit
// exactly, as one process would. Shared itself does not block and makes no
// round trip; clientpool.New reports its errors, and makes one round trip,
// bounded by a second, that fails it with ratesem.ErrUnavailable when Redis
// does not answer, ratesem.ErrLimitMismatch when another process stored
// another limit for a rule's key "", and ratesem.ErrEviction when the
// server's maxmemory-policy lets it evict the rules' keys (unless
// WithEvictionAllowed); WithDeferredChecks
// defers them to the first Acquire.
//
// c is a go-redis client of a server, a Sentinel group or a Redis Cluster
// (any goredis.UniversalClient); the Pool never closes it. prefix begins
// every key the Pool writes (1 to 512 bytes, no brace). Every key of one
// scope (clientpool.Table.Scope, or prefix when it is empty) shares one
// hash tag: on a Redis Cluster one scope lives in one slot, hence on one
// node (see clientpool.Table.Scope to spread the load).
//
// In Redis mode:
//
//   - Acquire admits a call under all its charges at once across the fleet,
//     in one round trip (one EVALSHA of one Lua script on the server's
//     clock); a refused call sleeps until the instant Redis names, plus
//     jitter, queued FIFO per (rule, key) in this process, and only the
//     head of a queue asks Redis again. A call in flight holds a lease
//     (one minute, WithLease): a process that dies mid-call
//     frees its units then. Errors checked before Redis (unknown rule,
//     negative weight, a weight too large, ratesem.ErrTooManyKeys) are the
//     same as in process; Redis adds ratesem.ErrLimitMismatch,
//     ratesem.ErrUnavailable and ratesem.ErrClosed. Each admission
//     carries the instant its caller stops waiting, on Redis's clock (the
//     skew read from earlier replies; a scope unread for a minute costs one
//     TIME round trip first): a script run after it (a Redis that woke
//     from a freeze) admits nothing, so no lease outlives its caller.
//   - A whole loss of Redis's state (FLUSHALL, a restart without
//     persistence, a failover to an empty replica) is detected by the
//     scope's epoch key, which every process remembers while its keys
//     cannot have expired: every rule of the scope is then held full for
//     one Per from the loss (a daily rule until its day ends), as a half
//     loss (one key evicted or deleted) is.
//   - clientpool.Ticket.Release sends the release in the background: it
//     never waits on Redis; a release lost (a Redis error, Close) is
//     covered by the lease.
//   - clientpool.Ticket.ObserveHeaders and Reconcile pass the server's
//     count to Redis (in the background), so every process sees it: Redis
//     then counts at least that many units in the window, never fewer than
//     it did.
//   - Pause and Throttled pause the same keys as in
//     process, in this process at once and in Redis, so every process
//     pauses; in Redis mode Pause is capped by clientpool.WithMaxPause as
//     throttles are, since it holds the whole fleet.
//   - SetLimit changes the limit in Redis for every key of the rule this
//     process knows (Snapshot), and for every other key of the rule the
//     moment this process meets it: every process adopts it there. It
//     blocks for those round trips.
//   - Snapshot, Len and Limit say what this process knows: its own calls
//     in flight and pauses, the keys it used, its own limits (not one
//     another process set and this one adopted); KeyState.Used is -1.
//   - Close stops the Pool's Redis engine; call it when done.
//
// Redis keeps names of at most 512 bytes: a key longer than that is
// kept under its SHA-256 (each key still has its own limiter). A call
// takes at most redisrate.MaxCharges distinct charges (more fail
// with ratesem.ErrTooManyCharges).
//
// Every rule's window must have a Redis form (every window of package
// window has one, for N up to 2^40 and a Per of a whole number of
// microseconds up to about 12.7 days); clientpool.New returns an error
// otherwise, for a nil c, for an empty prefix, one longer than 512 bytes
// or with a brace, and for a rule name or clientpool.Table.Scope longer
// than 512 bytes, and for clientpool.WithClock (Redis decides on its
// server's clock) or WithFallback and WithPrefix (a semaphore's).
func Shared(c goredis.UniversalClient, prefix string) clientpool.Option {
	sh := &engine.Shared{Prefix: prefix}
	if c != nil { // a nil c: clientpool.New fails
		sh.Opener = rstore.NewOpener(c)
	}
	return func(cfg *engine.Config) { cfg.Shared = sh }
}

// MaxCharges is the most distinct (rule, key) charges of one call of a
// clientpool.Pool in Redis mode (64): a call with more fails with
// ratesem.ErrTooManyCharges.
const MaxCharges = engine.MaxRedisCharges
