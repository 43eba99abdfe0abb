package clientpool

import (
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/internal/engine"
	"github.com/ratesem/ratesem/internal/rstore"
)

// EvictWork returns how many idle limiters eviction has looked at so far.
func (p *Pool) EvictWork() int { return p.e.EvictWork() }

// sharedOpt is redisrate.Shared(c, prefix), which this package cannot
// import.
func sharedOpt(c goredis.UniversalClient, prefix string) Option {
	return func(cfg *engine.Config) {
		cfg.Shared = &engine.Shared{Opener: rstore.NewOpener(c), Prefix: prefix}
	}
}
