package semaphore

import (
	"fmt"
	"math"
	"time"

	"github.com/ratesem/ratesem"
)

// Option configures a RateSemaphore in New, NewWithPolicy or
// redisrate.NewSemaphore. Every package of ratesem configures with the same
// shape: a function applied in order, the last one of a kind winning.
type Option func(*config)

type config struct {
	concurrency int64 // -1: the cap is n
	clk         ratesem.Clock
	start       bool
	margin      time.Duration
	observer    func(ratesem.Event)
	maxQueue    int // WithMaxQueue; 0: no cap

	// redisrate.NewSemaphore only.
	prefix          string
	lease           time.Duration
	timeout         time.Duration
	jitter          time.Duration // 0: remote's default; < 0: none
	fallback        bool
	share           float64
	evictionAllowed bool
	deferChecks     bool
	errs            []error
	testAfterAdmit  func() // tests: after Redis admitted, before ctx is checked
}

func (c *config) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("ratesem: "+format, args...))
}

func buildConfig(opts []Option) config {
	cfg := config{concurrency: -1, prefix: DefaultRedisPrefix, timeout: DefaultRedisTimeout}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	return cfg
}

// WithMaxUnitsInFlight caps the weight units in flight at c, below the n
// given to New. It counts units, not calls: with weights 1 to 5 and a cap of
// 8, as few as two calls may be in flight (acquire with weight 1 for a cap
// on calls). A cap above n has no effect: n units in flight is always the
// most. It panics if c is negative (a bug in the caller's code). Default:
// the cap is n.
func WithMaxUnitsInFlight(c int64) Option {
	if c < 0 {
		panic(fmt.Sprintf("ratesem: WithMaxUnitsInFlight(%d): negative cap", c))
	}
	return func(cfg *config) { cfg.concurrency = c }
}

// WithClock makes the semaphore read time and set its timer through clk, for
// example a *clock.Mock (github.com/benbjohnson/clock) that a test advances
// by hand. Default: the real monotonic clock, which testing/synctest also
// fakes, so tests can use a synctest bubble instead of a mock. A nil clk
// means the default.
func WithClock(clk ratesem.Clock) Option {
	return func(cfg *config) { cfg.clk = clk }
}

// WithStartWindow replaces the completion window by the start window with a
// margin (window.NewSlidingLog): at most n units may start in any interval, each
// start recorded margin late, whatever the calls' durations. It is faster
// (n per interval rather than n per interval + latency) and safe at the
// server while the spread of one-way latency is at most margin. It panics if
// margin is negative. Default: the completion window.
func WithStartWindow(margin time.Duration) Option {
	if margin < 0 {
		panic(fmt.Sprintf("ratesem: WithStartWindow(%v): negative margin", margin))
	}
	return func(cfg *config) { cfg.start, cfg.margin = true, margin }
}

// DefaultRedisTimeout bounds each round trip to Redis of a RateSemaphore
// built with redisrate.NewSemaphore, unless WithRedisTimeout sets another.
const DefaultRedisTimeout = time.Second

// The options below configure a RateSemaphore built with
// redisrate.NewSemaphore; New and NewWithPolicy ignore them. An invalid one
// makes redisrate.NewSemaphore return an error.

// WithRedisPrefix sets the prefix of the Redis keys (default
// DefaultRedisPrefix): the limit's keys are the prefix, the name as a hash
// tag, and a suffix. Every process sharing the limit must use the same
// prefix. It must not be empty. Ignored in process.
func WithRedisPrefix(prefix string) Option {
	return Option(func(c *config) {
		if prefix == "" {
			c.fail("WithRedisPrefix: empty prefix")
			return
		}
		c.prefix = prefix
	})
}

// WithLease sets how long a call admitted by Redis counts as in flight
// without a release reaching Redis (default one minute; it must be
// positive and a whole number of microseconds). If the process dies, or
// its release is lost (Redis unreachable, Close), the call's units come
// back when the lease runs out (and, under the completion window, count an
// interval more). Pick a lease longer than the calls take: a call still
// running when its lease runs out is taken as ended then. Ignored in
// process.
func WithLease(d time.Duration) Option {
	return Option(func(c *config) {
		if d <= 0 || d%time.Microsecond != 0 {
			c.fail("WithLease(%v): want a positive whole number of microseconds", d)
			return
		}
		c.lease = d
	})
}

