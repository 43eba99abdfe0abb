package clientpool

import (
	"net/http"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/internal/backoff"
	"github.com/ratesem/ratesem/internal/engine"
	"github.com/ratesem/ratesem/internal/rstore"
)

// ErrMalformed is what every error of ParseRateLimitAt wraps.
var ErrMalformed = errMalformed

// EvictWork returns how many idle limiters eviction has looked at so far.
func (p *Pool) EvictWork() int { return p.e.EvictWork() }

// sharedOpt is redisrate.Shared(c, prefix), which this package cannot
// import.
func sharedOpt(c goredis.UniversalClient, prefix string) Option {
	return func(cfg *engine.Config) {
		cfg.Shared = &engine.Shared{Opener: rstore.NewOpener(c), Prefix: prefix}
	}
}

// Names the tests use that the package does not export.
const (
	DefaultMaxPause    = backoff.DefaultMaxPause
	DefaultIdleTimeout = engine.DefaultIdleTimeout
	MaxFieldBytes      = maxFieldBytes
	MaxLearnedN        = engine.MaxLearnedN
)

// UsageFunc is the type of Rule.Usage.
type UsageFunc = func(h http.Header) (used int64, ok bool)

// ParseRateLimit is ParseRateLimitAt(h, prefix, policy, time.Now()).
func ParseRateLimit(h http.Header, prefix, policy string) (RateLimitInfo, error) {
	return ParseRateLimitAt(h, prefix, policy, time.Now())
}

// Used returns Limit − Remaining in [0, Limit].
func (i RateLimitInfo) Used() int64 { return i.used() }
