// Package rstore is the Redis bookkeeping of ratesem: the state of every
// window of package window kept in Redis, and one Lua script per decision
// that admits a call under every rule it falls under, atomically, in one
// EVALSHA.
//
// It is the Redis implementation of the bookkeeping under the waiting
// engine (package internal/remote); it never waits, queues or sleeps:
// every method is one round trip (two when the server lost its script
// cache: go-redis's Script.Run falls back to EVAL on NOSCRIPT).
//
// # Keys
//
// A (rule, key) limiter of scope S under prefix P keeps its state under
// keys that begin with P + ":{" + tag(S) + "}:" followed by the encoded
// rule name and key. tag percent-encodes '%', '{', '}' so every scope is a
// well-formed, non-empty hash tag: all the keys one call touches (one
// scope) hash to one slot of a Redis Cluster, and every key is passed to
// the script in KEYS (none is built inside Lua). The consequence, which
// callers document: one scope lives on one cluster node.
//
// Every key has a TTL just over the time its state matters, refreshed by
// the scripts that write it: an idle limiter leaves nothing behind.
//
// # Clock
//
// The server's TIME, read inside the script, in whole microseconds since the
// Unix epoch, is the only clock (Options.Now overrides it, for tests only).
// A limit's Per, a margin and a lease must be whole microseconds. Time never
// goes back for one limiter: an earlier instant is taken as the latest seen.
//
// # Limits
//
// The limit (kind, N, Per, burst, margin, blocks) is stored with the state.
// An Admit whose Spec differs from the stored one fails with an error
// matching ErrLimitMismatch naming both, unless the stored one was written
// by SetLimit: then it is adopted (Decision.Adopted) so that SetLimit in
// one process changes the limit for every process.
package rstore

import (
	"context"
	"errors"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/window"
)

// Kind names a window of package window.
type Kind uint8

// The windows of package window, each with a Redis form.
const (
	Completion           Kind = iota + 1 // window.NewCompletion
	FixedCompletion                      // window.NewFixedCompletion
	SlidingLog                           // window.NewSlidingLog (Margin)
	FixedWindow                          // window.NewFixedWindow
	SlidingWindowCounter                 // window.NewSlidingWindowCounter
	SubWindowCounter                     // window.NewSubWindowCounter (Blocks)
	TokenBucket                          // window.NewTokenBucket (Burst)
	LeakyBucket                          // window.NewLeakyBucket (Burst: the size)
	GCRA                                 // window.NewGCRA / NewPacer (Burst)
)

// Spec is one rule's window as Redis keeps it.
type Spec struct {
	Kind   Kind
	Limit  window.Limit // N units per Per; Per a whole number of µs, > 0
	Burst  int64        // TokenBucket, LeakyBucket, GCRA: the burst (size), ≥ 1
	Margin time.Duration
	Blocks int
	// Concurrency caps the units in flight per key across every process
	// (leases count); 0 means no cap beyond the window.
	Concurrency int64
}

// SpecOf returns the Spec of the window p (a fresh Policy from package
// window), or an error for a Policy of another package.
func SpecOf(p window.Policy) (Spec, error) { panic("rstore: todo") }

// Capacity returns the heaviest single charge s can ever admit.
func (s Spec) Capacity() int64 { panic("rstore: todo") }

// Charge is what one call costs under one rule: Weight units of the limiter
// (Rule, Key). Spec is the rule's window; charges of one call name distinct
// (Rule, Key) pairs.
type Charge struct {
	Rule   string
	Key    string
	Spec   *Spec
	Weight int64
}

// ErrLimitMismatch is matched by the error Admit returns when a charge's
// Spec differs from the one stored with the limiter's state by another
// process (not by SetLimit).
var ErrLimitMismatch = errors.New("ratesem: limit differs from the one stored in Redis")

// ErrNotInFlight is matched by Release, Extend and Cancel for a token the
// server does not know (lost with a restart, or its lease ran out).
var ErrNotInFlight = errors.New("ratesem: call not in flight in Redis")

// Options configure a Store.
type Options struct {
	// Lease is how long a call admitted counts as in flight without a
	// Release (a process that dies mid-call frees its units then). Default
	// 1 minute.
	Lease time.Duration
	// Now, when set, replaces the server's TIME (tests and simulations).
	Now func() time.Time
}

// Store keeps limiters in one Redis (a server or a cluster). It is safe for
// concurrent use.
type Store struct {
	c      goredis.UniversalClient
	prefix string
	opts   Options
}

// New returns a Store over c whose keys begin with prefix (non-empty, at
// most 256 bytes).
func New(c goredis.UniversalClient, prefix string, o Options) (*Store, error) {
	panic("rstore: todo")
}

// Decision is the answer of Admit.
type Decision struct {
	// OK reports that every charge was admitted, atomically.
	OK bool
	// Token names the call's lease when OK; Release, Extend and Cancel
	// take it.
	Token string
	// Now is the server's clock at the decision.
	Now time.Time
	// Wait, when !OK, is how long until the call could be admitted if
	// nothing else changed (a pause, a window moving on).
	Wait time.Duration
	// Release, when !OK, reports that only calls in flight ending (a
	// Release somewhere, a lease running out) can make room; Wait is then
	// the bound given by the leases.
	Release bool
	// Refused is the index of a charge that refused, when !OK.
	Refused int
	// Paused reports that the refusal was a pause (Pause).
	Paused bool
	// Lost reports that a limiter's state was found lost (evicted,
	// deleted, a restart) and was held full for the time it forgets.
	Lost bool
	// Adopted lists the indices of charges whose stored Spec (written by
	// SetLimit) replaced the caller's.
	Adopted []int
}

// Admit decides a call under all of its charges at once, on the server's
// clock, in one EVALSHA: either every charge is admitted or none changes.
func (s *Store) Admit(ctx context.Context, scope string, cs []Charge) (Decision, error) {
	panic("rstore: todo")
}

// Release ends the call of token now (server clock): its units leave flight
// and, for the windows that count ends (completion), are logged as ended.
func (s *Store) Release(ctx context.Context, scope string, cs []Charge, token string) error {
	panic("rstore: todo")
}

// Cancel takes back the admission of token, whose call never started.
func (s *Store) Cancel(ctx context.Context, scope string, cs []Charge, token string) error {
	panic("rstore: todo")
}

// Extend renews the lease of token for d from now.
func (s *Store) Extend(ctx context.Context, scope string, cs []Charge, token string, d time.Duration) error {
	panic("rstore: todo")
}

// Pause holds every admission of c's limiter, in every process, for d from
// now (server clock); a pause only ever extends. It returns when it ends.
func (s *Store) Pause(ctx context.Context, scope string, c Charge, d time.Duration) (time.Time, error) {
	panic("rstore: todo")
}

// Reconcile tightens c's limiter with the server's own count: used units
// counted in the server's current window. The limiter then counts at least
// used units (never more than N), and never fewer than it did. It returns
// the units it added.
func (s *Store) Reconcile(ctx context.Context, scope string, c Charge, used int64) (int64, error) {
	panic("rstore: todo")
}

// SetLimit stores c.Spec as the limiter's limit for every process.
func (s *Store) SetLimit(ctx context.Context, scope string, c Charge) error {
	panic("rstore: todo")
}
