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
// rule name and key. tag percent-encodes '%', ':', '{', '}' (and is "%" for the empty scope) so every scope is a
// well-formed, non-empty hash tag: all the keys one call touches (one
// scope) hash to one slot of a Redis Cluster, and every key is passed to
// the script in KEYS (none is built inside Lua). The consequence, which
// callers document: one scope lives on one cluster node.
//
// A scope has one more key, its epoch (EpochKey, same hash tag; see
// # Losses), which every script gets in KEYS after the limiters' keys.
//
// Every key has a TTL just over the time its state matters, refreshed by
// the scripts that write it: an idle limiter leaves nothing behind (nor an
// idle scope: its epoch key lives as long as its longest-lived key).
//
// # Cost
//
// The admission script decides most calls without defining a helper
// function (closures cost a few µs per run): one charge of a GCRA or a
// completion window in one HMGET, one GET (the scope's epoch key, see
// # Losses) and one HSET (and the lease's ZADD), any call whose every
// charge fits on the counts kept in the hashes (upper bounds: leases that
// ran out are swept, and logs pruned, lazily, at least once a second per
// busy limiter and before any refusal) in one GET, then one HMGET, one
// HSET and the leases' and logs' ZADDs per charge. TTLs are refreshed once
// a second. The full path runs for the rest (a refusal, a pause, a spec to
// adopt, a new or lost limiter, a scope's epoch this process has not seen,
// a roll with calls in flight) and decides the same way. AdmitLua and
// AdmitCall expose the script for benchmarks.
// Release keeps a fast path for one charge of a completion window; Settle
// (a call whose weights are known only after it) always runs the full
// path, about twice a release's cost on the server.
//
// Several ends and admissions of one scope go as one batch script
// (batchScript, see Pipe): one EVALSHA and one TIME for them all; its fast
// paths read each limiter's hash once (one HMGET of every field they
// use) and the epoch key once,
// and write each hash once at the end (a full path writes them back
// first). A semaphore's call (admission and release) in batches of 16
// costs about 3 redis.calls instead of 10, a Binance order (three fixed
// completion windows) about 6.5 instead of 21 (TestExpBatchCost).
//
// # Clock
//
// The server's TIME, read inside the script, in whole microseconds since the
// Unix epoch, is the only clock (Options.Now overrides it, for tests only).
// A limit's Per, a margin and a lease must be whole microseconds. Time never
// goes back for one limiter: an earlier instant is taken as the latest seen.
//
// # Losses
//
// Part of a limiter's keys gone (evicted, deleted) is found by the counts
// its hash keeps (Decision.Lost): the limiter is rebuilt from what is left
// and held full for a Per. A whole loss of a scope's state (FLUSHALL, a
// restart without persistence, a failover to an empty replica) leaves no
// count to compare; it is found through the scope's epoch key, which holds
// an id made with the scope's state, lives as long as any key of the scope
// and is extended with them: a Store remembers, per scope, the epoch it
// last saw and until when that key must exist (the latest admission's
// instant plus its keys' TTL, less a second). An admission that finds the
// key gone (or made again, with another id, by a process that did not
// know the old one) before then (or a Carry, which reads the key as an
// admission does) notes the loss in the key at that instant
// l; from then on every limiter of the scope whose state predates the loss
// is made as full as a limiter full at l (and a limiter made new, as well:
// nobody can tell it from a lost one): held full until l + Per (+ margin)
// for the completion window and the sliding log, full in l's window or
// block for the fixed windows and counters, empty at l for the buckets, a
// whole burst after l for GCRA, so that no window sees more than N across
// the loss from the calls the lost state counted as ended. A Store that
// never saw the scope (a process started after the loss), or saw it
// longer ago than its keys' TTL, cannot tell a loss from a new scope. A
// call in flight at the loss counts again from its release (Release finds
// no lease though it cannot have run out, and the completion windows log
// its end), but not while it is still in flight after the hold: calls
// longer than a Per may then exceed the limit by their units.
//
// # Late admissions
//
// An admission carries the instant after which its caller no longer waits
// (rspec.WithAnswerBy), read on Redis's clock: the script refuses it,
// changing nothing, when it runs later (Decision.Late). A Redis that wakes
// from a freeze (DEBUG SLEEP, SIGSTOP) runs the admissions sent to it
// meanwhile, whose callers left long before; admitted, their leases would
// hold the limit for a whole lease. Redis's clock is read from the replies
// of the scope's admissions (the middle of the round trip, within half of
// it); a Store with no reading, or one older than a minute, reads it with
// one round trip first (TIME, on the scope's node). The margin is the
// reading's round trip, 2 ms, and a thousandth of the reading's age.
//
// # Limits
//
// The limit (kind, N, Per, burst, margin, blocks) is stored with the state.
// An Admit whose Spec differs from the stored one fails with an error
// matching ErrLimitMismatch naming both, unless the stored one was written
// by SetLimit: then it is adopted (Decision.Adopted, AdoptedSpecs) so that
// SetLimit in one process changes the limit for every process.
//
// # Learned limits
//
// A key whose limit nobody has learned yet is charged under rspec.Unknown
// (one call at a time across the fleet); it adopts any limit stored for
// the key, and a charge under another Spec replaces a stored Unknown for
// every process (as SetLimit would): the fleet learns a key's limit from
// the first response that names it. A server that announces a budget
// (remaining units until a reset) is kept as a Quota (rspec.Quota): its
// budget, fed by Budget from any process's responses, is shared by every
// admission of the fleet.
package rstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/rspec"
)

// The types of package rspec, under their names here.
type (
	Kind     = rspec.Kind
	Spec     = rspec.Spec
	Charge   = rspec.Charge
	Decision = rspec.Decision
	End      = rspec.End
	Read     = rspec.Read
)

// The windows of package window, each with a Redis form (rspec's).
const (
	Completion           = rspec.Completion
	FixedCompletion      = rspec.FixedCompletion
	SlidingLog           = rspec.SlidingLog
	FixedWindow          = rspec.FixedWindow
	SlidingWindowCounter = rspec.SlidingWindowCounter
	SubWindowCounter     = rspec.SubWindowCounter
	TokenBucket          = rspec.TokenBucket
	LeakyBucket          = rspec.LeakyBucket
	GCRA                 = rspec.GCRA
	Quota                = rspec.Quota
)

// Bounds of what a Store accepts (rspec's).
const (
	MaxN       = rspec.MaxN
	MaxPer     = rspec.MaxPer
	MaxBlocks  = rspec.MaxBlocks
	MaxCharges = rspec.MaxCharges
	MaxNameLen = rspec.MaxNameLen
	// DefaultLease is the default of Options.Lease.
	DefaultLease = rspec.DefaultLease
)

// Errors (rspec's).
var (
	ErrSpec          = rspec.ErrSpec
	ErrLimitMismatch = rspec.ErrLimitMismatch
	ErrNotInFlight   = rspec.ErrNotInFlight
)

