package redissem

import (
	"fmt"
	"math"
	"time"

	wredis "github.com/ratesem/ratesem/window/redis"
)

// Option configures a Semaphore in New. An invalid option makes New return
// an error; none panics.
type Option func(*config)

type config struct {
	start           bool
	margin          time.Duration
	lease           time.Duration
	fallback        bool
	share           float64
	jitter          time.Duration
	jitterSet       bool
	timeout         time.Duration
	evictionAllowed bool
	errs            []error
}

func (c *config) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("redissem: "+format, args...))
}

// DefaultTimeout bounds each round trip to Redis (an admission, a release,
// a cancellation, a pause) unless WithTimeout sets another.
const DefaultTimeout = time.Second

// DefaultLease is the lease of a call in flight unless WithLease sets
// another: window/redis's DefaultLease, one minute.
const DefaultLease = wredis.DefaultLease

// MaxDefaultJitter caps the default jitter: a wait gets a random extra
// sleep of up to a tenth of it, and at most MaxDefaultJitter.
const MaxDefaultJitter = 2 * time.Millisecond

// WithStartWindow replaces the completion window by the start window with a
// margin (window/redis NewSlidingLog, the twin of window.SlidingLog): at most
// n units may start in any interval across all processes, each start
// recorded margin late, whatever the calls' durations. Faster than the
// completion window (n per interval rather than n per interval + latency),
// and safe at the server while the spread of one-way latency is at most
// margin. margin must be a whole number of microseconds, 0 or more, and the
// interval positive, or New fails. Default: the completion window.
func WithStartWindow(margin time.Duration) Option {
	return func(c *config) { c.start, c.margin = true, margin }
}

// WithLease sets how long a call admitted by Redis counts as in flight
// without a Release (default DefaultLease; it must be positive). If the
// process dies, or its Release cannot reach Redis, the call's units come
// back lease + interval after its admission. Pick a lease longer than the
// calls take: a call still running when its lease runs out is taken as
// ended then. The start window ignores it.
func WithLease(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.fail("WithLease(%v): want a positive lease", d)
			return
		}
		c.lease = d
	}
}

// WithFallback keeps the semaphore working while Redis is unreachable: the
// process then admits calls through a local semaphore.RateSemaphore of
// floor(share·n) units per interval (at least 1), the same kind of window,
// on the assumption that it owns share of the limit (set share to 1/P for P
// processes to stay within n overall). share must be in (0, 1], or New
// fails. Default: no fallback; Acquire returns an error matching
// ErrUnavailable.
func WithFallback(share float64) Option {
	return func(c *config) {
		if !(share > 0 && share <= 1) || math.IsNaN(share) {
			c.fail("WithFallback(%v): want a share in (0, 1]", share)
			return
		}
		c.fallback, c.share = true, share
	}
}

// WithJitter sets the most random extra sleep added to each wait that Redis
// prescribes, so that processes told the same wait do not all come back in
// the same instant: a uniform draw in [0, max]. 0 turns jitter off; a
// negative max makes New fail. Default: up to a tenth of the wait, at most
// MaxDefaultJitter.
func WithJitter(max time.Duration) Option {
	return func(c *config) {
		if max < 0 {
			c.fail("WithJitter(%v): negative jitter", max)
			return
		}
		c.jitter, c.jitterSet = max, true
	}
}

// WithTimeout bounds each round trip to Redis (default DefaultTimeout; it
// must be positive), whatever the client's own options: an admission, a
// release, a cancellation or a pause that gets no answer by then counts as
// Redis being unreachable, and its caller goes on. Each round trip runs on
// a goroutine of its own, so a client built without ContextTimeoutEnabled
// (which ignores contexts' deadlines while it waits for a reply) cannot hold
// a caller longer; the round trip left behind ends with the client's read
// timeout, and what it admitted then is cancelled. Acquire's context ends
// its wait at once too.
func WithTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.fail("WithTimeout(%v): want a positive timeout", d)
			return
		}
		c.timeout = d
	}
}

// WithEvictionAllowed lets New build a Semaphore on a server whose
// maxmemory-policy is not noeviction (New fails otherwise; see New). Under
// such a policy Redis may delete the limit's keys when memory runs short
// (the volatile-* policies pick keys with a TTL, which all of the limit's
// keys have, so they go first): the window then forgets the calls it
// counted. The completion window and the start window detect a loss that
// a process saw the state of, and hold the limit full for an interval
// (Stats.StateLost counts it), but a loss no process can see (every
// process new, or idle for longer than the interval) goes unnoticed, and
// the limit may then admit up to n again within one interval.
func WithEvictionAllowed() Option {
	return func(c *config) { c.evictionAllowed = true }
}
