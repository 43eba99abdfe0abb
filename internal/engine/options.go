package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/rspec"
)

// DefaultIdleTimeout is how long a key must see no call, by default, before
// its limiter is evicted (clientpool.WithIdleTimeout).
const DefaultIdleTimeout = 10 * time.Minute

// DefaultRedisTimeout bounds each round trip to Redis unless
// redisrate.WithTimeout sets another.
const DefaultRedisTimeout = time.Second

// Option configures an engine and the front over it: clientpool.Option and
// semaphore.Option are this type, so that one option (redisrate's) applies
// to both fronts. Options apply in order, the last one of a kind winning.
type Option func(*Config)

// Config is what the options set. Fields a front does not read are
// refused by it (Config.CheckFront), never ignored.
type Config struct {
	Clock    ratesem.Clock
	Idle     time.Duration
	MaxKeys  int
	MaxQueue int
	MaxPause time.Duration
	Observer func(ratesem.Event)

	// The semaphore's own.
	Concurrency int64 // WithMaxUnitsInFlight; -1: none (set by the semaphore front)
	Start       bool  // WithStartWindow
	Margin      time.Duration

	// Shared is set by redisrate.Shared (or redisrate.NewSemaphore): the
	// state is in Redis.
	Shared *Shared
	// Redis holds the Redis-only options (package redisrate), given or
	// not; a front in process refuses them.
	Redis Redis

	// One is the engine redisrate.NewSemaphore built: semaphore.New then
	// returns the front over it (Built).
	One *One

	// SemOnly and PoolOnly name the options given that only the
	// semaphore, or only the Pool, honours: the other front refuses them.
	SemOnly, PoolOnly []string

	errs []error
}

// Shared says where a front's state is kept in Redis.
type Shared struct {
	Opener rspec.Opener // Open nil: a nil client
	Prefix string
}

// Redis is the options of Redis mode (package redisrate).
type Redis struct {
	Set             []string // the names of the Redis options given, for the refusal in process
	Prefix          string   // "": the front's default
	Lease           time.Duration
	Timeout         time.Duration // 0: DefaultRedisTimeout
	Jitter          time.Duration // 0: internal/remote's default; < 0: none
	Fallback        bool
	Share           float64
	EvictionAllowed bool
	DeferChecks     bool
	Blocks          int64         // calls per block (redisrate.WithBlocks); 0: off
	BlockHold       time.Duration // how long a block hands out calls
	TestAfterAdmit  func()        // tests: after Redis admitted, before ctx is checked
}

// Built returns the option that makes semaphore.New return the front over
// o, built by redisrate.NewSemaphore.
func Built(o *One) Option { return func(c *Config) { c.One = o } }

// Fail records the error of an invalid option: New returns it.
func (c *Config) Fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("ratesem: "+format, args...))
}

// RedisOption returns an option of Redis mode named name that applies set
// to the Redis options.
func RedisOption(name string, set func(*Config)) Option {
	return func(c *Config) {
		c.Redis.Set = append(c.Redis.Set, name)
		set(c)
	}
}

// Build applies opts in order to c.
func (c *Config) Build(opts []Option) {
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
}

// Err returns the errors of invalid options, joined; nil when none.
func (c *Config) Err() error { return errors.Join(c.errs...) }

// CheckMode refuses an option the mode cannot honour: a Redis option in
// process, a virtual clock over Redis.
func (c *Config) CheckMode() error {
	if c.Shared == nil && len(c.Redis.Set) > 0 {
		return fmt.Errorf("ratesem: %s applies to Redis mode only (redisrate): the state is in process", c.Redis.Set[0])
	}
	if c.Shared != nil && c.Clock != nil {
		return errors.New("ratesem: WithClock cannot apply in Redis mode: Redis decides on the server's clock")
	}
	return nil
}

// CheckFront refuses an option of the other front: sem reports that the
// front is the semaphore.
func (c *Config) CheckFront(sem bool) error {
	if sem && len(c.PoolOnly) > 0 {
		return fmt.Errorf("ratesem: %s applies to a clientpool.Pool only", c.PoolOnly[0])
	}
	if !sem && len(c.SemOnly) > 0 {
		return fmt.Errorf("ratesem: %s applies to a semaphore.RateSemaphore only", c.SemOnly[0])
	}
	return nil
}

// Timeout returns the Redis round-trip bound in force.
func (r *Redis) timeout() time.Duration {
	if r.Timeout > 0 {
		return r.Timeout
	}
	return DefaultRedisTimeout
}
