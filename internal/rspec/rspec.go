// Package rspec holds what the shared (Redis) mode of ratesem says about
// limits without talking to Redis: the Spec of a rule's window as the
// store keeps it, a call's Charge under one rule, the store's Decision, and
// the Store interface the waiting engine (internal/remote) runs on and the
// Opener that opens stores. It imports no Redis client, so that packages
// semaphore and clientpool, which build on it, do not link go-redis;
// package internal/rstore implements Store over go-redis.
package rspec

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/win"
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
	// Quota is a budget the server announces (learned limits: a
	// clientpool Rule.Learn whose reports name the window's end): N
	// units per window of Per, the window and what remains in it set by
	// the server's reports (Store.Budget), shared by the fleet. A
	// window that ends with no report rolls to one of Per from then,
	// allowing N less the units in flight (counted only under a
	// concurrency cap). Cancel and Settle give nothing back to it (the
	// server may have counted the call); a Settle's debit comes out of
	// it; a usage count (ReconcileAt) lowers it to N − used. It has no
	// window of package window: a front builds its Spec directly.
	Quota
)

// Spec is one rule's window as Redis keeps it.
type Spec struct {
	Kind  Kind
	Limit window.Limit // N units per Per; Per a whole number of µs, > 0
	// Burst is the burst of TokenBucket and GCRA and the size of
	// LeakyBucket, in units, ≥ 1; for GCRA, 0 means a pacer
	// (window.NewPacer: no tolerance, capacity N).
	Burst int64
	// Margin is the sliding log's margin (≥ 0, whole µs).
	Margin time.Duration
	// Blocks is the sub-window counter's number of blocks, 1 to MaxBlocks.
	Blocks int
	// Concurrency caps the units in flight per key across every process
	// (leases count); 0 means no cap beyond the window.
	Concurrency int64
}

// Bounds of what a Store accepts. Lua numbers are float64: every count,
// instant and product the scripts form stays below 2^53, so the arithmetic
// is exact.
const (
	// MaxN is the largest N, burst, weight and concurrency cap, in units.
	MaxN = 1 << 40
	// MaxPer is the longest Per, margin and lease: about 12.7 days.
	MaxPer = time.Duration(1<<40) * time.Microsecond
	// MaxResetOver is how much later than a Per from now the end of a
	// server's window a budget report names may be (Store.Budget; a
	// hostile or broken reset is cut to it): a second for resets rounded
	// to whole seconds, and the engine's ResetMargin (1 s), as in process.
	MaxResetOver = 2 * time.Second
	// MaxBlocks is the most blocks of a sub-window counter.
	MaxBlocks = 1000
	// MaxCharges is the most charges of one call.
	MaxCharges = 64
	// MaxNameLen is the longest prefix, scope, rule name and key, in bytes.
	MaxNameLen = 512
)

// ErrSpec is matched by the error for a Spec the Store cannot keep (see
// Spec.Check). It wraps ratesem.ErrInvalidLimit, so that error matches too:
// a limit Redis cannot keep exactly is an invalid limit for the caller.
var ErrSpec = fmt.Errorf("%w: not representable in Redis", ratesem.ErrInvalidLimit)

// WholeMicros reports whether d is a whole number of microseconds.
func WholeMicros(d time.Duration) bool { return d%time.Microsecond == 0 }

