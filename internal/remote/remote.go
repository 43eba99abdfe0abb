// Package remote is the waiting engine over Redis bookkeeping
// (internal/rstore): callers of a semaphore.RateSemaphore built with
// semaphore.NewRedis and of a clientpool.Pool built with
// clientpool.WithRedis wait, queue, pause and count here, while the counts
// live in Redis and are shared by every process.
//
// Within one process waiters queue FIFO per limiter (rule, key, scope):
// once a limiter has refused a waiter, later calls on it queue behind it,
// and only the head of a limiter's queue talks to Redis, so 2000 blocked
// goroutines cost one round trip at a time. A waiter joins the queues of
// all its limiters at once at arrival, so the oldest waiter is ahead in
// every queue it shares: no deadlock. A refused head sleeps until the
// instant the script returned plus jitter, never polls; when only a release
// elsewhere can make room it sleeps a bounded time (or is woken by a local
// release). Every round trip is bounded (Config.Timeout and ctx) and runs
// on its own goroutine. A Release never makes its caller wait on Redis: it
// goes to a bounded background queue; one lost (Close, a Redis error, a
// full queue) is covered by the lease.
package remote

import (
	"context"
	"errors"
	"time"

	"github.com/ratesem/ratesem/internal/rstore"
)

// ErrUnavailable is matched by the error Acquire returns when Redis cannot
// be reached (no answer within Config.Timeout, or a Redis error) and there is
// no fallback; it wraps the Redis error.
var ErrUnavailable = errors.New("ratesem: redis unavailable")

// ErrClosed is returned by Acquire after Close.
var ErrClosed = errors.New("ratesem: closed")

// Config configures an Engine.
type Config struct {
	Store *rstore.Store
	// Timeout bounds every round trip; default 1 s.
	Timeout time.Duration
	// Jitter is the most random time added to a sleep the script asked
	// for; default 5 ms.
	Jitter time.Duration
	// MaxPause caps any pause; default backoff.DefaultMaxPause.
	MaxPause time.Duration
	// Observer, when set, is called with every event, outside any lock.
	Observer func(Event)
}

// EventKind says what happened.
type EventKind int

// Events.
const (
	Admitted EventKind = iota + 1
	Refused
	Cancelled
	Paused
	Released
	RoundTripFailed
)

// Event is one thing that happened to a call.
type Event struct {
	Kind    EventKind
	Scope   string
	Charges []rstore.Charge
	Wait    time.Duration // Admitted: time spent in Acquire; Paused: the pause
	Err     error
}

// Stats are the engine's counters for this process.
type Stats struct {
	InFlight        int64  // calls admitted, not yet released
	Waiting         int    // callers blocked in Acquire
	Admitted        uint64 // calls admitted
	TotalWait       time.Duration
	MaxWait         time.Duration
	PausedUntil     time.Time
	RedisAdmits     uint64 // admission round trips
	RedisErrors     uint64 // failed round trips of any kind
	Cancelled       uint64 // admissions taken back because the caller left
	ReleasesFailed  uint64 // releases that could not reach Redis (the lease covers them)
	ReleasesLost    uint64 // releases of calls Redis no longer knew
	StateLost       uint64 // admissions that found state lost
	LimitMismatches uint64
	Unavailable     bool
}

// Engine waits for admissions decided in Redis. It is safe for concurrent
// use.
type Engine struct{}

// New returns an Engine over cfg.Store.
func New(cfg Config) (*Engine, error) { panic("remote: todo") }

// Call is an admitted call: Release it exactly once.
type Call struct{}

// Acquire blocks until every charge is admitted at once in Redis (in FIFO
// order per limiter within this process), ctx is done, or the admission
// would come after ctx's deadline (an error matching ErrDeadline and
// context.DeadlineExceeded). A cancelled wait leaves no trace in Redis.
func (e *Engine) Acquire(ctx context.Context, scope string, cs []rstore.Charge) (*Call, error) {
	panic("remote: todo")
}

// TryAcquire admits the charges if Redis admits them at once (one round
// trip, bounded by Config.Timeout) and no older waiter of this process
// queues on one of their limiters.
func (e *Engine) TryAcquire(scope string, cs []rstore.Charge) (*Call, bool, error) {
	panic("remote: todo")
}

// Release ends the call: its units leave flight in Redis at the release
// (asynchronously; the caller never waits on Redis). It panics on a second
// Release.
func (c *Call) Release() { panic("remote: todo") }

// Pause holds c's limiter in every process until d from now (capped by
// MaxPause): locally at once, and in Redis by one bounded round trip.
func (e *Engine) Pause(scope string, c rstore.Charge, d time.Duration) { panic("remote: todo") }

// Reconcile passes a server's usage report to Redis, asynchronously.
func (e *Engine) Reconcile(scope string, c rstore.Charge, used int64) { panic("remote: todo") }

// SetLimit changes a limiter's limit for every process.
func (e *Engine) SetLimit(ctx context.Context, scope string, c rstore.Charge) error {
	panic("remote: todo")
}

// Stats returns a snapshot of the counters.
func (e *Engine) Stats() Stats { panic("remote: todo") }

// Close fails waiters with ErrClosed, flushes queued releases (bounded by
// Timeout), and waits for the round trips still running.
func (e *Engine) Close() error { panic("remote: todo") }
