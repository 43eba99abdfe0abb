// Package backend joins the shared mode of packages semaphore and
// clientpool, which import no Redis client, to package redisrate, which
// builds it over go-redis. semaphore and clientpool set the hooks below in
// their init functions; redisrate imports both, so the hooks are set before
// it calls them. Nothing outside this module can reach it.
package backend

import (
	"time"

	"github.com/ratesem/ratesem/internal/rspec"
	"github.com/ratesem/ratesem/window"
)

// Opener opens the stores of one Redis (internal/rstore.NewOpener).
type Opener struct {
	// Open returns the store of the keys under prefix, whose calls in
	// flight hold leases of lease (0: rspec.DefaultLease). It does not
	// talk to Redis.
	Open func(prefix string, lease time.Duration) (rspec.Store, error)
	// Check makes one round trip, waiting at most timeout: it returns an
	// error matching ratesem.ErrUnavailable when Redis does not answer,
	// ratesem.ErrLimitMismatch when a limiter of cs (in scope, under
	// prefix) stores a limit other than its charge's Spec (one SetLimit
	// wrote is adopted: no error), and, when eviction is set,
	// ratesem.ErrEviction when the server's maxmemory-policy lets it evict
	// keys (not checked when the server forbids CONFIG); nil otherwise. The
	// caller adds what to do to the message.
	Check func(timeout time.Duration, prefix, scope string, cs []rspec.Charge, eviction bool) error
}

// NewSemaphore builds a *semaphore.RateSemaphore over o named name: of n
// units per per under the options' window when p is nil, else of the
// window p. opts is a []semaphore.Option. Set by package semaphore.
var NewSemaphore func(o Opener, name string, n int64, per time.Duration, p window.Policy, opts any) (any, error)

// PoolOption returns the clientpool.Option that keeps a Pool's rules in
// the stores o opens under prefix. Set by package clientpool.
var PoolOption func(o Opener, prefix string) any
