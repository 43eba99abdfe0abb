package clientpool

import (
	"time"

	"github.com/benbjohnson/clock"
)

// DefaultIdleTimeout is how long a key must see no call, by default, before
// its limiter is evicted (and never before its window has forgotten every
// call).
const DefaultIdleTimeout = 10 * time.Minute

// Option configures a Pool in New.
type Option func(*config)

type config struct {
	clk      clock.Clock
	idle     time.Duration
	observer func(Event)
}

// WithClock makes the pool read time and set its timer through clk, for
// example a *clock.Mock. Default: the real monotonic clock, which
// testing/synctest also fakes. A nil clk means the default.
func WithClock(clk clock.Clock) Option { return func(c *config) { c.clk = clk } }

// WithIdleTimeout sets how long a key must see no activity before its
// limiter is evicted; the eviction also waits until the key's window has
// forgotten every call (Per × (1 + ⌈capacity/N⌉)), so it never loosens a
// limit. Evictions happen during later Acquire calls, at most once every
// d/2; 0 or less turns eviction off. Default: DefaultIdleTimeout.
func WithIdleTimeout(d time.Duration) Option { return func(c *config) { c.idle = d } }

// WithObserver calls fn for every Event, from the goroutine that caused it
// and never with the pool's lock held, so fn may call the pool. fn must be
// safe for concurrent use and should be quick.
func WithObserver(fn func(Event)) Option { return func(c *config) { c.observer = fn } }