// SpecOf is rspec.SpecOf.
var SpecOf = rspec.SpecOf

var _ rspec.Store = (*Store)(nil)

// Options configure a Store.
type Options struct {
	// Lease is how long a call admitted counts as in flight without a
	// Release (a process that dies mid-call frees its units then): whole
	// µs, at most MaxPer. 0 means DefaultLease.
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
	leaseS string // the lease in µs, formatted
	// noBatch sends every end and admission as a script of its own, as a
	// pipeline (tests compare it with the batch script)
	noBatch bool
	// batchSeen: a batch script ran (Redis has its text; a Redis that
	// lost it answers NOSCRIPT, then EVAL)
	batchSeen atomic.Bool

	mu     sync.Mutex
	scopes map[string]*scopeMem // at most maxScopes
}

// scopeMem is what a Store remembers of a scope: the epoch it last saw
// (see # Losses), and its latest reading of the clock of the scope's
// Redis.
type scopeMem struct {
	epoch string
	until int64 // µs, Redis's clock: the epoch key exists until then at least; 0: unknown
	clock clockReading
}

// clockReading is one reading of Redis's clock.
type clockReading struct {
	srv int64         // Redis's clock, µs since the Unix epoch
	at  time.Time     // this process's clock (monotonic) at the middle of the round trip
	rtt time.Duration // the round trip: the reading is within half of it
}

const (
	// maxScopes bounds the scopes a Store remembers; beyond it, the
	// scopes whose epoch key is no longer known to exist are forgotten.
	maxScopes = 4096
	// maxClockAge is the age of a clock reading beyond which an admission
	// with a deadline reads the clock again first.
	maxClockAge = time.Minute
	// minSlack is the least margin added to an admission's deadline.
	minSlack = 2 * time.Millisecond
)

// New returns a Store over c whose keys begin with prefix: 1 to MaxNameLen
// bytes without '{' or '}' (the hash tag is the scope's). It does not talk
// to Redis.
func New(c goredis.UniversalClient, prefix string, o Options) (*Store, error) {
	switch {
	case c == nil:
		return nil, errors.New("ratesem: rstore.New: nil Redis client")
	case prefix == "" || len(prefix) > MaxNameLen || strings.ContainsAny(prefix, "{}"):
		return nil, fmt.Errorf("ratesem: Redis key prefix %q: want 1 to %d bytes without '{' or '}'", clip(prefix), MaxNameLen)
	}
	if o.Lease == 0 {
		o.Lease = DefaultLease
	}
	if o.Lease < time.Microsecond || o.Lease > MaxPer || !rspec.WholeMicros(o.Lease) {
		return nil, fmt.Errorf("ratesem: lease %v: want a whole number of µs in [1µs, %v]", o.Lease, MaxPer)
	}
	return &Store{c: c, prefix: prefix, opts: o, leaseS: strconv.FormatInt(o.Lease.Microseconds(), 10)}, nil
}

// Lease returns the lease of calls in flight.
func (s *Store) Lease() time.Duration { return s.opts.Lease }