// Check returns an error matching ErrSpec when s cannot be kept in Redis:
// an unknown kind, N negative or above MaxN, Per not a whole number of µs
// or outside (0, MaxPer] (Completion and SlidingLog accept Per 0: no rate),
// a bucket whose Per·(max(N, Burst)+N) reaches 2^53 µs·units (its refill
// must stay exact), a sliding window counter whose N·Per does.
func (s Spec) Check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: "+format, append([]any{ErrSpec, s}, args...)...)
	}
	if s.Kind < Completion || s.Kind > Quota {
		return bad("unknown kind %d", s.Kind)
	}
	if s.Limit.N < 0 || s.Limit.N > MaxN {
		return bad("N %d outside [0, %d]", s.Limit.N, int64(MaxN))
	}
	if s.Limit.Per < 0 || s.Limit.Per > MaxPer || !WholeMicros(s.Limit.Per) {
		return bad("Per %v: want a whole number of µs in [0, %v]", s.Limit.Per, MaxPer)
	}
	if s.Limit.Per == 0 && s.Kind != Completion && s.Kind != SlidingLog {
		return bad("Per 0 (no rate) is only for the completion window and the sliding log")
	}
	if s.Concurrency < 0 || s.Concurrency > MaxN {
		return bad("concurrency %d outside [0, %d]", s.Concurrency, int64(MaxN))
	}
	per := s.Limit.Per.Microseconds()
	switch s.Kind {
	case SlidingLog:
		if s.Margin < 0 || s.Margin > MaxPer || !WholeMicros(s.Margin) {
			return bad("margin %v: want a whole number of µs in [0, %v]", s.Margin, MaxPer)
		}
	case SubWindowCounter:
		if s.Blocks < 1 || s.Blocks > MaxBlocks {
			return bad("%d blocks: want 1 to %d", s.Blocks, MaxBlocks)
		}
	case TokenBucket, LeakyBucket, GCRA:
		if s.Burst < 0 || s.Burst > MaxN || s.Burst == 0 && s.Kind != GCRA {
			return bad("burst %d outside [1, %d]", s.Burst, int64(MaxN))
		}
		if s.Limit.N == 0 {
			return bad("N 0: a bucket needs a rate")
		}
		if s.Kind != GCRA && float64(per)*float64(max(s.Limit.N, s.Burst)+s.Limit.N+1) >= 1<<53 {
			return bad("Per·(burst+N) too large for exact refill")
		}
		if s.Kind == GCRA && float64(max(s.Burst, s.Limit.N))*float64(per/s.Limit.N+1) >= 1<<52 {
			return bad("burst·emission interval too large")
		}
	case SlidingWindowCounter:
		if float64(per)*float64(s.Limit.N+1) >= 1<<53 {
			return bad("N·Per too large")
		}
	case Quota:
		if s.Limit.N == 0 {
			return bad("N 0: a quota needs a budget")
		}
	}
	return nil
}

// String formats s for errors, as "kind N/Per (burst b, margin m, blocks k,
// concurrency c)" with only the fields that matter.
func (s Spec) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %v", s.Kind, s.Limit)
	switch s.Kind {
	case SlidingLog:
		fmt.Fprintf(&b, " margin %v", s.Margin)
	case SubWindowCounter:
		fmt.Fprintf(&b, " blocks %d", s.Blocks)
	case TokenBucket, LeakyBucket, GCRA:
		fmt.Fprintf(&b, " burst %d", s.Burst)
	}
	if s.Concurrency > 0 {
		fmt.Fprintf(&b, " concurrency %d", s.Concurrency)
	}
	return b.String()
}

var kindNames = [...]string{"unknown", "completion", "fixed-completion", "sliding-log", "fixed-window",
	"sliding-window-counter", "sub-window-counter", "token-bucket", "leaky-bucket", "gcra", "quota"}

// String returns the kind's name, as "completion".
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// P1 is the kind's third parameter: burst, margin µs or blocks.
func (s *Spec) P1() int64 {
	switch s.Kind {
	case SlidingLog:
		return s.Margin.Microseconds()
	case SubWindowCounter:
		return int64(s.Blocks)
	case TokenBucket, LeakyBucket, GCRA:
		return s.Burst
	}
	return 0
}

// Wire is the spec as stored with the state: kind/N/Per µs/p1/concurrency.
func (s *Spec) Wire() string {
	return strconv.Itoa(int(s.Kind)) + "/" + strconv.FormatInt(s.Limit.N, 10) + "/" +
		strconv.FormatInt(s.Limit.Per.Microseconds(), 10) + "/" + strconv.FormatInt(s.P1(), 10) + "/" +
		strconv.FormatInt(s.Concurrency, 10)
}

// ParseWire is Wire's inverse, for errors.
func ParseWire(w string) (Spec, bool) {
	f := strings.Split(w, "/")
	if len(f) != 5 {
		return Spec{}, false
	}
	var v [5]int64
	for i, x := range f {
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return Spec{}, false
		}
		v[i] = n
	}
	s := Spec{Kind: Kind(v[0]), Limit: window.Limit{N: v[1], Per: time.Duration(v[2]) * time.Microsecond}, Concurrency: v[4]}
	switch s.Kind {
	case SlidingLog:
		s.Margin = time.Duration(v[3]) * time.Microsecond
	case SubWindowCounter:
		s.Blocks = int(v[3])
	case TokenBucket, LeakyBucket, GCRA:
		s.Burst = v[3]
	}
	return s, true
}

