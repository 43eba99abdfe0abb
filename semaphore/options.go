package semaphore

import (
	"fmt"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/engine"
)

// Option configures a RateSemaphore in New, NewWithPolicy or
// redisrate.NewSemaphore. Every package of ratesem configures with the same
// shape: a function applied in order, the last one of a kind winning. It is
// the type of clientpool.Option too, so that the options of Redis mode
// (package redisrate) apply to both. New and NewWithPolicy panic on an
// option they cannot honour: one of Redis mode (redisrate.WithLease …), or
// one of clientpool's (clientpool.WithMaxKeys …).
type Option = engine.Option

type config = engine.Config

func buildConfig(opts []Option) config {
	cfg := config{Concurrency: -1}
	cfg.Build(opts)
	return cfg
}

// inProcess panics, for New and NewWithPolicy, on an option the in-process
// semaphore cannot honour (see Option).
func inProcess(cfg *config) {
	for _, err := range []error{cfg.Err(), cfg.CheckMode(), cfg.CheckFront(true)} {
		if err != nil {
			panic(err.Error())
		}
	}
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
	return func(cfg *config) {
		cfg.Concurrency, cfg.SemOnly = c, append(cfg.SemOnly, "semaphore.WithMaxUnitsInFlight")
	}
}

// WithClock makes the semaphore read time and set its timer through clk, for
// example a *clock.Mock (github.com/benbjohnson/clock) that a test advances
// by hand. Default: the real monotonic clock, which testing/synctest also
// fakes, so tests can use a synctest bubble instead of a mock. A nil clk
// means the default.
func WithClock(clk ratesem.Clock) Option {
	return func(cfg *config) { cfg.Clock = clk }
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
	return func(cfg *config) {
		cfg.Start, cfg.Margin, cfg.SemOnly = true, margin, append(cfg.SemOnly, "semaphore.WithStartWindow")
	}
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
	return func(cfg *config) { cfg.MaxQueue = n }
}