// clip shortens a caller's string for an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// escape percent-encodes the bytes of s that would end a key's part or its
// hash tag: '%', ':', '{', '}'.
func escape(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%', ':', '{', '}':
			fmt.Fprintf(b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
}

// Keys returns the three keys of c's limiter in scope: its hash, its leases
// and its log, all with the hash tag of scope.
func (s *Store) Keys(scope string, c Charge) [3]string {
	var b strings.Builder
	b.Grow(len(s.prefix) + len(scope) + len(c.Rule) + len(c.Key) + 16)
	s.scopePart(&b, scope)
	escape(&b, c.Rule)
	b.WriteByte(':')
	escape(&b, c.Key)
	h := b.String()
	return [3]string{h, h + ":f", h + ":z"}
}

// EpochKey returns the key of scope's epoch (see # Losses): prefix, the
// scope's hash tag and "~e", which no limiter's key is (theirs have a
// rule and a key after the tag, separated by ':').
func (s *Store) EpochKey(scope string) string {
	var b strings.Builder
	b.Grow(len(s.prefix) + len(scope) + 8)
	s.scopePart(&b, scope)
	b.WriteString("~e")
	return b.String()
}

// scopePart writes the prefix and scope's hash tag: prefix + ":{" + tag +
// "}:".
func (s *Store) scopePart(b *strings.Builder, scope string) {
	b.WriteString(s.prefix)
	b.WriteString(":{")
	if scope == "" {
		// "{}" is no hash tag to Redis Cluster (the whole key would be
		// hashed): the empty scope's tag is "%", which no escaped scope is.
		b.WriteByte('%')
	}
	escape(b, scope)
	b.WriteString("}:")
}

// call is a script's KEYS (the charges' and the scope's epoch key) and
// ARGV for charges cs.
func (s *Store) call(scope string, cs []Charge, token, arg string) ([]string, []any, error) {
	if len(cs) == 0 || len(cs) > MaxCharges {
		return nil, nil, fmt.Errorf("ratesem: %d charges in one call: want 1 to %d", len(cs), MaxCharges)
	}
	if len(scope) > MaxNameLen {
		return nil, nil, fmt.Errorf("ratesem: scope of %d bytes: want at most %d", len(scope), MaxNameLen)
	}
	keys := make([]string, 0, 3*len(cs)+1)
	args := make([]any, 4, 4+perArg*len(cs))
	now := ""
	if s.opts.Now != nil {
		now = strconv.FormatInt(s.opts.Now().UnixMicro(), 10)
	}
	args[0], args[1], args[2], args[3] = now, token, arg, len(cs)
	for i := range cs {
		c := &cs[i]
		if c.Spec == nil {
			return nil, nil, fmt.Errorf("ratesem: charge %s[%s] has no Spec", clip(c.Rule), clip(c.Key))
		}
		if len(c.Rule) > MaxNameLen || len(c.Key) > MaxNameLen {
			return nil, nil, fmt.Errorf("ratesem: rule %q, key %q: want at most %d bytes each", clip(c.Rule), clip(c.Key), MaxNameLen)
		}
		if c.Weight < 0 {
			return nil, nil, fmt.Errorf("%w %d: %s[%s]", ratesem.ErrNegativeWeight, c.Weight, clip(c.Rule), clip(c.Key))
		}
		if err := c.Spec.Check(); err != nil {
			return nil, nil, err
		}
		if c.Weight > c.Spec.Capacity() {
			return nil, nil, fmt.Errorf("%w: %s[%s]: weight %d (%s)", ratesem.ErrWeightTooLarge, clip(c.Rule), clip(c.Key), c.Weight, c.Spec)
		}
		k := s.Keys(scope, *c)
		keys = append(keys, k[0], k[1], k[2])
		args = append(args, c.Spec.Wire(), int(c.Spec.Kind), c.Spec.Limit.N, c.Spec.Limit.Per.Microseconds(),
			c.Spec.P1(), c.Spec.Concurrency, c.Weight, c.Spec.TTL(s.opts.Lease))
	}
	keys = append(keys, s.EpochKey(scope))
	return keys, args, nil
}

// mismatch turns the reply {-1, i, stored} (charge i's limiter stores
// another spec) into an error; or the admit reply {-2, i, stored}: charge
// i is heavier than the Capacity of the spec stored by SetLimit (another
// process lowered the limit) that its limiter adopted.
func mismatch(cs []Charge, r []any) error {
	i, _ := r[1].(int64)
	stored, _ := r[2].(string)
	if i < 1 || int(i) > len(cs) {
		return fmt.Errorf("ratesem: malformed reply from Redis: %v", r)
	}
	c := cs[i-1]
	sp, ok := rspec.ParseWire(stored)
	if r[0] != int64(-2) {
		return mismatchOf(c, stored)
	} else if !ok {
		return fmt.Errorf("ratesem: malformed reply from Redis: %v", r)
	}
	return fmt.Errorf("%w: weight %d under rule %q key %q can never start: its limit was set to %s in Redis (SetLimit), which admits at most %d at once",
		ratesem.ErrWeightTooLarge, c.Weight, c.Rule, c.Key, sp.String(), sp.Capacity())
}

// mismatchOf is the error of charge c whose limiter stores the spec stored.
func mismatchOf(c Charge, stored string) error {
	me := &rspec.MismatchError{Rule: c.Rule, Key: c.Key, Have: c.Spec.String(), Stored: strconv.Quote(clip(stored))}
	if sp, ok := rspec.ParseWire(stored); ok {
		me.Stored, me.StoredSpec = sp.String(), sp
	}
	return me
}

func newToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Admit decides a call under all of its charges at once, on the server's
// clock, in one EVALSHA: either every charge is admitted or none changes.
// A ctx made by rspec.WithAnswerBy sets the instant after which the
// admission is refused (Decision.Late); when this Store has no reading of
// the scope's Redis clock younger than a minute, it reads it first (one
// more round trip, bounded by ctx). The scope's whole loss is found and held on
// the safe side (Decision.Lost; see # Losses).
//
// It returns an error, without a round trip, for a charge without Spec, a
// Spec that fails Check, a negative weight (ratesem.ErrNegativeWeight), a
// weight above the Spec's Capacity (ratesem.ErrWeightTooLarge), 0 or more
// than MaxCharges charges, or a name longer than MaxNameLen; an error
// matching ErrLimitMismatch when a limiter's stored Spec differs; the
// go-redis error when the round trip fails. It blocks for one round trip
// (two when it reads the clock first).
func (s *Store) Admit(ctx context.Context, scope string, cs []Charge) (Decision, error) {
	ds, errs, err := s.admitAll(ctx, "admit", scope, [][]Charge{cs}, s.leaseS)
	if err != nil {
		return Decision{}, err
	}
	return ds[0], errs[0]
}

// admitted reads the admission script's reply v for the call cs under
// token tok (sent and got: the local instants around the round trip).
func (s *Store) admitted(scope string, cs []Charge, tok string, v []any, sent, got time.Time) (Decision, error) {
	if len(v) < 3 {
		return Decision{}, fmt.Errorf("ratesem: malformed reply from Redis: %v", v)
	}
	if code, _ := v[0].(int64); code < 0 {
		return Decision{}, mismatch(cs, v)
	}
	if len(v) < 6 || len(v) > 8 {
		return Decision{}, fmt.Errorf("ratesem: malformed reply from Redis: %v", v)
	}
	ok, _ := v[0].(int64)
	now, _ := v[1].(int64)
	wait, _ := v[2].(int64)
	ref, _ := v[3].(int64)
	flags, _ := v[4].(int64)
	epoch := ""
	if len(v) == 8 {
		epoch, _ = v[7].(string)
	}
	s.learn(scope, cs, now, sent, got, ok == 1 && flags&16 == 0, epoch)
	d := Decision{
		OK: ok == 1, Now: time.UnixMicro(now), Leased: flags&8 != 0,
		Release: flags&1 != 0, Paused: flags&2 != 0, Lost: flags&4 != 0,
	}
	if flags&16 != 0 {
		d.OK, d.Late = false, true
		return d, nil
	}
	if ad, _ := v[5].(string); ad != "" {
		// "i=spec," per charge that adopted a stored spec
		for _, f := range strings.Split(strings.TrimSuffix(ad, ","), ",") {
			is, wire, _ := strings.Cut(f, "=")
			if i, err := strconv.Atoi(is); err == nil && i >= 1 && i <= len(cs) {
				sp, _ := rspec.ParseWire(wire)
				d.Adopted = append(d.Adopted, i-1)
				d.AdoptedSpecs = append(d.AdoptedSpecs, sp)
			}
		}
	}
	if d.OK {
		d.Token = tok + "." + strconv.FormatInt(now, 10)
		if len(v) >= 7 {
			d.Marks = parseMarks(v[6], len(cs))
		}
		return d, nil
	}
	d.Wait = time.Duration(min(max(wait, 1), int64(MaxPer/time.Microsecond))) * time.Microsecond
	d.Refused = int(min(max(ref-1, 0), int64(len(cs)-1)))
	return d, nil
}

// AdmitAll decides the calls of scope, in order, in one round trip: one
// script (batchScript; one EVALSHA per call when there is one call) that
// runs the admissions one after the other, each all-or-nothing and
// decided as Admit decides it at one instant (one TIME), each seeing the
// admissions before it, in strict FIFO per limiter: a call that names a
// limiter an earlier call of the batch was refused on is refused too
// (with that call's wait), changing nothing (every key of one scope
// shares its hash tag: one Redis Cluster slot).
// It returns one Decision and one error per call (the error Admit would
// return: a caller's mistake, found before the round trip, fails that call
// alone), and err when the round trip itself failed (then every call
// failed, and none may have been decided: a call admitted before the
// failure holds its units until its lease runs out). A Redis that lost
// its script cache costs a second round trip (EVAL) for the calls that
// found it gone. ctx, and an rspec.WithAnswerBy instant in it, bound every
// call as they bound Admit's.
func (s *Store) AdmitAll(ctx context.Context, scope string, calls [][]Charge) (ds []Decision, errs []error, err error) {
	return s.admitAll(ctx, "admit", scope, calls, s.leaseS)
}

// Pipe sends, in one round trip (one pipeline), the ends of ends (each as
// Release or Settle would, of any scope, in order), then the admissions of
// calls, all of scope, in order, as AdmitAll decides them: the admissions
// see the room the ends made. by, when not nil, holds one answer-by
// instant per call (zero: ctx's, see rspec.WithAnswerBy), after which
// Redis refuses that admission (Decision.Late). It returns one error per
// end (nil, one matching ErrNotInFlight, a caller's mistake found before
// the round trip, or a reply error), one Decision and error per call (as
// AdmitAll), and err when the round trip itself failed (then nothing is
// known of any of them). With no calls it only ends; scope is then not
// used. A Redis that lost its scripts costs a second round trip.
//
// The ends and admissions of one scope, two or more, go as one batch
// script (the ends first; see AdmitAll), each other scope's ends as
// another, all in one pipeline.
func (s *Store) Pipe(ctx context.Context, ends []End, scope string, calls [][]Charge, by []time.Time) (endErrs []error, ds []Decision, errs []error, err error) {
	if by != nil && len(by) != len(calls) {
		return nil, nil, nil, fmt.Errorf("ratesem: pipe: %d answer-by instants for %d calls", len(by), len(calls))
	}
	return s.pipe(ctx, ends, "admit", scope, calls, s.leaseS, by)
}

// admitAll is AdmitAll with leases of lease µs and extra after each
// call's ARGV (see AdmitCall); its errors name op. A caller's mistake
// costs no round trip.
func (s *Store) admitAll(ctx context.Context, op, scope string, calls [][]Charge, lease string, extra ...any) (ds []Decision, errs []error, err error) {
	_, ds, errs, err = s.pipe(ctx, nil, op, scope, calls, lease, nil, extra...)
	return ds, errs, err
}

// endCall returns the KEYS and ARGV of releaseScript ending e (see
// leaseOp, Settle).
func (s *Store) endCall(e End) ([]string, []any, error) {
	if e.Actual != nil && len(e.Actual) != len(e.Charges) {
		return nil, nil, fmt.Errorf("ratesem: settle: %d actual weights for %d charges", len(e.Actual), len(e.Charges))
	}
	tok, at, err := splitToken(e.Token)
	if err != nil {
		return nil, nil, err
	}
	keys, args, err := s.call(e.Scope, e.Charges, tok, at+":"+s.leaseS)
	if err != nil {
		return nil, nil, err
	}
	plain := true
	for i, a := range e.Actual {
		plain = plain && a == e.Charges[i].Weight
	}
	if !plain {
		for _, a := range e.Actual {
			args = append(args, min(max(a, 0), MaxN))
		}
	}
	return keys, args, nil
}

// ended reads releaseScript's reply v (or its error err) to the end of
// cs (op names it).
func ended(op string, cs []Charge, v any, err error) error {
	if err != nil {
		return fmt.Errorf("ratesem: redis %s: %w", op, err)
	}
	switch r := v.(type) {
	case int64:
		if r > 0 {
			return fmt.Errorf("ratesem: redis %s: %w (%d of %d charges)", op, ErrNotInFlight, r, len(cs))
		}
		return nil
	case []any:
		if len(r) == 3 {
			return mismatch(cs, r)
		}
	}
	return fmt.Errorf("ratesem: malformed reply from Redis: %v", v)
}

// pipe is Pipe with leases of lease µs and extra after each call's ARGV;
// the admissions' errors name op.
func (s *Store) pipe(ctx context.Context, ends []End, op, scope string, calls [][]Charge, lease string, by []time.Time, extra ...any) (endErrs []error, ds []Decision, errs []error, err error) {
	endErrs, ds, errs = make([]error, len(ends)), make([]Decision, len(calls)), make([]error, len(calls))
	toks, keys, args := make([]string, len(calls)), make([][]string, len(calls)), make([][]any, len(calls))
	ekeys, eargs := make([][]string, len(ends)), make([][]any, len(ends))
	valid := false
	for i, e := range ends {
		ekeys[i], eargs[i], endErrs[i] = s.endCall(e)
		valid = valid || endErrs[i] == nil
	}
	admits := false
	for i, cs := range calls {
		toks[i] = newToken()
		keys[i], args[i], errs[i] = s.call(scope, cs, toks[i], lease)
		admits = admits || errs[i] == nil
	}
	if !valid && !admits {
		return endErrs, ds, errs, nil
	}
	dls := make([]string, len(calls))
	if admits {
		ek := s.EpochKey(scope)
		for i := range calls {
			if errs[i] != nil {
				continue
			}
			dctx := ctx
			if by != nil && !by[i].IsZero() {
				dctx = rspec.WithAnswerBy(ctx, by[i])
			}
			if dls[i], err = s.deadline(dctx, scope, ek); err != nil {
				return nil, nil, nil, fmt.Errorf("ratesem: redis %s: reading the server's clock: %w", op, err)
			}
		}
	}
	ev, until := s.recall(scope)
	for i := range calls {
		if errs[i] == nil {
			args[i] = append(append(args[i], ev, until, dls[i]), extra...)
		}
	}
	// The groups: the ends of each scope (in order), the admissions with
	// the ends of theirs. A group of two or more goes as one batch script
	// (its keys share the scope's hash tag); the others one script each.
	type group struct {
		scope  string
		ends   []int
		admits []int
		cmd    *goredis.Cmd
	}
	var gs []*group
	gof := func(sc string) *group {
		for _, g := range gs {
			if g.scope == sc {
				return g
			}
		}
		g := &group{scope: sc}
		gs = append(gs, g)
		return g
	}
	for i, e := range ends {
		if endErrs[i] == nil {
			g := gof(e.Scope)
			g.ends = append(g.ends, i)
		}
	}
	for i := range calls {
		if errs[i] == nil {
			g := gof(scope)
			g.admits = append(g.admits, i)
		}
	}
	ecmds, cmds := make([]*goredis.Cmd, len(ends)), make([]*goredis.Cmd, len(calls))
	var bkeys [][]string
	var bargs [][]any
	exec := func(pipe goredis.Pipeliner) error {
		if pipe.Len() == 0 {
			return nil
		}
		if _, err := pipe.Exec(ctx); err != nil && !isReplyError(err) {
			return fmt.Errorf("ratesem: redis %s: %w", op, err)
		}
		return nil
	}
	sent := time.Now()
	pipe := s.c.Pipeline()
	for _, g := range gs {
		if len(g.ends)+len(g.admits) >= 2 && !s.noBatch {
			k, a, ok := s.batchCall(g.scope, g.ends, g.admits, ekeys, eargs, keys, args)
			if ok {
				if s.batchSeen.Load() {
					g.cmd = batchScript.EvalSha(ctx, pipe, k, a...)
				} else {
					// the first batch of this Store sends the text: no
					// round trip more to load it (Redis keeps it)
					g.cmd = batchScript.Eval(ctx, pipe, k, a...)
				}
				bkeys, bargs = append(bkeys, k), append(bargs, a)
				continue
			}
		}
		for _, i := range g.ends {
			ecmds[i] = releaseScript.EvalSha(ctx, pipe, ekeys[i], eargs[i]...)
		}
		for _, i := range g.admits {
			cmds[i] = admitScript.EvalSha(ctx, pipe, keys[i], args[i]...)
		}
	}
	if err := exec(pipe); err != nil {
		return nil, nil, nil, err
	}
	// The commands that found their script gone: EVAL, with the same
	// arguments.
	pipe = s.c.Pipeline()
	for i, c := range ecmds {
		if c != nil && goredis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			ecmds[i] = releaseScript.Eval(ctx, pipe, ekeys[i], eargs[i]...)
		}
	}
	for i, c := range cmds {
		if c != nil && goredis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			a := c.Args()
			a[0], a[1] = "eval", admitSource
			cmds[i] = pipe.Do(ctx, a...)
		}
	}
	b := 0
	for _, g := range gs {
		if g.cmd == nil {
			continue
		}
		if goredis.HasErrorPrefix(g.cmd.Err(), "NOSCRIPT") {
			g.cmd = batchScript.Eval(ctx, pipe, bkeys[b], bargs[b]...)
		}
		b++
	}
	if err := exec(pipe); err != nil {
		return nil, nil, nil, err
	}
	got := time.Now()
	endOp := func(i int) string {
		if eargs[i] != nil && len(eargs[i]) > 4+perArg*len(ends[i].Charges) {
			return "settle"
		}
		return "release"
	}
	for i, c := range ecmds {
		if c != nil {
			v, err := c.Result()
			endErrs[i] = ended(endOp(i), ends[i].Charges, v, err)
		}
	}
	for i, c := range cmds {
		if c == nil {
			continue
		}
		v, rerr := c.Slice()
		if rerr != nil {
			errs[i] = fmt.Errorf("ratesem: redis %s: %w", op, rerr)
			continue
		}
		ds[i], errs[i] = s.admitted(scope, calls[i], toks[i], v, sent, got)
	}
	for _, g := range gs {
		if g.cmd == nil {
			continue
		}
		rs, berr := g.cmd.Slice()
		if berr == nil {
			s.batchSeen.Store(true)
		}
		if berr == nil && len(rs) != len(g.ends)+len(g.admits) {
			berr = fmt.Errorf("malformed reply from Redis: %d replies for %d scripts", len(rs), len(g.ends)+len(g.admits))
		}
		for j, i := range g.ends {
			if berr != nil {
				endErrs[i] = fmt.Errorf("ratesem: redis %s: %w", endOp(i), berr)
				continue
			}
			v, rerr := batchReply(rs[j])
			endErrs[i] = ended(endOp(i), ends[i].Charges, v, rerr)
		}
		for j, i := range g.admits {
			if berr != nil {
				errs[i] = fmt.Errorf("ratesem: redis %s: %w", op, berr)
				continue
			}
			r, rerr := batchReply(rs[len(g.ends)+j])
			v, ok := r.([]any)
			if rerr == nil && !ok {
				rerr = fmt.Errorf("malformed reply from Redis: %v", r)
			}
			if rerr != nil {
				errs[i] = fmt.Errorf("ratesem: redis %s: %w", op, rerr)
				continue
			}
			ds[i], errs[i] = s.admitted(scope, calls[i], toks[i], v, sent, got)
		}
	}
	return endErrs, ds, errs, nil
}

