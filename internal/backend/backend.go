// Package backend holds the one type internal/rstore and internal/engine
// share to open Redis stores without importing each other's internals.
// Nothing outside this module can reach it.
package backend

import (
	"time"

	"github.com/ratesem/ratesem/internal/rspec"
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