// WithRedisTimeout bounds each round trip to Redis (default
// DefaultRedisTimeout; it must be positive), whatever the go-redis
// client's own options: an admission, a release, a cancellation or a
// pause that gets no answer by then counts as Redis being unreachable.
// Each admission runs on a goroutine of its own, so a client built without
// ContextTimeoutEnabled cannot hold a caller longer. Ignored in process.
func WithRedisTimeout(d time.Duration) Option {
	return Option(func(c *config) {
		if d <= 0 {
			c.fail("WithRedisTimeout(%v): want a positive timeout", d)
			return
		}
		c.timeout = d
	})
}

// WithJitter sets the most random extra sleep added to each wait that Redis
// prescribes, so that processes told the same wait do not all come back in the
// same instant: a uniform draw in [0, min(max, wait/10)]. 0 turns jitter off; a
// negative max makes redisrate.NewSemaphore fail. Default: 5 ms. Ignored in
// process.
func WithJitter(max time.Duration) Option {
	return Option(func(c *config) {
		switch {
		case max < 0:
			c.fail("WithJitter(%v): negative jitter", max)
		case max == 0:
			c.jitter = -1
		default:
			c.jitter = max
		}
	})
}

// WithFallback keeps a RateSemaphore built with redisrate.NewSemaphore working
// while Redis is unreachable: the process then admits calls through a local
// RateSemaphore of floor(share·n) units per interval (at least 1), the same
// kind of window, on the assumption that it owns share of the limit (set share
// to 1/P for P processes to stay within n overall). share must be in (0, 1].
// Default: no fallback; Acquire returns an error matching
// ratesem.ErrUnavailable. Ignored in process.
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
func WithFallback(share float64) Option {
	return Option(func(c *config) {
		if !(share > 0 && share <= 1) || math.IsNaN(share) {
			c.fail("WithFallback(%v): want a share in (0, 1]", share)
			return
		}
		c.fallback, c.share = true, share
	})
}

// WithEvictionAllowed lets redisrate.NewSemaphore build a RateSemaphore on a
// server whose maxmemory-policy is not noeviction (redisrate.NewSemaphore fails
// otherwise). Under such a policy Redis may delete the limit's keys when memory
// runs short: the state then forgets the calls it counted. A loss that a
// process saw the state of is detected and the limit held full for the time the
// state mattered (Stats.StateLost), but a loss no process can see goes
// unnoticed. Ignored in process.
func WithEvictionAllowed() Option {
	return Option(func(c *config) { c.evictionAllowed = true })
}

// WithDeferredRedisChecks makes redisrate.NewSemaphore and
// NewSemaphoreWithPolicy build the RateSemaphore without asking Redis, for
// a program that starts before Redis does. Without it they make one round
// trip, bounded by WithRedisTimeout, and fail with an error that says
// which check failed: ratesem.ErrUnavailable (Redis does not answer),
// ratesem.ErrLimitMismatch (another process stored another limit under the
// name) or ratesem.ErrEviction (the server may evict keys; see
// WithEvictionAllowed). With it the first two show at the first Acquire
// (which, with WithFallback, admits calls locally while Redis does not
// answer), and the eviction check runs at the first call that finds Redis
// answering: an evicting server then fails that call and every later one
// with ratesem.ErrEviction. Ignored in process.
func WithDeferredRedisChecks() Option {
	return Option(func(c *config) { c.deferChecks = true })
}

// WithMaxQueue caps the callers waiting in Acquire at n: a call that cannot be
// admitted at once while n callers already wait fails at once, whatever its
// priority (ratesem.WithPriority), with an error matching ratesem.ErrQueueFull,
// leaving the semaphore unchanged (an observer sees it Refused). 0 (the
// default) means no cap. It panics if n is negative. Built with
// redisrate.NewSemaphore, it caps the callers of this process queued on the
// limit (those of other processes are not counted).
func WithMaxQueue(n int) Option {
	if n < 0 {
		panic(fmt.Sprintf("ratesem: WithMaxQueue(%d): negative cap", n))
	}
	return func(cfg *config) { cfg.maxQueue = n }
}