// batchReply is one element of batchScript's reply: a string is the
// error its script raised.
func batchReply(v any) (any, error) {
	if e, ok := v.(string); ok {
		return nil, errors.New(strings.TrimPrefix(e, "E"))
	}
	return v, nil
}

// batchCall returns the KEYS and ARGV of batchScript running the ends es
// (KEYS ekeys, ARGV eargs) and then the admissions as (KEYS keys, ARGV
// args) of scope; false when some key lacks scope's hash tag (then they
// may not share a Redis Cluster slot: each goes as a script of its own).
func (s *Store) batchCall(scope string, es, as []int, ekeys [][]string, eargs [][]any, keys [][]string, args [][]any) ([]string, []any, bool) {
	var b strings.Builder
	s.scopePart(&b, scope)
	tag := b.String()
	n := len(es) + len(as)
	var nk, na int
	for _, i := range es {
		nk, na = nk+len(ekeys[i]), na+len(eargs[i])
	}
	for _, i := range as {
		nk, na = nk+len(keys[i]), na+len(args[i])
	}
	k := make([]string, 0, nk)
	a := make([]any, 3+2*n, 3+2*n+na)
	a[1], a[2] = len(es), len(as)
	j := 3
	add := func(ks []string, as []any) bool {
		for _, key := range ks {
			if !strings.HasPrefix(key, tag) {
				return false
			}
		}
		if a[0] == nil {
			a[0] = as[0] // the instant (Options.Now) or "": one for all
		}
		k = append(k, ks...)
		a[j], a[j+1] = len(ks), len(as)
		j += 2
		a = append(a, as...)
		return true
	}
	for _, i := range es {
		if !add(ekeys[i], eargs[i]) {
			return nil, nil, false
		}
	}
	for _, i := range as {
		if !add(keys[i], args[i]) {
			return nil, nil, false
		}
	}
	return k, a, true
}

