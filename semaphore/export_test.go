package semaphore

import (
	"context"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/internal/engine"
	"github.com/ratesem/ratesem/internal/rstore"
	"github.com/ratesem/ratesem/window"
)

// The options of Redis mode, which this package's own tests cannot import
// from package redisrate (it imports this package).
var (
	WithLease               = engine.WithLease
	WithRedisTimeout        = engine.WithTimeout
	WithRedisPrefix         = engine.WithPrefix
	WithJitter              = engine.WithJitter
	WithFallback            = engine.WithFallback
	WithEvictionAllowed     = engine.WithEvictionAllowed
	WithDeferredRedisChecks = engine.WithDeferredChecks
)

const (
	DefaultRedisPrefix  = engine.DefaultPrefix
	DefaultRedisTimeout = engine.DefaultRedisTimeout
	redisRule           = "n"
)

// redisNew is redisrate.NewSemaphore, which this package's own tests
// cannot import (it imports this package): the same path, over rstore's
// opener of c. redisrate's tests cover its nil checks.
func redisNew(c goredis.UniversalClient, name string, n int64, per time.Duration, opts ...Option) (*RateSemaphore, error) {
	return redisBuild(c, name, n, per, nil, opts)
}

// redisNewPolicy is redisrate.NewSemaphoreWithPolicy (see redisNew).
func redisNewPolicy(c goredis.UniversalClient, name string, p window.Policy, opts ...Option) (*RateSemaphore, error) {
	return redisBuild(c, name, 0, 0, p, opts)
}

func redisBuild(c goredis.UniversalClient, name string, n int64, per time.Duration, p window.Policy, opts []Option) (*RateSemaphore, error) {
	cfg := engine.Config{Concurrency: -1}
	cfg.Build(opts)
	one, err := engine.NewShared(rstore.NewOpener(c), name, n, per, p, cfg)
	if err != nil {
		return nil, err
	}
	return New(0, 0, engine.Built(one)), nil
}

// withAfterAdmit runs f after Redis admitted a call, before the caller's
// context is checked.
func withAfterAdmit(f func()) Option {
	return func(c *engine.Config) { c.Redis.TestAfterAdmit = f }
}

// acquireLocal is Acquire over Redis reporting whether the fallback
// admitted the call.
func (s *RateSemaphore) acquireLocal(ctx context.Context, n int64) (bool, error) {
	return s.o.AcquireLocal(ctx, n)
}

// Weight returns the units the call holds: the estimate it was admitted for.
func (c Call) Weight() int64 { return c.c.Weight() }
