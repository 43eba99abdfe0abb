package clientpool

import (
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/engine"
)

// Option configures a Pool in New. It is the type of semaphore.Option
// too, so that the options of Redis mode, in package redisrate, apply to
// both; an option the Pool cannot honour makes New return an error (a
// semaphore.WithStartWindow, say), as does a Redis option without
// redisrate.Shared.
type Option = engine.Option

// WithClock makes the pool read time and set its timer through clk, for
// example a *clock.Mock. Default: the real monotonic clock, which
// testing/synctest also fakes. A nil clk means the default.
func WithClock(clk ratesem.Clock) Option { return func(c *engine.Config) { c.Clock = clk } }

// WithIdleTimeout sets how long a key must see no activity before its
// limiter is evicted; the eviction also waits until the key's window has
// forgotten every call (Per × (1 + ⌈capacity/N⌉)), so it never loosens a
// limit. Evictions happen during later Acquire calls, a few limiters per
// call, oldest first; 0 or less turns eviction by age off (WithMaxKeys
// still evicts forgotten keys when the pool is full). Default:
// 10 minutes.
func WithIdleTimeout(d time.Duration) Option {
	return func(c *engine.Config) { c.Idle, c.PoolOnly = d, append(c.PoolOnly, "clientpool.WithIdleTimeout") }
}

// WithMaxKeys caps the live (rule, key) limiters at n, against callers that
// choose keys (a rule keyed by a request header): when a call needs a new
// limiter and n are live, the least recently used idle limiters whose windows
// have forgotten every call are evicted first, whatever the idle time; when
// none can be, the call fails at once with an error matching
// ratesem.ErrTooManyKeys. A key whose window still counts calls is never
// dropped and keys are never merged. 0 (the default) means no cap; New returns
// an error for n < 0.
func WithMaxKeys(n int) Option {
	return func(c *engine.Config) { c.MaxKeys, c.PoolOnly = n, append(c.PoolOnly, "clientpool.WithMaxKeys") }
}

// WithMaxPause caps the pause one throttle causes on a key (Throttled):
// the server's Retry-After beyond it and the
// exponential backoff without one stop there. d ≤ 0 means
// 5 minutes. Pause itself is not capped.
func WithMaxPause(d time.Duration) Option {
	return func(c *engine.Config) { c.MaxPause, c.PoolOnly = d, append(c.PoolOnly, "clientpool.WithMaxPause") }
}

// WithObserver calls fn for every ratesem.Event of the pool (see
// ratesem.Event for the kinds; the Pool reports one event per charge),
// synchronously, on the goroutine that caused it (the caller of Acquire,
// Release, Pause, Throttled …) and never with the pool's lock held, so fn
// may call the pool. fn must be safe for concurrent use. A nil fn means no
// observer (the default). ratesem.Metrics.Observe keeps
// Prometheus/OpenTelemetry-style counters.
//
// A fn that panics (or calls runtime.Goexit) cannot corrupt the accounting:
// the call it reports on is put right first, then the panic goes on to the
// caller, unrecovered. A panic on Queued takes the waiter out of every
// queue (or undoes its admission, if it came meanwhile), so no admission is
// granted to a caller that is gone; a panic on any Admitted event of a call
// takes its admission back, so the caller, who gets the panic instead of
// the Ticket, holds nothing: in process the windows keep no trace of it (as
// when a context ends as the call is granted), in Redis mode the call is
// released in Redis. Other events hold nothing or come after the change
// they report (a pause stays set).
//
// In process a fn that blocks stalls its own caller only: other goroutines' Acquire
// and Release go on meanwhile.
// Over Redis (package redisrate) a waiter asks Redis on its own goroutine,
// so a fn that blocks on the Queued event of a call at the head of a
// queue also holds up the calls queued behind it on the same keys until
// fn returns. The call it reports on keeps its place while
// fn blocks, though: after Admitted it holds its charges (as a slow call
// would), and after Queued it stays queued, may be granted and then holds
// them until fn returns and Acquire sees its context done (the admission
// is undone) or returns. So fn should not block.
func WithObserver(fn func(ratesem.Event)) Option { return func(c *engine.Config) { c.Observer = fn } }

// WithMaxQueue caps the calls waiting on each (rule, key) limiter at n: a call
// that must wait (it is not admitted at once) while one of its limiters already
// has n waiting calls fails at once, whatever its priority, with an error
// matching ratesem.ErrQueueFull, holding nothing (an observer sees it Refused).
// The cap is per limiter, not per pool: on a rule keyed by account each account
// has its own n. 0 (the default) means no cap; New returns an error for n < 0
// or n > math.MaxInt32. In Redis mode (redisrate.Shared) it caps the calls of
// this process queued on each limiter (those of other processes are not
// counted).
func WithMaxQueue(n int) Option { return func(c *engine.Config) { c.MaxQueue = n } }