// isReplyError reports whether err is an error reply of Redis to one
// command (a pipeline's Exec returns the first of them), not a failure of
// the round trip.
func isReplyError(err error) bool {
	var re goredis.Error
	return errors.As(err, &re)
}

// timeScript reads the clock of the node of KEYS[1] (a Redis Cluster
// routes it there: TIME itself names no key).
var timeScript = goredis.NewScript(`return redis.call('TIME')`)

// deadline returns the ARGV of an admission's deadline: "" when ctx has no
// rspec.AnswerBy instant or one more than a lease away, or that instant on
// the clock of the scope's Redis (ek: the scope's epoch key) plus the
// margin of the reading (see # Late admissions), reading the clock first
// when this Store has no reading younger than maxClockAge.
func (s *Store) deadline(ctx context.Context, scope, ek string) (string, error) {
	by, ok := rspec.AnswerBy(ctx)
	if !ok || time.Until(by) > s.opts.Lease {
		// An admission nobody waits for holds its units at most a lease:
		// a deadline further away bounds nothing (and its arithmetic
		// could overflow).
		return "", nil
	}
	if s.opts.Now != nil { // the clock is this process's own
		return strconv.FormatInt(s.opts.Now().Add(time.Until(by)+minSlack).UnixMicro(), 10), nil
	}
	s.mu.Lock()
	var r clockReading
	if m := s.scopes[scope]; m != nil {
		r = m.clock
	}
	s.mu.Unlock()
	if r.at.IsZero() || time.Since(r.at) > maxClockAge {
		sent := time.Now()
		v, err := timeScript.Run(ctx, s.c, []string{ek}).Int64Slice()
		if err != nil {
			return "", err
		}
		if len(v) != 2 {
			return "", fmt.Errorf("malformed reply to TIME: %v", v)
		}
		got := time.Now()
		r = clockReading{srv: v[0]*1_000_000 + v[1], at: sent.Add(got.Sub(sent) / 2), rtt: got.Sub(sent)}
		s.mu.Lock()
		s.memLocked(scope).clock = r
		s.mu.Unlock()
	}
	age := by.Sub(r.at)
	slack := r.rtt + minSlack + max(age, 0)/1000
	return strconv.FormatInt(r.srv+(age+slack).Microseconds(), 10), nil
}

