package engine

import (
	"math"
	"time"
)

// The options of Redis mode, as package redisrate exports them (each of
// its With functions returns the one here of the same name).

// WithPrefix is redisrate.WithPrefix.
func WithPrefix(prefix string) Option {
	return RedisOption("redisrate.WithPrefix", func(c *Config) {
		if prefix == "" {
			c.Fail("redisrate.WithPrefix: empty prefix")
			return
		}
		c.Redis.Prefix = prefix
	})
}

// WithLease is redisrate.WithLease.
func WithLease(d time.Duration) Option {
	return RedisOption("redisrate.WithLease", func(c *Config) {
		if d <= 0 || d%time.Microsecond != 0 {
			c.Fail("redisrate.WithLease(%v): want a positive whole number of microseconds", d)
			return
		}
		c.Redis.Lease = d
	})
}

// maxRedisTimeout bounds a Redis timeout (about 73 years): the round trips
// add a grace to it and double it, which must not overflow time.Duration
// (a timeout of math.MaxInt64 made every deadline lie in the past, so
// every call failed with ratesem.ErrUnavailable at once).
const maxRedisTimeout = math.MaxInt64 / 4

// WithTimeout is redisrate.WithTimeout.
func WithTimeout(d time.Duration) Option {
	return RedisOption("redisrate.WithTimeout", func(c *Config) {
		if d <= 0 {
			c.Fail("redisrate.WithTimeout(%v): want a positive timeout", d)
			return
		}
		c.Redis.Timeout = min(d, maxRedisTimeout)
	})
}

// WithJitter is redisrate.WithJitter.
func WithJitter(max time.Duration) Option {
	return RedisOption("redisrate.WithJitter", func(c *Config) {
		switch {
		case max < 0:
			c.Fail("redisrate.WithJitter(%v): negative jitter", max)
		case max == 0:
			c.Redis.Jitter = -1
		default:
			c.Redis.Jitter = max
		}
	})
}

// WithFallback is redisrate.WithFallback.
func WithFallback(share float64) Option {
	return RedisOption("redisrate.WithFallback", func(c *Config) {
		if !(share > 0 && share <= 1) || math.IsNaN(share) {
			c.Fail("redisrate.WithFallback(%v): want a share in (0, 1]", share)
			return
		}
		c.Redis.Fallback, c.Redis.Share = true, share
	})
}

// WithBlocks is redisrate.WithBlocks.
func WithBlocks(k int64, hold time.Duration) Option {
	return RedisOption("redisrate.WithBlocks", func(c *Config) {
		switch {
		case k < 2:
			c.Fail("redisrate.WithBlocks(%d, %v): want at least 2 calls per block", k, hold)
		case hold <= 0:
			c.Fail("redisrate.WithBlocks(%d, %v): want a positive hold", k, hold)
		default:
			c.Redis.Blocks, c.Redis.BlockHold = k, hold
		}
	})
}

// WithEvictionAllowed is redisrate.WithEvictionAllowed.
func WithEvictionAllowed() Option {
	return RedisOption("redisrate.WithEvictionAllowed", func(c *Config) { c.Redis.EvictionAllowed = true })
}

// WithDeferredChecks is redisrate.WithDeferredChecks.
func WithDeferredChecks() Option {
	return RedisOption("redisrate.WithDeferredChecks", func(c *Config) { c.Redis.DeferChecks = true })
}