// TTL is how long, in ms, a limiter's state matters after its last write
// (one second of slack), the lease included.
func (s *Spec) TTL(lease time.Duration) int64 {
	per := s.Limit.Per
	d := per
	switch s.Kind {
	case Completion, FixedCompletion:
		d = per + lease
	case SlidingLog:
		d = per + s.Margin
	case SlidingWindowCounter:
		d = 2 * per
	case SubWindowCounter:
		d = per + per/time.Duration(s.Blocks) + 1
	case TokenBucket, LeakyBucket, GCRA:
		n := max(s.Limit.N, 1)
		k := (max(s.Burst, s.Limit.N)+n-1)/n + 1
		d = time.Duration(min(k, 1<<20)) * per
	case Quota:
		d = per + time.Second // a reported window ends at most Per and a second from the report
	}
	if s.Concurrency > 0 && s.Kind != Completion && s.Kind != FixedCompletion {
		d = max(d, lease)
	}
	return d.Milliseconds() + 1000
}

// SpecOf returns the Spec of the window p (a fresh Policy of package
// window), or an error matching ErrSpec for a Policy of another package.
// It does not Check the result.
func SpecOf(p window.Policy) (Spec, error) {
	s := Spec{Limit: p.Limit()}
	switch w := p.(type) {
	case *win.Completion:
		s.Kind = Completion
	case *win.FixedWindow:
		s.Kind = FixedWindow
		if win.Of(w).DoneUsesTime() { // only NewFixedCompletion reads Done's instant
			s.Kind = FixedCompletion
		}
	case *win.SlidingLog:
		s.Kind, s.Margin = SlidingLog, w.Margin()
	case *win.SlidingWindowCounter:
		s.Kind = SlidingWindowCounter
	case *win.SubWindowCounter:
		s.Kind, s.Blocks = SubWindowCounter, w.Blocks()
	case *win.TokenBucket:
		s.Kind, s.Burst = TokenBucket, w.Burst()
	case *win.LeakyBucket:
		s.Kind, s.Burst = LeakyBucket, w.Burst()
	case *win.GCRA:
		s.Kind, s.Burst = GCRA, w.Burst()
		if w.Capacity() != w.Burst() { // a pacer: tolerance 0, capacity N
			s.Burst = 0
		}
	default:
		return Spec{}, fmt.Errorf("%w: window %T has no Redis form", ErrSpec, p)
	}
	return s, nil
}

// Capacity returns the heaviest single charge s can ever admit, in units:
// N, the burst (bucket size) of the buckets and GCRA, N for a pacer, and
// never more than the concurrency cap.
func (s Spec) Capacity() int64 {
	c := s.Limit.N
	switch s.Kind {
	case TokenBucket, LeakyBucket:
		c = s.Burst
	case GCRA:
		if s.Burst > 0 {
			c = s.Burst
		}
	}
	if s.Concurrency > 0 {
		c = min(c, s.Concurrency)
	}
	return c
}

// NativeInFlightCap reports whether the window k bounds the units in
// flight by itself, at N: the completion windows (a call counts from its
// start until after its end). The others count starts only, so calls in
// flight are bounded only by a concurrency cap (Spec.Concurrency).
func (k Kind) NativeInFlightCap() bool { return k == Completion || k == FixedCompletion }

// SetSemaphoreCap sets s.Concurrency to the cap on units in flight that an
// in-process semaphore of s's limit keeps (semaphore.RateSemaphore: at
// most N units in flight, or capOpt when 0 ≤ capOpt < N; capOpt < 0: no
// option given), so that the same limit over Redis caps the fleet's units
// in flight as one process caps its own: capOpt when 0 ≤ capOpt < N;
// otherwise N for a window that does not bound units in flight itself
// (every kind but the completion windows: a GCRA of N 2 and burst 5 admits
// 2 calls at once, not 5), and 0 (no cap beyond the window) for the
// completion windows. Call it after setting s.Kind and s.Limit, and again
// after a change of s.Limit.N. A pool's rule, whose in-process cap is its
// MaxUnitsInFlight only, sets Concurrency directly.
func (s *Spec) SetSemaphoreCap(capOpt int64) {
	switch {
	case capOpt >= 0 && capOpt < s.Limit.N:
		s.Concurrency = capOpt
	case s.Kind.NativeInFlightCap():
		s.Concurrency = 0
	default:
		s.Concurrency = s.Limit.N
	}
}