// recall returns the ARGV of what this Store saw of scope's epoch: the
// epoch ("" for none), and the instant until which its key must exist (""
// when not known).
func (s *Store) recall(scope string) (string, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.scopes[scope]
	if m == nil || m.epoch == "" {
		return "", ""
	}
	if m.until == 0 {
		return m.epoch, ""
	}
	return m.epoch, strconv.FormatInt(m.until, 10)
}

// learn records what an admission's reply tells of scope: Redis's clock
// (now, in µs, read between sent and got), the scope's epoch ("" when the
// reply does not say: it is the one this Store sent), and, for an
// admission (ok), that the epoch key exists until the keys' TTL less a
// second from now (every script that sets a key's TTL extends the epoch
// key's to at least as far).
func (s *Store) learn(scope string, cs []Charge, now int64, sent, got time.Time, ok bool, epoch string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.memLocked(scope)
	if s.opts.Now == nil {
		m.clock = clockReading{srv: now, at: sent.Add(got.Sub(sent) / 2), rtt: got.Sub(sent)}
	}
	if epoch != "" && epoch != m.epoch {
		m.epoch, m.until = epoch, 0
	}
	if ok && m.epoch != "" {
		var ttl int64 // ms
		for i := range cs {
			ttl = max(ttl, cs[i].Spec.TTL(s.opts.Lease))
		}
		m.until = max(m.until, now+(ttl-1000)*1000)
	}
}

// memLocked returns scope's memory, made if needed; when maxScopes are
// remembered, those whose epoch key is no longer known to exist are
// forgotten first (and, if none is, all of them). s.mu must be held.
func (s *Store) memLocked(scope string) *scopeMem {
	if m := s.scopes[scope]; m != nil {
		return m
	}
	if s.scopes == nil {
		s.scopes = map[string]*scopeMem{}
	}
	if len(s.scopes) >= maxScopes {
		for k, m := range s.scopes {
			if m.clock.at.IsZero() || m.clock.srv+time.Since(m.clock.at).Microseconds() > m.until {
				delete(s.scopes, k)
			}
		}
		if len(s.scopes) >= maxScopes {
			clear(s.scopes)
		}
	}
	m := &scopeMem{}
	s.scopes[scope] = m
	return m
}

// parseMarks reads the marks of an admission's reply ("i:w:d," per charge,
// see admitScript) into one string "w:d" per charge; nil when there are
// none. A malformed entry is left out (its call's counts are then taken in
// as Reconcile takes them).
func parseMarks(v any, n int) []string {
	s, _ := v.(string)
	if s == "" {
		return nil
	}
	var ms []string
	for _, e := range strings.Split(strings.TrimSuffix(s, ","), ",") {
		i, wd, ok := strings.Cut(e, ":")
		j, err := strconv.Atoi(i)
		if !ok || err != nil || j < 1 || j > n || !validMark(wd) {
			continue
		}
		if ms == nil {
			ms = make([]string, n)
		}
		ms[j-1] = wd
	}
	return ms
}

// validMark reports whether m is "w:d", two unsigned decimals below 2^63.
func validMark(m string) bool {
	w, d, ok := strings.Cut(m, ":")
	_, err1 := strconv.ParseUint(w, 10, 63)
	_, err2 := strconv.ParseUint(d, 10, 63)
	return ok && err1 == nil && err2 == nil
}

// splitToken returns the lease member prefix and the admission instant (µs)
// of a token Admit returned.
func splitToken(token string) (string, string, error) {
	tok, at, ok := strings.Cut(token, ".")
	if !ok || len(tok) != 16 || at == "" {
		return "", "", fmt.Errorf("ratesem: malformed token %q", clip(token))
	}
	if _, err := strconv.ParseInt(at, 10, 64); err != nil {
		return "", "", fmt.Errorf("ratesem: malformed token %q", clip(token))
	}
	return tok, at, nil
}

// run runs script (whose errors name op) for the charges cs with ARGV[2]
// tok, ARGV[3] arg and extra after the charges' values, and returns its
// integer reply; the reply {-1, charge, stored} is the error of a spec
// mismatch.
func (s *Store) run(ctx context.Context, op string, script *goredis.Script, scope string, cs []Charge, tok, arg string, extra ...any) (int64, error) {
	keys, args, err := s.call(scope, cs, tok, arg)
	if err != nil {
		return 0, err
	}
	v, err := script.Run(ctx, s.c, keys, append(args, extra...)...).Result()
	if err != nil {
		return 0, fmt.Errorf("ratesem: redis %s: %w", op, err)
	}
	switch r := v.(type) {
	case int64:
		return r, nil
	case []any:
		if len(r) == 3 {
			return 0, mismatch(cs, r)
		}
	}
	return 0, fmt.Errorf("ratesem: malformed reply from Redis: %v", v)
}

// leaseOp runs releaseScript for token's call (arg "" for "at:lease", the
// token's admission instant and the lease in µs) and reports the charges
// whose lease was gone.
func (s *Store) leaseOp(ctx context.Context, op, scope string, cs []Charge, token, arg string, extra ...any) error {
	tok, at, err := splitToken(token)
	if err != nil {
		return err
	}
	if arg == "" {
		arg = at + ":" + s.leaseS
	}
	missing, err := s.run(ctx, op, releaseScript, scope, cs, tok, arg, extra...)
	if err == nil && missing > 0 {
		return fmt.Errorf("ratesem: redis %s: %w (%d of %d charges)", op, ErrNotInFlight, missing, len(cs))
	}
	return err
}

// withMode returns the ARGV that put releaseScript in mode for n charges:
// n weights of 0, then mode.
func withMode(n int, mode string) []any {
	a := make([]any, n+1)
	for i := range n {
		a[i] = 0
	}
	a[n] = mode
	return a
}

// Release ends the call of token now (server clock): its units leave flight
// and, for the completion window, are logged as ended. cs must be the
// charges Admit admitted. It returns an error matching ErrNotInFlight when
// a lease is no longer there: it ran out (the call counted as ended at its
// lease's end), or Redis lost it (the completion windows then count the
// call's end from now all the same, as a lease that had not run out: the
// hold after a loss must not forget the calls in flight then), or the
// go-redis error. One round trip.
func (s *Store) Release(ctx context.Context, scope string, cs []Charge, token string) error {
	return s.leaseOp(ctx, "release", scope, cs, token, "")
}

