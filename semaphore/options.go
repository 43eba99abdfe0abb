package semaphore

import (
	"fmt"
	"time"

	"github.com/benbjohnson/clock"
)

// Option configures a RateSemaphore in New.
type Option interface {
	apply(*config)
}

type config struct {
	concurrency int64 // -1: the cap is n
	clk         clock.Clock
	start       bool
	margin      time.Duration
}

func buildConfig(opts []Option) config {
	cfg := config{concurrency: -1}
	for _, o := range opts {
		o.apply(&cfg)
	}
	return cfg
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithConcurrency caps the units in flight at c, below the n given to New.
// A cap above n has no effect: n units in flight is always the most. It
// panics if c is negative. Default: the cap is n.
func WithConcurrency(c int64) Option {
	if c < 0 {
		panic(fmt.Sprintf("semaphore: WithConcurrency(%d): negative cap", c))
	}
	return optionFunc(func(cfg *config) { cfg.concurrency = c })
}

// WithClock makes the semaphore read time and set its timer through clk, for
// example a *clock.Mock (github.com/benbjohnson/clock) that a test advances
// by hand. Default: the real monotonic clock, which testing/synctest also
// fakes, so tests can use a synctest bubble instead of a mock. A nil clk
// means the default.
func WithClock(clk clock.Clock) Option {
	return optionFunc(func(cfg *config) { cfg.clk = clk })
}

// WithStartWindow replaces the completion window by the start window with a
// margin (window.SlidingLog): at most n units may start in any interval, each
// start recorded margin late, whatever the calls' durations. It is faster
// (n per interval rather than n per interval + latency) and safe at the
// server while the spread of one-way latency is at most margin. It panics if
// margin is negative. Default: the completion window.
func WithStartWindow(margin time.Duration) Option {
	if margin < 0 {
		panic(fmt.Sprintf("semaphore: WithStartWindow(%v): negative margin", margin))
	}
	return optionFunc(func(cfg *config) { cfg.start, cfg.margin = true, margin })
}
