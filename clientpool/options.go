package clientpool

import (
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/backend"

	"github.com/ratesem/ratesem/internal/backoff"
)

// DefaultIdleTimeout is how long a key must see no call, by default, before
// its limiter is evicted (and never before its window has forgotten every
// call).
const DefaultIdleTimeout = 10 * time.Minute

// DefaultMaxPause is the longest pause a throttle causes on a key when
// WithMaxPause is not given: 5 minutes.
const DefaultMaxPause = backoff.DefaultMaxPause

// Option configures a Pool in New.
type Option func(*config)

type config struct {
	clk      ratesem.Clock
	idle     time.Duration
	maxKeys  int
	maxQueue int
	maxPause time.Duration
	observer func(ratesem.Event)
	opener   backend.Opener
	prefix   string
	redisSet bool // redisrate.Shared was given
	lease    time.Duration

	evictionAllowed bool // WithEvictionAllowed
	deferChecks     bool // WithDeferredRedisChecks
}

// WithEvictionAllowed lets New build a Pool in Redis mode (redisrate.Shared)
// over a server whose maxmemory-policy is not noeviction (New fails with
// ratesem.ErrEviction otherwise). Under such a policy Redis may delete the
// rules' keys when memory runs short: their state then forgets the calls it
// counted, and the fleet may exceed a limit. It does nothing in process.
func WithEvictionAllowed() Option { return func(c *config) { c.evictionAllowed = true } }

// WithDeferredRedisChecks makes New build a Pool in Redis mode
// (redisrate.Shared) without asking Redis, for a program that starts before
// Redis does. Without it New makes one round trip, bounded by a second, and
// fails with an error that says which check failed: ratesem.ErrUnavailable
// (Redis does not answer), ratesem.ErrLimitMismatch (another process stored
// another limit for a rule's key "") or ratesem.ErrEviction (see
// WithEvictionAllowed). With it the first two show at the first Acquire,
// and the eviction check runs at the first Acquire that finds Redis
// answering: an evicting server then fails that call and every later one
// with ratesem.ErrEviction. It does nothing in process.
func WithDeferredRedisChecks() Option { return func(c *config) { c.deferChecks = true } }

// WithLease sets how long, in Redis mode (redisrate.Shared), a call admitted
// counts as in flight without a release: a process that dies mid-call
// frees its units when the lease runs out (and, for the completion window,
// a Per later). It must be a whole number of microseconds, at most 2^40 µs
// (about 12.7 days), and cover the longest call; New returns an error
// otherwise. 0 means the default: one minute. It does nothing in process.
func WithLease(d time.Duration) Option { return func(c *config) { c.lease = d } }

// WithClock makes the pool read time and set its timer through clk, for
// example a *clock.Mock. Default: the real monotonic clock, which
// testing/synctest also fakes. A nil clk means the default.
func WithClock(clk ratesem.Clock) Option { return func(c *config) { c.clk = clk } }

// WithIdleTimeout sets how long a key must see no activity before its
// limiter is evicted; the eviction also waits until the key's window has
// forgotten every call (Per × (1 + ⌈capacity/N⌉)), so it never loosens a
// limit. Evictions happen during later Acquire calls, a few limiters per
// call, oldest first; 0 or less turns eviction by age off (WithMaxKeys
// still evicts forgotten keys when the pool is full). Default:
// DefaultIdleTimeout.
func WithIdleTimeout(d time.Duration) Option { return func(c *config) { c.idle = d } }

// WithMaxKeys caps the live (rule, key) limiters at n, against callers that
// choose keys (a rule keyed by a request header): when a call needs a new
// limiter and n are live, the least recently used idle limiters whose windows
// have forgotten every call are evicted first, whatever the idle time; when
// none can be, the call fails at once with an error matching
// ratesem.ErrTooManyKeys. A key whose window still counts calls is never
// dropped and keys are never merged. 0 (the default) means no cap; New returns
// an error for n < 0.
func WithMaxKeys(n int) Option { return func(c *config) { c.maxKeys = n } }

// WithMaxPause caps the pause one throttle causes on a key (Throttled,
// ThrottledResponse): the server's Retry-After beyond it and the
// exponential backoff without one stop there. d ≤ 0 means
// DefaultMaxPause. Pause itself is not capped.
func WithMaxPause(d time.Duration) Option { return func(c *config) { c.maxPause = d } }

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
// A fn that blocks stalls its own caller only: other goroutines' Acquire
// and Release go on meanwhile. The call it reports on keeps its place while
// fn blocks, though: after Admitted it holds its charges (as a slow call
// would), and after Queued it stays queued, may be granted and then holds
// them until fn returns and Acquire sees its context done (the admission
// is undone) or returns. So fn should not block.
func WithObserver(fn func(ratesem.Event)) Option { return func(c *config) { c.observer = fn } }

// WithMaxQueue caps the calls waiting on each (rule, key) limiter at n: a call
// that must wait (it is not admitted at once) while one of its limiters already
// has n waiting calls fails at once, whatever its priority, with an error
// matching ratesem.ErrQueueFull, holding nothing (an observer sees it Refused).
// The cap is per limiter, not per pool: on a rule keyed by account each account
// has its own n. 0 (the default) means no cap; New returns an error for n < 0
// or n > math.MaxInt32. In Redis mode (redisrate.Shared) it caps the calls of
// this process queued on each limiter (those of other processes are not
// counted).
func WithMaxQueue(n int) Option { return func(c *config) { c.maxQueue = n } }