// Settle ends the call of token now (server clock), as Release does, for
// a call whose weights are known only after it: charge i, admitted for
// cs[i].Weight units (its estimate), really cost actual[i] units. It takes
// one actual weight per charge, in charge order; actual[i] == cs[i].Weight
// settles charge i as Release would (when every charge is plain, Settle is
// Release, on its fast path), a negative actual[i] counts as 0 (never more
// than the estimate is refunded) and one above MaxN as MaxN.
//
// It matches window.Settler kind by kind. A refund r = Weight − actual is
// taken back where the window still counts the call, as Cancel would take
// r units: a fixed window only while the admission's window is now's (a
// fixed completion window, which carries the call in flight into now's
// window, from now's), the sliding log from the call's own entry, the
// sliding window counter from the admission's window if it is the current
// or previous one, the sub-window counter from its block while in range;
// the buckets get min(r, burst − tokens) tokens back (even after later
// admissions), GCRA moves its TAT back by r emission intervals, never
// before now. A debit d = actual − Weight counts at now: in now's window or
// block, as an entry of d at now (plus the margin) in the sliding log,
// d tokens taken (into debt) from a bucket, d emission intervals added to
// GCRA's TAT. The completion windows log actual units at the end instead of
// Weight. Debits saturate at "full until the window moves", as in
// window.Settler: a bucket's debt stops at N units below empty (one Per's
// refill) and GCRA's TAT at (burst + N) emission intervals past now (N for
// a pacer), a state already beyond stays as it is; a fixed window's or
// counter's count stops at 2^52 units (far beyond any N; the count leaves
// with its window). So no reply holds a limiter for much more than one Per
// (two for the sliding window counter), and the keys live until the debt
// is repaid.
//
// Redis keeps no record of a call in a window without leases (no
// concurrency cap, not a completion window) beyond its token: a token
// settled twice would be refunded twice there. Settle each call once (the
// engine's Call panics on a second release).
//
// A charge whose lease is gone gets no refund, and Settle then returns an
// error matching ErrNotInFlight, as Release does: when the lease ran out
// (the call counted as ended at its lease's end with its estimate) it gets
// its debit; when Redis lost it while it cannot have run out (a whole or a
// half loss), the completion windows count the call's end from now with
// its actual weight, as Release counts its estimate then (the hold after
// a loss must not forget the calls in flight then), and the other windows
// its debit. It returns an error, without a round trip, when
// len(actual) != len(cs) or for the charges Admit refuses; the go-redis
// error when the round trip fails. One round trip.
func (s *Store) Settle(ctx context.Context, scope string, cs []Charge, token string, actual []int64) error {
	if len(actual) != len(cs) {
		return fmt.Errorf("ratesem: settle: %d actual weights for %d charges", len(actual), len(cs))
	}
	as := make([]any, len(actual))
	plain := true
	for i, a := range actual {
		as[i] = min(max(a, 0), MaxN)
		plain = plain && a == cs[i].Weight
	}
	if plain {
		return s.Release(ctx, scope, cs, token)
	}
	return s.leaseOp(ctx, "settle", scope, cs, token, "", as...)
}

// Cancel takes back the admission of token, whose call never started: the
// limiters are as if it had not been admitted (as far as the windows can
// tell: a fixed window that moved on keeps nothing to take back). Errors as
// Release.
func (s *Store) Cancel(ctx context.Context, scope string, cs []Charge, token string) error {
	return s.leaseOp(ctx, "cancel", scope, cs, token, "", withMode(len(cs), "cancel")...)
}

// Extend renews the leases of token for d from now (whole µs, at most
// MaxPer). Errors as Release.
func (s *Store) Extend(ctx context.Context, scope string, cs []Charge, token string, d time.Duration) error {
	if d < time.Microsecond || d > MaxPer || !rspec.WholeMicros(d) {
		return fmt.Errorf("ratesem: extend by %v: want a whole number of µs in [1µs, %v]", d, MaxPer)
	}
	return s.leaseOp(ctx, "extend", scope, cs, token, strconv.FormatInt(d.Microseconds(), 10), withMode(len(cs), "extend")...)
}

// Pause holds every admission of c's limiter, in every process, for d from
// now (server clock, rounded up to a µs, at most MaxPer); a pause only ever
// extends. It returns when the pause ends. c.Weight is not used.
func (s *Store) Pause(ctx context.Context, scope string, c Charge, d time.Duration) (time.Time, error) {
	us := d / time.Microsecond // not (d+µs−1)/µs: that wraps for a d near math.MaxInt64
	if d%time.Microsecond != 0 {
		us++
	}
	us = min(max(us, 0), MaxPer/time.Microsecond)
	c.Weight = 0
	end, err := s.run(ctx, "pause", pauseScript, scope, []Charge{c}, "", strconv.FormatInt(int64(us), 10))
	if err != nil {
		return time.Time{}, err
	}
	return time.UnixMicro(end), nil
}

// Reconcile tightens c's limiter with the server's own count: used units
// counted in the server's current window (clamped to [0, N]). The limiter
// then counts at least used units, and never fewer than it did. It returns
// the units it added (see ReconcileAt for the negative count a fixed
// completion window may return). c.Weight is not used.
func (s *Store) Reconcile(ctx context.Context, scope string, c Charge, used int64) (int64, error) {
	return s.ReconcileAt(ctx, scope, c, used, Read{})
}

// ReconcileAt is Reconcile for a count read from a call's response (r.Seen,
// on Redis's clock, the zero time.Time when not known). For the windows
// aligned to the clock (fixed windows, the sliding window counter, the
// sub-window counter's blocks) a count read in an earlier window than the
// current one when it reaches Redis (a report sent in the background that
// lands after the boundary) is that window's count: it is dropped (0 units
// added), whereas applied it would hold the new window as full as the old
// one was. A count read in the current window is applied, even for a call
// admitted in the window before: the server may have counted its arrival in
// the current window, and dropping it could miss another client's spend.
//
// A fixed completion window reads a call's count (r.Mark set) as a bound
// on the units from elsewhere: the server had counted, besides them, the
// call (r.Weight), the fleet's calls that had ended by its admission, and
// every call of the fleet reported before at a count no higher (the
// server's count only grows within a window). Spending from elsewhere only
// grows within a window, so the bound read at the highest count reported
// holds for every earlier count: the limiter counts the fleet's calls plus
// that bound (at most N in all), and a report that tightens it gives back
// what an earlier, looser one took (the units returned are then negative).
// It over-counts the units from elsewhere by at most the fleet's calls that
// the server counted before the highest count but whose reports have not
// reached Redis (and that had not ended by that call's admission). Each
// call must be reported with its mark at most once: a second report would
// take its units off twice. A call with a mark admitted in an earlier
// window than the current one may have been counted in that one: its count
// is dropped. A count without a mark takes every call of the window as
// counted (the window then counts at least used) and never gives back:
// that takes the fleet's calls still on their way to the server for room,
// which a mark avoids. What it shows from elsewhere stays a floor for the
// window's later give-backs; the bound of the marked reports is left as it
// was.
func (s *Store) ReconcileAt(ctx context.Context, scope string, c Charge, used int64, r Read) (int64, error) {
	c.Weight = 0
	used = min(max(used, 0), MaxN)
	atArg := ""
	if !r.Seen.IsZero() {
		atArg = strconv.FormatInt(r.Seen.UnixMicro(), 10)
		if r.Mark != "" && validMark(r.Mark) && r.Weight >= 0 && r.Weight <= MaxN {
			atArg += ":" + r.Mark + ":" + strconv.FormatInt(r.Weight, 10)
		}
	}
	return s.run(ctx, "reconcile", reconcileScript, scope, []Charge{c}, atArg, strconv.FormatInt(used, 10))
}