// Unknown returns the Spec of a key whose limit nobody has learned yet
// (a clientpool Rule.Learn with no limit given): one call at a time
// across the fleet (a completion window of N 1, no rate, a concurrency
// cap of 1: its wire form, "1/1/0/0/1", marks it). A front charges such a
// key Weight 1 whatever the call's weight (one call) and ends the call
// with Call.ReleaseSettled giving its real weight, so that a limit learned
// meanwhile counts it whole (a debit at the release).
//
// The store treats it apart from other Specs: an Unknown charge adopts
// whatever limit is stored for the key (learned by any process; no
// ErrLimitMismatch), and a charge of another Spec on a key whose stored
// limit is Unknown replaces it, for every process, as SetLimit would. So
// a process that learns a key's limit from a response sends it with its
// next call (or stores it with SetLimit), and every process adopts it at
// its next decision (Decision.Adopted, AdoptedSpecs: it may then charge
// the real weight under the adopted Spec); when the key's state expires,
// idle, the fleet starts again from one call at a time.
func Unknown() *Spec { return &Spec{Kind: Completion, Limit: window.Limit{N: 1}, Concurrency: 1} }

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
var ErrLimitMismatch = ratesem.ErrLimitMismatch

// MismatchError is the error of a charge whose Spec differs from the one
// another process stored with the limiter's state: it matches
// ErrLimitMismatch. Its message names the rule and key (a front with one
// limiter, such as a semaphore, names it its own way from the fields).
type MismatchError struct {
	Rule, Key string
	Have      string // this process's limit (Spec.String)
	Stored    string // the limit stored in Redis (Spec.String, or as stored when unreadable)
	// StoredSpec is the limit stored in Redis, read (Kind 0 when
	// unreadable): a process can take in what the fleet changed.
	StoredSpec Spec
}

// Error names the rule, the key and both limits.
func (e *MismatchError) Error() string {
	return fmt.Sprintf("%v: rule %q key %q: this process has %s, Redis has %s (every process must build it with the same limit; SetLimit changes it for all)",
		ErrLimitMismatch, clipName(e.Rule), clipName(e.Key), e.Have, e.Stored)
}

// Unwrap returns ErrLimitMismatch.
func (e *MismatchError) Unwrap() error { return ErrLimitMismatch }

// clipName shortens a caller's string for an error message.
func clipName(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// ErrNotInFlight is matched by Release, Extend and Cancel for a token the
// server does not know (lost with a restart, or its lease ran out).
var ErrNotInFlight = errors.New("ratesem: call not in flight in Redis")

// DefaultLease is the default of Options.Lease.
const DefaultLease = time.Minute

// Decision is the answer of Admit.
type Decision struct {
	// OK reports that every charge was admitted, atomically.
	OK bool
	// Token names the call when OK; Release, Extend and Cancel take it.
	Token string
	// Leased reports that the call holds a lease in some limiter (a
	// completion window, a fixed completion window, a concurrency cap):
	// only then does Release change anything in Redis.
	Leased bool
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
	// Lost reports that a limiter's state was found lost (part of its
	// keys evicted or deleted) and is held full for the time it forgets.
	// A lost hash is found at once; a lost set of leases or log while the
	// hash remains, at the next full sweep (at most a second later, or at
	// the first refusal): until then the counts the hash keeps, which
	// bound the state from above, decide. A whole loss of a scope's state
	// (FLUSHALL, a restart without persistence, a failover to an empty
	// replica) is found by a process that saw the scope's state within
	// the TTL of its keys: every limiter of the scope then counts as full
	// at the instant it was found, for one Per (see internal/rstore).
	Lost bool
	// Late reports that the admission reached Redis after the instant its
	// caller set with WithAnswerBy (as this process reads Redis's clock):
	// nothing was admitted, and Wait is 0. A caller still waiting (its
	// reading of the clock was off) may ask again at once.
	Late bool
	// Adopted lists the indices of charges whose stored Spec (written by
	// SetLimit) replaced the caller's.
	Adopted []int
	// AdoptedSpecs holds, for each index of Adopted (same order), the
	// stored Spec the charge was decided under: a process learns there a
	// limit another process wrote (a learned limit, SetLimit). Its
	// entries are the zero Spec when the stored one is unreadable.
	AdoptedSpecs []Spec
	// Marks, when OK, holds for each charge of a fixed completion window
	// (by index; "" for the others) its admission's mark, which
	// ReconcileAt takes with the count read from the call's response.
	Marks []string
}

// answerByKey is the context key of WithAnswerBy.
type answerByKey struct{}

// WithAnswerBy returns a copy of ctx that tells Store.Admit the instant t,
// on this process's clock, after which nobody waits for its answer: an
// admission that reaches Redis later (a Redis frozen by DEBUG SLEEP or
// SIGSTOP runs the scripts sent to it when it wakes, long after their
// callers left) is refused there (Decision.Late) rather than hold units
// until its lease runs out. t is read against Redis's clock as this
// process last measured it, with a margin for that reading's error (see
// internal/rstore). ctx's own deadline is not used for this: it bounds the
// round trip, which may need longer (a NOSCRIPT answered by an EVAL).
func WithAnswerBy(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, answerByKey{}, t)
}