// SetLimit stores c.Spec as the limiter's limit for every process: their
// admissions adopt it (Decision.Adopted) until the state expires when idle.
// The state is carried over as in process: a bucket's debt and GCRA's
// (TAT − now) are kept in units, refilled to now at the old rate, at most
// one Per of the new rate below empty (win.TokenBucket.SetLimit,
// win.GCRA.SetLimit; GCRA's debt rounded up to a µs); the other windows'
// state is kept as it is, read under the new limit. c.Weight is not used.
func (s *Store) SetLimit(ctx context.Context, scope string, c Charge) error {
	c.Weight = 0
	_, err := s.run(ctx, "set limit", setLimitScript, scope, []Charge{c}, "", "")
	return err
}

// Budget takes in a server's report of the budget of c's limiter, a Quota
// (learned limits: a quota shared by the fleet): remaining units in the
// server's window, which ends resetIn from now (clamped to [0, Per +
// rspec.MaxResetOver]: a window lasts Per; a second more for resets
// rounded to whole seconds, and the engine's ResetMargin, as in process);
// own is the units of the reporting call when it is still in flight and
// leased here (every quota charge is), else 0; tok is that call's token
// (Decision.Token): own counts only while its lease is still held (its
// release may reach Redis before the report), "" to take own as given.
// The budget is remaining (at most N) less the fleet's units in flight
// the server may not have counted yet (those leased, but the reporting
// call's). A report of a window ending more than max(1 s, Per/2) after
// the one the limiter keeps is a new window: it sets the budget and the
// window's end, even higher than it was. Any other report only lowers the
// budget (the server's remaining only falls within a window; a report can
// only tighten), and moves the window's end only later (the window the
// limiter keeps may end before the server's), but for a report that lowers
// the budget (the latest the server counted: a slow reply of a window that
// ended, after a reply of the next set the budget, ends it with its own)
// and the first report of a window the limiter rolled to on its own (a Per
// from the roll: a guess), which set its end sooner or later, as in
// process. A cancelled admission gives its units back to the budget (at
// most N): its call never reached the server. A report
// whose window has ended (resetIn ≤ 0) changes nothing. Admissions take
// their units from the budget and, when it is short, wait until the
// window ends (Decision.Wait), across every process; a window that ends
// without a report rolls to one of Per allowing N less the units in
// flight (leased), which may arrive in it.
//
// It returns the units the budget dropped by (negative when a new window
// raised it: room was made), an error matching ErrSpec for a limiter
// whose stored spec is not a Quota, ErrLimitMismatch, an error for a
// malformed tok, or the go-redis error. c.Weight is not used. One round
// trip.
func (s *Store) Budget(ctx context.Context, scope string, c Charge, remaining int64, resetIn time.Duration, own int64, tok string) (int64, error) {
	c.Weight = 0
	remaining = min(max(remaining, 0), MaxN)
	own = min(max(own, 0), MaxN)
	rin := min(max(resetIn, 0), MaxPer+rspec.MaxResetOver)
	us := rin / time.Microsecond
	if rin%time.Microsecond != 0 {
		us++
	}
	arg := strconv.FormatInt(remaining, 10) + ":" + strconv.FormatInt(int64(us), 10) + ":" + strconv.FormatInt(own, 10)
	if tok != "" {
		m, _, err := splitToken(tok)
		if err != nil {
			return 0, err
		}
		tok = m
	}
	drop, err := s.run(ctx, "budget", budgetScript, scope, []Charge{c}, tok, arg)
	if isReplyError(err) && strings.Contains(err.Error(), "ERR ratesem: not a quota limiter") {
		return 0, fmt.Errorf("%w: rule %q key %q: its limit in Redis is not a quota (budget report dropped)", ErrSpec, clip(c.Rule), clip(c.Key))
	}
	return drop, err
}

// AdmitLua returns the Lua source of the admission script Admit runs with
// EVALSHA (for benchmarks that measure the raw script, e.g. against
// go-redis/redis_rate). Its KEYS and ARGV for a call are those AdmitCall
// returns; its reply is {1, now µs, 0, 0, flags, adopted, marks, epoch}
// when every charge was admitted (the fast paths leave out the epoch, and
// some the marks), {0, now µs, wait µs, refusing charge (from 1), flags,
// adopted, "", epoch} when none was, {0, now µs, 0, 1, 16, ""} when the
// deadline had passed, or {-1, charge, stored spec} for a limit mismatch;
// flags: 1 only a release can help, 2 paused, 4 lost state, 8 a lease was
// taken, 16 too late; adopted: the charges (from 1) whose stored spec was
// adopted, each as "i=stored spec", comma-separated; epoch: the scope's
// epoch (see # Losses).
func AdmitLua() string { return admitSource }

// AdmitCall returns the KEYS and ARGV with which Admit would run the
// admission script (AdmitLua) for the call cs in scope, token being the
// call's 16 hex digits, without a deadline. KEYS holds three keys per
// charge, in order: the limiter's hash, its sorted set of leases, its
// sorted set log (Keys); then the scope's epoch key (EpochKey). ARGV
// holds:
//
//	ARGV[1]  the instant in µs since the Unix epoch (Options.Now), or "" for the server's TIME
//	ARGV[2]  the token
//	ARGV[3]  the lease in µs
//	ARGV[4]  the number of charges
//
// then 8 values per charge: the spec as stored ("kind/N/Per µs/p1/
// concurrency"), kind, N, Per in µs, p1 (burst, margin in µs or blocks),
// the concurrency cap, the weight, the TTL of its keys in ms; then the
// scope's epoch this Store saw ("" for none), the instant in µs until
// which it knows the epoch key exists ("" when it does not), and the
// deadline in µs ("": none). It returns the errors Admit returns before a
// round trip. It does not talk to Redis.
func (s *Store) AdmitCall(scope string, cs []Charge, token string) (keys []string, args []any, err error) {
	keys, args, err = s.call(scope, cs, token, s.leaseS)
	if err != nil {
		return nil, nil, err
	}
	ev, until := s.recall(scope)
	return keys, append(args, ev, until, ""), nil
}

// NewOpener returns the rspec.Opener of c: stores built with New over c,
// and the eviction check of c's server.
func NewOpener(c goredis.UniversalClient) rspec.Opener {
	return rspec.Opener{
		Open: func(prefix string, lease time.Duration) (rspec.Store, error) {
			return New(c, prefix, Options{Lease: lease})
		},
		Check: func(timeout time.Duration, prefix, scope string, cs []rspec.Charge, eviction bool) error {
			return check(c, timeout, prefix, scope, cs, eviction)
		},
	}
}