// AnswerBy returns the instant WithAnswerBy put in ctx, if any.
func AnswerBy(ctx context.Context) (time.Time, bool) {
	t, ok := ctx.Value(answerByKey{}).(time.Time)
	return t, ok
}

// Read says where a server's count comes from: the response of a call.
type Read struct {
	// Seen is when the response was read, on Redis's clock; zero when not
	// known.
	Seen time.Time
	// Mark is the call's Decision.Marks entry for the charge ("" when
	// none), and Weight its weight in that charge.
	Mark   string
	Weight int64
}

// Opener opens the stores of one Redis (internal/rstore.NewOpener): what
// internal/rstore and internal/engine share to open Redis stores without
// importing each other's internals.
type Opener struct {
	// Open returns the store of the keys under prefix, whose calls in
	// flight hold leases of lease (0: DefaultLease). It does not
	// talk to Redis.
	Open func(prefix string, lease time.Duration) (Store, error)
	// Check makes one round trip, waiting at most timeout: it returns an
	// error matching ratesem.ErrUnavailable when Redis does not answer,
	// ratesem.ErrLimitMismatch when a limiter of cs (in scope, under
	// prefix) stores a limit other than its charge's Spec (one SetLimit
	// wrote is adopted: no error), and, when eviction is set,
	// ratesem.ErrEviction when the server's maxmemory-policy lets it evict
	// keys (not checked when the server forbids CONFIG); nil otherwise. The
	// caller adds what to do to the message.
	Check func(timeout time.Duration, prefix, scope string, cs []Charge, eviction bool) error
}

// Store is the bookkeeping a waiting engine runs on: every method is one
// round trip to the shared store (internal/rstore.Store over Redis), never
// waits, queues or sleeps, and is safe for concurrent use. See
// internal/rstore for what each does.
type Store interface {
	Admit(ctx context.Context, scope string, cs []Charge) (Decision, error)
	Release(ctx context.Context, scope string, cs []Charge, token string) error
	// Settle is Release for a call whose weights are known only after it
	// ended: charge i (admitted for cs[i].Weight units, the estimate)
	// ends having cost actual[i] units, one per charge in charge order
	// (len(actual) == len(cs)); actual[i] == cs[i].Weight is a plain
	// release of that charge, a negative actual[i] counts as 0 and one
	// above MaxN as MaxN. See internal/rstore's Store.Settle.
	Settle(ctx context.Context, scope string, cs []Charge, token string, actual []int64) error
	Cancel(ctx context.Context, scope string, cs []Charge, token string) error
	Pause(ctx context.Context, scope string, c Charge, d time.Duration) (time.Time, error)
	ReconcileAt(ctx context.Context, scope string, c Charge, used int64, r Read) (int64, error)
	SetLimit(ctx context.Context, scope string, c Charge) error
	// Budget takes in a server's report of a Quota limiter's budget:
	// remaining units in the server's window, which ends resetIn from
	// now; own is the units of the reporting call when it is still in
	// flight and leased (0 otherwise), tok its Decision's Token (own
	// counts only while that lease is still held: its release may reach
	// the store first). It returns the units taken in (negative when a
	// new window raised the budget). See internal/rstore's Store.Budget.
	Budget(ctx context.Context, scope string, c Charge, remaining int64, resetIn time.Duration, own int64, tok string) (int64, error)
	// Carry records a call a process's local fallback admitted while the
	// store was unreachable, now, whatever the windows hold (it refuses
	// nothing but a late carry): a call in flight (ended false) as admitted now, under the
	// Decision's Token, which Release, Settle and Cancel take; one that
	// has ended as admitted and ended now. Charges of weight 0 change
	// nothing. A carry that reaches the store after the instant of
	// WithAnswerBy in ctx changes nothing (Decision.Late). See
	// internal/rstore's Store.Carry.
	Carry(ctx context.Context, scope string, cs []Charge, ended bool) (Decision, error)
}

// End is the end of an admitted call for the Pipe of internal/rstore: a
// Release (Actual nil) or a Settle (one actual weight per charge) of the
// call of Token, admitted in Scope for Charges. It lives here, not in
// rstore, so that internal/remote needs no go-redis import.
type End struct {
	Scope   string
	Charges []Charge
	Token   string
	Actual  []int64
}
