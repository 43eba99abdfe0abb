// Package remote is the bookkeeping over Redis (internal/rstore) of the
// one waiting engine, internal/engine: a clientpool.Pool built with
// redisrate.Shared and a semaphore.RateSemaphore built with
// redisrate.NewSemaphore queue, wait and order their callers there, and
// come here for each decision, while the counts live in Redis and are
// shared by every process.
//
// # One decision
//
// Decide is the one step: one admission decision for a call's charges
// (what this process knows, the fallback while Redis is taken as
// unreachable, or one round trip), which never waits for room and answers
// with the admitted Call, the instant the call could be admitted, or "only
// a release can help" (Outcome). The engine asks it for the head of its
// queues, outside its lock, and learns from Config.OnRoom when a release
// of this process reached Redis. Concurrent Decide calls of one scope
// share round trips, and releases ride along (# Round trips).
//
// # Asking again
//
// A refusal names the instant to ask again, never sooner than MinRetry
// after the decision, so nothing polls in a loop even if Redis says 0. This
// process remembers it: until then no call of that weight or more on the
// limiter is sent to Redis (Decide answers at once). When only a release
// elsewhere can make room (rspec.Decision.Release: the wait Redis gives
// runs to the end of the leases of the calls in flight, a minute by
// default), the caller asks again within ReleaseRetry (a quarter of the
// refusing rule's Per), or when a release of this process on that limiter
// reached Redis (Config.OnRoom): under the completion window a release
// never makes room at once (its units count until its end + Per), so a
// head re-asking Per/4 after a release elsewhere learns the exact wait
// with three quarters of Per to spare; the cost is at most four round
// trips per Per per process while calls in flight fill the limit. The
// other choice, a pub/sub message published by every release, would cost
// every process a round trip per release elsewhere, a connection and a
// goroutine per engine, and messages are lost across reconnections, so a
// cap would be needed anyway.
//
// # Round trips
//
// Over a Store that can send several commands in one round trip
// (internal/rstore's Store.Pipe), Decide's admissions of one scope share
// round trips, group-commit style: a caller that finds no round trip of
// its scope under way starts one, which carries every admission of the
// scope queued so far (up to 64, in arrival order; each decided in Redis
// on its own, all or nothing, seeing the ones before it), and the callers
// that arrive while it is under way queue and go out together in the next,
// sent as soon as it returns or its Timeout passes: nobody waits behind
// more than one round trip plus its own. A caller this process can answer
// alone (a pause, a remembered refusal) is answered without a round trip,
// also when its turn comes in the queue. The round trips of a scope run on
// one goroutine (while the scope is busy), not one per admission; each
// caller waits for its own answer at most until the round trip's Timeout,
// until its ctx is done or Close is called: one that leaves while queued is
// never sent; one that leaves while its round trip is under way gets its
// admission cancelled when the answer comes. Over another Store (the
// engine's fakes), every admission runs on a goroutine of its own, and its
// caller waits for it at most Config.Timeout (and until ctx is done).
//
// Either way a caller waits whatever the options of the go-redis client:
// one built without ContextTimeoutEnabled ignores contexts' deadlines
// while it waits for a reply. An admission whose caller left is cancelled
// in Redis when its answer comes; one that reaches Redis after its caller
// stopped waiting (the end of Timeout, or ctx's deadline if sooner) is
// refused there (rspec.WithAnswerBy): a Redis that wakes from a freeze
// runs what was sent to it meanwhile, and nobody would read the answers to
// cancel them.
//
// A Release never makes its caller wait on Redis: it goes to a bounded
// queue (Config.ReleaseQueue). The next admission round trip of this
// process (of any scope) takes the releases queued when it leaves (up to
// 64), and sends them first in the same round trip, so its admissions see
// the room they made; a few background workers send the others, each round
// trip carrying every release queued when it leaves (up to 64); a worker
// that takes releases while an admission round trip of this process is
// under way holds them for the next one to leave, and sends them itself
// when one comes back and none took them. There is no timed delay: a
// release waits at most for one admission round trip under way (bounded by
// Timeout), or for one round trip of a busy worker (if all are busy:
// bounded by Timeout and a grace of 5 s when Redis stalls), before its
// own. A release that
// cannot be sent (the queue full, a Redis error, Close) is dropped and
// counted; the lease covers it: the call's units come back when the lease
// runs out.
//
// # When Redis is unreachable
//
// A round trip that fails (a Redis error, or no answer within Timeout)
// marks Redis unreachable. Admissions then go to Config.Fallback, or fail
// with an error matching ErrUnavailable at once, until a probe gets an
// answer: the next admission attempt 100 ms after the failure, then
// after twice as long each time it fails again, up to one second; a probe
// is bounded by 250 ms (or Timeout if shorter).
//
// # The fallback and Redis
//
// The calls the fallback admits are remembered until they stop counting
// (keepFor: Per after their end, for most windows). While there are any, a
// prober probes Redis every 100 to 200 ms even when no caller asks, and the
// first round trip that reaches Redis carries them there (rspec.Store.Carry:
// recorded whatever the windows hold, those in flight as calls in flight
// whose release then goes to Redis, the others as ended at the carry), before
// any admission of this process. Callers waiting on the fallback go to Redis
// as soon as it answers. Until the fallback's window has drained (its calls
// ended and stopped counting), a call needs room in the fallback too (the
// gate): processes reach Redis again each at its own probe, so until every
// one has carried its calls, Redis does not know them all, and each process
// keeping to its share covers that time.
//
// # Blocks
//
// With Config.Blocks (off by default), a Decide whose charges are all of
// completion windows takes its call from a block: one admission in Redis
// of k calls of its signature (scope, rules, keys, weights, specs), made
// through the batched path like any other, whose calls this process hands
// out with no round trip (callers of the signature arriving while a block
// is fetched wait for it). A block hands out calls until its k are taken
// or its hold (Config.BlockHold) ends; it goes back to Redis once it hands
// out no more and every call taken from it has ended, settled to the units
// those calls used (a call settled by ReleaseSettled counts its actual
// weights): so Redis counts them in flight from the block's admission and
// ended at its return, after their own ends, exact on the safe side. When
// Redis refuses a block (the limit is near), the calls are decided one by
// one at once, and no block of the signature is asked for a hold. Blocks
// are not used while Redis is taken as unreachable or the fallback's
// window drains; a block admitted before counts in Redis as the calls in
// flight do. A block's own admission is not counted in Stats (RedisAdmits
// counts its round trip); the calls taken from it are.
package remote

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/backoff"
	"github.com/ratesem/ratesem/internal/rspec"
)

// ErrUnavailable is matched by the error Decide returns when Redis cannot
// be reached (no answer within Config.Timeout, or a Redis error) and there is
// no fallback; it wraps the Redis error.
var ErrUnavailable = ratesem.ErrUnavailable

// ErrClosed is returned by Decide after Close.
var ErrClosed = ratesem.ErrClosed

const (
	probeMin     = 100 * time.Millisecond // first probe after a failure
	probeMax     = time.Second            // the longest time between probes
	probeTimeout = 250 * time.Millisecond // bound of a probe's round trip
	// carryProbeMax is the longest time between probes while the fallback
	// has calls to carry into Redis.
	carryProbeMax = 200 * time.Millisecond
	zeroPerCap    = 10 * time.Millisecond // the release-wait cap of a rule without Per

	// MinRetry is the least a head sleeps before asking Redis again after
	// a refusal, whatever the wait Redis gave: a uniform draw in
	// [MinRetry, 2·MinRetry), so a head asks at most 1000 times a second
	// even if Redis says 0 (Config.Jitter comes on top).
	MinRetry = time.Millisecond

	// maxPending bounds the round trips of one Engine left running without
	// an answer (their callers gone after Timeout), pauses and reconciles
	// included: beyond it a round trip fails at once rather than start
	// another goroutine.
	maxPending = 1024

	// lateGrace is how much longer than its caller waits a round trip left
	// behind may take before its own context gives up (go-redis needs a
	// live context for the EVAL that follows a NOSCRIPT).
	lateGrace = 5 * time.Second

	// releaseWorkers is the number of goroutines sending releases
	// (counted among maxPending).
	releaseWorkers = 4
)

// DefaultTimeout, DefaultJitter and DefaultReleaseQueue are the defaults
// of Config's fields of the same names.
const (
	DefaultTimeout      = time.Second
	DefaultJitter       = 5 * time.Millisecond
	DefaultReleaseQueue = 4096
)

// errBusy is the failure of a round trip refused because maxPending round
// trips already wait for Redis.
var errBusy = errors.New("too many round trips to Redis without an answer")

// errTry is the internal refusal of the fallback (no room at once).
var errTry = errors.New("ratesem: not admitted at once")

// Internal outcomes of the fallback's paths: a carry under way did not
// end in time (errCarryBusy, taken as Redis not answering); Redis ran a
// carry after its deadline, changing nothing (errCarryLate, taken as Redis
// not answering).
var (
	errCarryBusy = errors.New("carrying the fallback's calls into Redis took too long")
	errCarryLate = errors.New("the carry of the fallback's calls reached Redis after its deadline")
)

// Config configures an Engine. Zero fields take their defaults.
type Config struct {
	// Store keeps the counts (internal/rspec.Store over Redis; a fake in
	// the engine's tests). Required.
	Store rspec.Store
	// Timeout bounds every round trip; default DefaultTimeout (1 s).
	Timeout time.Duration
	// Jitter is the most random time added to a sleep the script asked
	// for (a uniform draw in [0, Jitter], and never more than a tenth of
	// the wait); default DefaultJitter (5 ms); negative: no jitter.
	Jitter time.Duration
	// MaxPause caps any pause; default backoff.DefaultMaxPause.
	MaxPause time.Duration

	// Fallback, when set, admits calls in this process alone while Redis
	// is unreachable; nil: Decide fails with ErrUnavailable then.
	Fallback Fallback
	// ReleaseQueue is how many releases may wait to be sent to Redis;
	// default DefaultReleaseQueue. A release beyond it is dropped (the
	// lease covers it) and counted in Stats.ReleasesDropped.
	ReleaseQueue int

	// OnRoom, when set, is called when something this process did may
	// have made room in Redis on the limiters of cs: a release or
	// settlement of a call reached Redis (cs: the call's charges; also
	// when Redis no longer knew the call), a usage report gave units
	// back (ReconcileAtThen, or BudgetThen on a new window; cs: that charge), SetLimit stored a new limit
	// (cs: that charge). It is how a caller queueing its own waiters
	// over Decide learns when to ask again. It is called outside any lock, on a goroutine of the engine
	// (a release worker, a round trip's), and must not block.
	OnRoom func(scope string, cs []rspec.Charge)

	// Blocks, when ≥ 2, turns blocks on (off by default, 0): a Decide
	// whose charges are all of completion windows (rspec.Completion,
	// FixedCompletion) takes its call from a block of Blocks calls of
	// its signature (scope, rules, keys, weights, specs) that this
	// process took from Redis in one admission, with no round trip of
	// its own (fewer calls when a charge's capacity cannot take
	// Blocks·Weight units). A block hands out calls for BlockHold at
	// most (under a fixed completion window, only within the window it
	// was admitted in: its calls carry its mark), and goes back to Redis
	// (settled to the units its calls used) once it hands out no more and its calls have ended: Redis counts
	// its used units in flight from its admission to its return, and as
	// ended then (exact on the safe side). Other windows count starts:
	// their calls bypass blocks. The trade: a process holds up to Blocks
	// calls it may not use for up to BlockHold (other processes wait for
	// them meanwhile; until the last call of the block ends, when one
	// outlasts the hold); a process that dies holds its block until the
	// lease ends, as any call; a block's calls count in Redis until the
	// block's lease runs out at the latest, a lease after the block's
	// admission, not theirs; a loss of Redis's state loses the blocks,
	// and their calls taken after it (until the hold ends, or an
	// admission of the scope reports the loss: the scope's blocks stop
	// then) are not counted there; a pause or a refusal stored by another
	// process reaches this one's block calls within BlockHold. While
	// Redis is taken as unreachable (or the fallback's window drains) no
	// block is used: calls go the ordinary way; a block admitted before
	// keeps counting in Redis as the calls in flight do, and goes back
	// when Redis answers (or its lease ends). Blocks are given back at
	// Close (those with calls in flight then: dropped, the lease covers
	// them). New refuses 1 and a negative value.
	Blocks int64
	// BlockHold is how long a block hands out calls (required, > 0,
	// when Blocks is set; at most the Redis lease, which the caller checks).
	BlockHold time.Duration

	// TestAfterAdmit, when set, runs after Redis admitted a call and
	// before the caller's context is checked (tests only).
	TestAfterAdmit func()
}

// Fallback admits calls in this process alone while Redis is unreachable
// (Config.Fallback). Its methods are called concurrently.
type Fallback interface {
	// TryAcquire admits the charges locally if they fit at once; it
	// returns a (non-nil) function that releases them, called once (also for a
	// call ended by Call.ReleaseSettled: the fallback counts the
	// estimate, on the safe side only when the call cost no more).
	TryAcquire(scope string, cs []rspec.Charge) (release func(), ok bool)
	// Pause holds local admissions of c's limiter until until.
	Pause(scope string, c rspec.Charge, until time.Time)
}

// Stats are the engine's counters for this process.
type Stats struct {
	InFlight        int64  // calls admitted, not yet released
	Admitted        uint64 // calls admitted (by Redis or the fallback)
	PausedUntil     time.Time
	RedisAdmits     uint64 // admission round trips
	RedisErrors     uint64 // failed round trips of any kind
	Cancelled       uint64 // admissions taken back because the caller left
	ReleasesFailed  uint64 // releases that could not reach Redis (the lease covers them)
	ReleasesLost    uint64 // releases of calls Redis no longer knew
	StateLost       uint64 // admissions that found state lost
	LimitMismatches uint64
	Unavailable     bool

	FallbackAdmitted uint64 // calls of Admitted that the fallback admitted
	CancelsFailed    uint64 // cancellations that could not reach Redis (the lease covers them)
	ReleasesDropped  uint64 // releases never sent: the queue was full, or Close came (the lease covers them)
	Recoveries       uint64 // times Redis answered again after being taken as unreachable
	Carried          uint64 // calls of the fallback written into Redis when it answered again
}

// limKey names a limiter.
type limKey struct{ scope, rule, key string }

// limiter is this process's view of one limiter: what it learned from
// Redis.
type limiter struct {
	paused time.Time // no admission before (a local or Redis pause); zero: none

	// The latest exact refusal: no charge of notBeforeN units or more can
	// be admitted before notBefore (only a Cancel, a restart or SetLimit
	// could make room sooner). A new head uses it rather than asking again.
	notBefore  time.Time
	notBeforeN int64

	// The latest forget (forgetByLocked): its number (Engine.forgets) and
	// the round trip whose releases made it (nil: another's). A refusal
	// Redis made before it is not learned after it (staleLocked).
	forgot   uint64
	forgotBy *trip
}

// waiter is one decision in progress (Decide, DecideAll).
type waiter struct {
	scope string
	cs    []rspec.Charge
	local func() // the fallback's units held by the gate (Engine.gatedLocked), or nil
	block bool   // a block's admission (viaBlock): never decided by the fallback
	epoch uint64 // Engine.forgets when its latest round trip was sent (staleLocked)
	trip  *trip  // that round trip, when it went with releases (join); nil: ask
}

// Engine waits for admissions decided in Redis. It is safe for concurrent
// use. Close it when done; it does not close the Redis client.
type Engine struct {
	st  rspec.Store
	cfg Config
	ad  adapts // adaptive reports not yet sent (adapt.go)

	closeCtx context.Context // done after Close
	closeFn  context.CancelFunc
	flushCtx context.Context // done when Close gives up on queued releases
	flushFn  context.CancelFunc
	rel      chan *Call // the release queue

	mu        sync.Mutex
	closed    bool
	lims      map[limKey]*limiter // what this process learned of each limiter (limLocked)
	sweepAt   int                 // len(lims) at which limLocked forgets the limiters that teach nothing
	forgets   uint64              // the forgets so far (forgetByLocked): numbers them
	sweptFor  uint64              // the latest forget of a limiter limLocked dropped
	down      bool                // Redis taken as unreachable
	downErr   error
	nextProbe time.Time
	backoff   time.Duration
	stats     Stats // counters and gauges; Unavailable is filled in by Stats

	// The fallback's calls (Config.Fallback) and their hand-over to Redis.
	recs     []*carryRec   // the fallback's calls not yet carried into Redis: in flight, or ended within their keep
	carryTok chan struct{} // holds a token while a carry runs
	fbLive   int           // the fallback's calls in flight
	fbDrain  time.Time     // the latest end + keep of the fallback's calls
	probing  bool          // the prober runs

	// Goroutines still running (pending: round trips, the release
	// workers, the prober) and decisions in progress (active); Close
	// waits until both are 0 (drained is closed then), for a bounded
	// time.
	pending, active int
	drained         chan struct{}

	bq     map[string]*scopeQ // the admissions queued per scope (join)
	flying int                // admission round trips under way (join)
	riders []*Call            // releases held for the next admission round trip (ride)
	landed chan struct{}      // closed when an admission round trip is back (ride)

	blocks       map[string]*blockSig // the blocks per signature (Config.Blocks)
	blockSweepAt int                  // len(blocks) at which viaBlock forgets the signatures that hold nothing
}

// New returns an Engine over cfg.Store. It fails for a nil Store or a
// negative Timeout, ReleaseQueue or MaxPause. It starts the release
// workers, which Close stops.
func New(cfg Config) (*Engine, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("ratesem: New: nil Store")
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("ratesem: New: negative Timeout %v", cfg.Timeout)
	case cfg.ReleaseQueue < 0:
		return nil, fmt.Errorf("ratesem: New: negative ReleaseQueue %d", cfg.ReleaseQueue)
	case cfg.MaxPause < 0:
		return nil, fmt.Errorf("ratesem: New: negative MaxPause %v", cfg.MaxPause)
	case cfg.Blocks < 0 || cfg.Blocks == 1:
		return nil, fmt.Errorf("ratesem: New: Blocks %d: want 0 (off) or at least 2 calls", cfg.Blocks)
	case cfg.Blocks > 0 && cfg.BlockHold <= 0:
		return nil, fmt.Errorf("ratesem: New: BlockHold %v: want a positive hold with Blocks", cfg.BlockHold)
	}
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	cfg.Jitter = cmp.Or(cfg.Jitter, DefaultJitter)
	cfg.MaxPause = backoff.Cap(cfg.MaxPause)
	cfg.ReleaseQueue = cmp.Or(cfg.ReleaseQueue, DefaultReleaseQueue)
	e := &Engine{st: cfg.Store, cfg: cfg, lims: map[limKey]*limiter{}, rel: make(chan *Call, cfg.ReleaseQueue), carryTok: make(chan struct{}, 1)}
	e.closeCtx, e.closeFn = context.WithCancel(context.Background())
	e.flushCtx, e.flushFn = context.WithCancel(context.Background())
	e.mu.Lock()
	defer e.mu.Unlock()
	for range releaseWorkers {
		e.spawnLocked(e.releaser)
	}
	return e, nil
}

// Call is an admitted call: Release it exactly once.
type Call struct {
	e     *Engine
	scope string
	cs    []rspec.Charge
	token string    // Redis's; "" for a call of no charges or of the fallback
	local func()    // the fallback's release, or nil
	fb    bool      // the fallback admitted it (Redis was unreachable)
	rec   *carryRec // while the fallback's call is in flight and not yet carried into Redis
	done  atomic.Bool
	d     rspec.Decision // Redis's admission (Now, Marks, Adopted, AdoptedSpecs); zero for the fallback
	seen  time.Time      // this process's clock when the admission came back
	// actual holds the settled weights of ReleaseSettled (one per charge),
	// nil for a plain Release; written before the call is queued.
	actual []int64
	// sent, when set (OnSent), is called once the release has been sent
	// to Redis, failed, or was dropped; at once for a call not in Redis.
	sent func()
	// blk is the block a sub-call was taken from (its release ends it
	// locally); isBlock marks a block's own admission (not counted in
	// Stats: its sub-calls are).
	blk     *block
	isBlock bool
}

// Adopted returns the indices of the charges Redis decided under a limit
// stored there (SetLimit, a learned limit replacing rspec.Unknown) rather
// than the caller's, and those limits, in the same order
// (rspec.Decision.Adopted and AdoptedSpecs). Both are nil for a
// call the fallback admitted. The caller must not change them.
func (c *Call) Adopted() ([]int, []rspec.Spec) { return c.d.Adopted, c.d.AdoptedSpecs }

// Token returns the call's Token in Redis ("" for a call of no charges or
// of the fallback, until it is carried). It never blocks long (the
// engine's lock) and is safe for concurrent use.
func (c *Call) Token() string {
	if c.e == nil {
		return c.token
	}
	c.e.mu.Lock()
	defer c.e.mu.Unlock()
	return c.token
}

// OnSent sets f to be called, once and outside any lock of the engine,
// when the release (or settlement) of c has been sent to Redis, failed
// or was dropped, or at the release of a call Redis does not hold (the
// fallback's, one of no charges; a call of a block: at once, or, when its
// end gives the block back, once the block's return is sent). It must be
// called before the release;
// f must not block.
func (c *Call) OnSent(f func()) { c.sent = f }

// Mark returns the admission's mark for charge i (rspec.Decision.Marks),
// "" when it has none.
func (c *Call) Mark(i int) string {
	if i < 0 || i >= len(c.d.Marks) {
		return ""
	}
	return c.d.Marks[i]
}

// Admitted returns the instant Redis admitted the call, on the server's
// clock, and this process's clock reading when the answer came back (with
// its monotonic reading): Redis's clock now is about at + time.Since(seen).
// Both are zero for a call the fallback admitted.
func (c *Call) Admitted() (at, seen time.Time) { return c.d.Now, c.seen }

// Local reports whether the fallback admitted the call (Redis was
// unreachable).
func (c *Call) Local() bool { return c.fb }

// capacity is rspec.Spec.Capacity (the engine's tests replace it).
var capacity = rspec.Spec.Capacity

func checkCharges(cs []rspec.Charge) error {
	for i, c := range cs {
		if c.Weight < 0 {
			return fmt.Errorf("%w %d: charge %d (rule %q)", ratesem.ErrNegativeWeight, c.Weight, i, c.Rule)
		}
		if c.Spec == nil {
			return fmt.Errorf("ratesem: charge %d (%s): nil Spec", i, c.Rule)
		}
		if capa := capacity(*c.Spec); c.Weight > capa {
			return fmt.Errorf("%w: charge %d (%s): weight %d, capacity %d", ratesem.ErrWeightTooLarge, i, c.Rule, c.Weight, capa)
		}
	}
	return nil
}

// checkDrainedLocked closes drained once no round trip and no decision is
// in progress. e.mu must be held.
func (e *Engine) checkDrainedLocked() {
	if e.pending == 0 && e.active == 0 && e.drained != nil {
		close(e.drained)
		e.drained = nil
	}
}

// callerError reports whether an Admit error is the caller's mistake
// rather than Redis being unreachable.
func callerError(err error) bool {
	return errors.Is(err, rspec.ErrLimitMismatch) || errors.Is(err, ratesem.ErrWeightTooLarge) ||
		errors.Is(err, ratesem.ErrInvalidLimit) || errors.Is(err, ratesem.ErrNegativeWeight)
}

// spawnLocked runs op on a goroutine of its own, counted in pending; it
// returns false, starting nothing, when maxPending round trips are
// running. e.mu must be held.
func (e *Engine) spawnLocked(op func()) bool {
	if e.pending >= maxPending {
		return false
	}
	e.pending++
	go func() {
		defer func() {
			e.mu.Lock()
			e.pending--
			e.checkDrainedLocked()
			e.mu.Unlock()
		}()
		op()
	}()
	return true
}

// bounded runs op, one round trip, on a goroutine of its own (spawnLocked)
// under a context with timeout d + lateGrace, and waits for it at most d,
// until ctx is done or closing is (nil: never): a client that ignores the
// context's deadline cannot hold the caller longer. It returns op's
// result; or, when it left first, left: context.DeadlineExceeded,
// ctx.Err() or ErrClosed, and the round trip goes on, its result passed to
// late when not nil; or left errBusy, starting nothing, when maxPending
// round trips are running.
func bounded[T any](e *Engine, ctx context.Context, d time.Duration, closing <-chan struct{}, op func(context.Context) T, late func(T)) (r T, left error) {
	ch := make(chan T, 1)
	claimed := new(atomic.Bool)
	e.mu.Lock()
	started := e.spawnLocked(func() {
		octx, cancel := context.WithTimeout(context.Background(), d+lateGrace)
		r := op(octx)
		cancel()
		if claimed.CompareAndSwap(false, true) {
			ch <- r
		} else if late != nil {
			late(r)
		}
	})
	e.mu.Unlock()
	if !started {
		return r, errBusy
	}
	select {
	case r = <-ch:
		return r, nil
	case <-time.After(d):
		left = context.DeadlineExceeded
	case <-ctx.Done():
		left = ctx.Err()
	case <-closing:
		left = ErrClosed
	}
	if !claimed.CompareAndSwap(false, true) {
		return <-ch, nil // the answer is in: the caller deals with it
	}
	return r, left
}

// FallbackChecker is a Fallback that can refuse a call for good (one it
// could never admit, heavier than its share): Decide returns Check's error
// rather than a refusal of the fallback to ask again.
type FallbackChecker interface {
	Check(scope string, cs []rspec.Charge) error
}

// fbTry admits w's charges in the fallback at once, or fails: errTry when
// it has no room now, the error of a FallbackChecker for a call it could
// never admit. It returns the release.
func (e *Engine) fbTry(w *waiter) (func(), error) {
	fb := e.cfg.Fallback
	if c, ok := fb.(FallbackChecker); ok {
		if err := c.Check(w.scope, w.cs); err != nil {
			return nil, err
		}
	}
	r, ok := fb.TryAcquire(w.scope, w.cs)
	if !ok {
		return nil, errTry
	}
	return r, nil
}

// gatedLocked reports whether calls must also be admitted by the fallback:
// a call of the fallback is in flight, or one ended within the time it
// counts (keepFor). e.mu must be held.
func (e *Engine) gatedLocked(now time.Time) bool {
	return e.cfg.Fallback != nil && (e.fbLive > 0 || now.Before(e.fbDrain))
}

// keepFor is how long after its end a call of charges cs may still count
// in one of their windows: Per (plus the margin of a sliding log; twice Per
// for a sliding window counter, which weighs the previous window; the
// time a bucket takes to refill its burst when it exceeds N).
func keepFor(cs []rspec.Charge) time.Duration {
	var k time.Duration
	for _, c := range cs {
		sp := c.Spec
		if sp == nil {
			continue
		}
		d := sp.Limit.Per
		switch sp.Kind {
		case rspec.SlidingLog:
			d += sp.Margin
		case rspec.SlidingWindowCounter:
			d *= 2
		case rspec.TokenBucket, rspec.LeakyBucket, rspec.GCRA:
			if sp.Burst > sp.Limit.N && sp.Limit.N > 0 {
				d = time.Duration(min(float64(d)*float64(sp.Burst)/float64(sp.Limit.N), float64(2*rspec.MaxPer)))
			}
		}
		k = max(k, d)
	}
	return k
}

// carryRec is a call the fallback admitted, until it is carried into
// Redis or has stopped counting.
type carryRec struct {
	c    *Call
	end  time.Time // when it ended; zero while in flight
	done bool      // carried (or dropped: Redis refused its spec)
}

// pruneRecsLocked forgets the fallback's calls carried or no longer
// counting. e.mu must be held.
func (e *Engine) pruneRecsLocked(now time.Time) {
	e.recs = slices.DeleteFunc(e.recs, func(r *carryRec) bool {
		return r.done || (!r.end.IsZero() && !now.Before(r.end.Add(keepFor(r.c.cs))))
	})
}

// carry writes the fallback's calls into Redis (rspec.Store.Carry) before
// this process's next admission there: those in flight as calls in flight,
// whose release then goes to Redis, those that ended within their keep as
// ended now. One carry runs at a time, each round trip bounded by timeout;
// a caller finding one under way waits for it (at most timeout: then
// errCarryBusy). It returns nil when nothing is left to carry; sent
// reports that a carry reached Redis.
func (e *Engine) carry(ctx context.Context, timeout time.Duration) (sent bool, err error) {
	if e.cfg.Fallback == nil {
		return false, nil
	}
	for range 3 {
		e.mu.Lock()
		e.pruneRecsLocked(time.Now())
		n := len(e.recs)
		e.mu.Unlock()
		if n == 0 {
			return sent, nil
		}
		select { // one carry at a time (carryTok): wait for the one under way
		case e.carryTok <- struct{}{}:
		case <-time.After(timeout):
			return sent, errCarryBusy
		case <-ctx.Done():
			return sent, ctx.Err()
		case <-e.closeCtx.Done():
			return sent, ErrClosed
		}
		e.mu.Lock()
		batch := slices.Clone(e.recs) // what another's carry left, if it ran
		e.mu.Unlock()
		// Nobody waits for the carry after by: Redis refuses it if it runs
		// later (a Redis frozen meanwhile would run it when it wakes, and
		// leave leases nobody releases; the calls are carried again).
		by := time.Now().Add(timeout)
		err, left := bounded(e, ctx, timeout, e.closeCtx.Done(), func(octx context.Context) error {
			defer func() { <-e.carryTok }()
			return e.carryBatch(rspec.WithAnswerBy(octx, by), batch)
		}, nil)
		if err = cmp.Or(left, err); err == errBusy {
			<-e.carryTok // it never started
		}
		if err != nil {
			return sent, err
		}
		sent = true
	}
	return sent, nil
}

// carryBatch carries batch into Redis: each call in flight by a round trip
// of its own (its Call then ends in Redis too), the calls that ended by one
// round trip per limiter (their units summed, in chunks of at most the
// limiter's capacity). A call whose spec Redis refuses is dropped (the
// gate still holds the fallback's window for it).
func (e *Engine) carryBatch(ctx context.Context, batch []*carryRec) error {
	var (
		sums  = map[limKey]rspec.Charge{} // the units of the calls ended, per limiter, under its latest spec
		ended []*carryRec
	)
	for _, r := range batch {
		e.mu.Lock()
		c, over, done := r.c, !r.end.IsZero(), r.done
		e.mu.Unlock()
		if done {
			continue
		}
		if over {
			ended = append(ended, r)
			for _, ch := range c.cs {
				k := limKey{c.scope, ch.Rule, ch.Key}
				ch.Weight += sums[k].Weight
				sums[k] = ch
			}
			continue
		}
		d, err := e.st.Carry(ctx, c.scope, c.cs, false)
		switch {
		case err != nil && !callerError(err):
			return err
		case err == nil && d.Late:
			return errCarryLate
		}
		e.mu.Lock()
		r.done = true
		switch {
		case err != nil:
			e.stats.LimitMismatches++
		case r.end.IsZero(): // still in flight: its release goes to Redis
			c.token, c.rec = d.Token, nil
			e.stats.Carried++
		default: // it ended during the round trip: end it in Redis too
			e.enqueueLocked(&Call{e: e, scope: c.scope, cs: c.cs, token: d.Token})
			e.stats.Carried++
		}
		e.mu.Unlock()
	}
	for k, c := range sums {
		for w, step := c.Weight, capacity(*c.Spec); w > 0 && step > 0; w -= c.Weight {
			c.Weight = min(w, step)
			d, err := e.st.Carry(ctx, k.scope, []rspec.Charge{c}, true)
			if callerError(err) {
				break
			}
			if err != nil {
				return err
			}
			if d.Late {
				// The chunks carried so far count again at the next carry:
				// longer, never less.
				return errCarryLate
			}
		}
	}
	e.mu.Lock()
	for _, r := range ended {
		r.done = true
	}
	e.stats.Carried += uint64(len(ended))
	e.mu.Unlock()
	return nil
}

// prober runs while Redis is taken as unreachable and the fallback has
// calls to carry (hold starts it): it probes Redis on the probe schedule
// (carrying the fallback's calls, which is the probe), so that they reach
// Redis, and the waiters leave the fallback, as soon as it answers, even
// if no caller asks it.
func (e *Engine) prober() {
	for {
		e.mu.Lock()
		now := time.Now()
		e.pruneRecsLocked(now)
		if !e.down || e.closed || len(e.recs) == 0 {
			e.probing = false
			e.mu.Unlock()
			return
		}
		wait := e.nextProbe.Sub(now)
		e.mu.Unlock()
		if wait > 0 {
			select {
			case <-time.After(wait):
			case <-e.closeCtx.Done():
			}
			continue // another caller may have probed meanwhile
		}
		switch sent, err := e.carry(e.closeCtx, probeTimeout); {
		case e.closeCtx.Err() != nil || err == errCarryBusy:
		case err == nil && sent:
			e.markUp()
		case err != nil:
			e.markDown(err, true)
		}
	}
}

// causeError is an error of Redis under a message of its own.
type causeError struct {
	msg string
	err error
}

// Error returns the message.
func (c *causeError) Error() string { return c.msg }

// Unwrap returns the cause, for errors.Is and errors.As.
func (c *causeError) Unwrap() error { return c.err }

// unavailable returns the error matching ErrUnavailable for cause. The
// engine's own round-trip bound becomes an error that does not match
// context.DeadlineExceeded (it is not the caller's deadline, and its
// message does not name one); the "ratesem: " prefixes of another cause's
// message are dropped (the error keeps one, ErrUnavailable's).
func (e *Engine) unavailable(cause error) error {
	if errors.Is(cause, context.DeadlineExceeded) || errors.Is(cause, context.Canceled) {
		cause = fmt.Errorf("no answer from Redis within %v", e.cfg.Timeout)
	} else {
		cause = &causeError{msg: strings.ReplaceAll(cause.Error(), "ratesem: ", ""), err: cause}
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, cause)
}

// hold records an admitted call, or returns ErrClosed, recording nothing,
// once Close was called: no decision admits after Close.
func (e *Engine) hold(c *Call) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrClosed
	}
	if c.isBlock {
		return nil
	}
	e.stats.InFlight++
	e.stats.Admitted++
	if c.fb {
		e.stats.FallbackAdmitted++
		e.fbLive++
		c.rec = &carryRec{c: c}
		e.recs = append(e.recs, c.rec)
		if !e.probing && e.down {
			e.probing = e.spawnLocked(e.prober)
		}
	}
	return nil
}

// Jitter draws the extra sleep to add to a wait of a refused call before
// it asks again: at most Config.Jitter and a tenth of the wait. Safe for
// concurrent use.
func (e *Engine) Jitter(wait time.Duration) time.Duration {
	m := min(e.cfg.Jitter, wait/10)
	if m <= 0 {
		return 0
	}
	return rand.N(m + 1)
}

// markDown records a failed round trip. An admission (probe) pushes the
// next probe back, twice as far each time; other round trips only open the
// circuit if it was closed.
func (e *Engine) markDown(err error, probe bool) {
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stats.RedisErrors++
	e.downErr = err
	if !e.down || probe {
		// While the fallback has calls to carry, the probes stay close:
		// until a process carries them, the others may be told of none.
		top := probeMax
		if len(e.recs) > 0 {
			top = carryProbeMax
		}
		// backoff is 0 while Redis is taken as reachable: probeMin first.
		e.down, e.backoff = true, min(max(2*e.backoff, probeMin), top)
		e.nextProbe = now.Add(e.backoff)
	}
}

// markUp records a round trip that got an answer.
func (e *Engine) markUp() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.down {
		e.down, e.downErr, e.backoff = false, nil, 0
		e.stats.Recoveries++
	}
}

// roundTrip records the outcome of a release, cancellation, pause or
// usage report: an error of the caller's (callerError) or of a call Redis
// no longer knew is an answer.
func (e *Engine) roundTrip(err error) {
	if err != nil && !errors.Is(err, rspec.ErrNotInFlight) && !callerError(err) {
		e.markDown(err, false)
	} else {
		e.markUp()
	}
}

// cancel takes back an admission whose caller gave up, waiting for the
// round trip at most Timeout. inline runs it on the calling goroutine, one
// of the engine's own already counted in pending (a round trip whose
// caller left): it is never refused for too many round trips, when they
// are what a stalled Redis left behind.
func (e *Engine) cancel(scope string, cs []rspec.Charge, token string, inline bool) {
	var err error
	if inline {
		ctx, cancel := context.WithTimeout(context.Background(), e.cfg.Timeout)
		err = e.st.Cancel(ctx, scope, cs, token)
		cancel()
	} else {
		var left error
		err, left = bounded(e, context.Background(), e.cfg.Timeout, nil, func(ctx context.Context) error {
			return e.st.Cancel(ctx, scope, cs, token)
		}, nil)
		err = cmp.Or(left, err)
	}
	e.roundTrip(err)
	e.mu.Lock()
	switch {
	case err == nil:
		e.stats.Cancelled++
	case errors.Is(err, rspec.ErrNotInFlight):
	default:
		e.stats.CancelsFailed++
	}
	e.mu.Unlock()
}

// Release ends the call: its units leave flight in Redis at the release
// (asynchronously; the caller never waits on Redis): the release goes to a
// bounded queue that background workers send, each round trip bounded by
// Config.Timeout. A release dropped (the queue full, after Close) or that
// fails in Redis is counted (Stats.ReleasesDropped, ReleasesFailed) and
// covered by the lease. A call of the fallback is released locally. It
// panics on a second Release.
func (c *Call) Release() { c.ReleaseSettled(nil) }

// ReleaseSettled is Release for a call whose weights are known only after
// it: charge i, admitted for its Weight units (the estimate), really cost
// actual[i] units (one per charge, in charge order; actual[i] == Weight is
// a plain release of that charge, a negative one counts as 0). Redis
// settles the call in the background like a Release (rspec.Store.Settle):
// a refund where the window still counts the call, a debit from the
// settlement on. When every actual[i] equals its Weight, or actual is nil,
// it is Release. A call of the fallback (Local) is released locally with
// its estimate: on the safe side when actual ≤ Weight, and a debit is then
// not counted. The fallback's units (of a call it admitted, or the
// gate's) come back at once, Redis's in the background. It never waits on
// Redis and does not retain actual. It panics on a second release and
// when a non-nil actual's length differs from the number of charges.
func (c *Call) ReleaseSettled(actual []int64) {
	if actual != nil && len(actual) != len(c.cs) {
		panic(fmt.Sprintf("ratesem: ReleaseSettled with %d weights for %d charges", len(actual), len(c.cs)))
	}
	if !c.done.CompareAndSwap(false, true) {
		panic("ratesem: Call released twice")
	}
	if !slices.EqualFunc(actual, c.cs, func(a int64, ch rspec.Charge) bool { return a == ch.Weight }) {
		// Kept whether or not the call is in Redis: a call of the
		// fallback may be carried there until its release.
		c.actual = slices.Clone(actual) // nil for a plain Release
	}
	e := c.e
	if c.blk != nil {
		e.endSub(c, actual)
		return
	}
	e.mu.Lock()
	e.stats.InFlight--
	if c.fb {
		now := time.Now()
		e.fbLive--
		if d := now.Add(keepFor(c.cs)); d.After(e.fbDrain) {
			e.fbDrain = d
		}
		if r := c.rec; r != nil { // not carried yet: carried as ended
			r.end = now
			c.rec = nil
		}
	}
	queued := c.token != "" && e.enqueueLocked(c)
	e.mu.Unlock()
	if c.local != nil {
		c.local()
	}
	if !queued && c.sent != nil {
		c.sent()
	}
}

// enqueueLocked queues c's release (or settlement) for the workers, or
// counts it dropped (the queue full, or Close called) and returns false.
// e.mu must be held.
func (e *Engine) enqueueLocked(c *Call) bool {
	if !e.closed {
		select {
		case e.rel <- c:
			return true
		default:
		}
	}
	e.stats.ReleasesDropped++
	return false
}

// releaser sends the releases of the queue until Close closes it: over a
// Store that ends several calls in one round trip (rstore's Pipe), each
// round trip carries every release queued when it leaves (up to endsMax),
// so a release waits at most for one round trip of a busy worker (if all
// releaseWorkers are under way) before it is sent, or rides sooner on an
// admission of this process (join); there is no artificial delay.
func (e *Engine) releaser() {
	_, batch := e.st.(piper)
	for c := range e.rel {
		cs := []*Call{c}
	drain:
		for batch && len(cs) < endsMax {
			select {
			case c, ok := <-e.rel:
				if !ok {
					break drain
				}
				cs = append(cs, c)
			default:
				break drain
			}
		}
		if batch {
			if cs = e.ride(cs); len(cs) == 0 {
				continue
			}
		}
		e.sendEnds(cs)
	}
}

// Pause holds c's limiter in every process until d from now (capped by
// MaxPause): locally at once (this process's waiters and the fallback),
// and in Redis by one round trip on a goroutine of its own, bounded by
// Timeout; Pause itself never blocks. A d ≤ 0 changes nothing. While Redis
// is unreachable the pause is local only.
func (e *Engine) Pause(scope string, c rspec.Charge, d time.Duration) {
	if d <= 0 {
		return
	}
	d = min(d, e.cfg.MaxPause)
	until := time.Now().Add(d)
	e.mu.Lock()
	l := e.limLocked(limKey{scope, c.Rule, c.Key}, time.Now())
	if until.After(l.paused) {
		l.paused = until
	}
	if until.After(e.stats.PausedUntil) {
		e.stats.PausedUntil = until
	}
	e.mu.Unlock()
	if e.cfg.Fallback != nil {
		e.cfg.Fallback.Pause(scope, c, until)
	}
	e.send(func(ctx context.Context) {
		_, err := e.st.Pause(ctx, scope, c, d)
		e.roundTrip(err)
	})
}

// ReconcileAtThen passes a server's usage report (used units in the
// server's current window, read at r on Redis's clock; zero when not
// known) to Redis, asynchronously: one round trip on a goroutine of its
// own, bounded by Timeout; it never blocks. A round trip that fails marks
// Redis unreachable (counted in Stats.RedisErrors); a caller's error
// Redis answered with (a limit mismatch) counts as Redis answering and
// reaches then. A window aligned to the clock drops a count read in
// an earlier window than the one current when it reaches Redis (see
// rspec.Store.ReconcileAt). then, when not nil, is told what the count
// did, once Redis answered: added is the units the limiter took in (what
// it counted beyond what it already did, as the in-process window's
// Consume or Report: 0 when the count told it nothing new, or was dropped
// as read in an earlier aligned window), negative when a fixed completion
// window gave units back (its bound on the units from elsewhere
// tightened: then this process forgets what it learned of the limiter's
// next admission and calls Config.OnRoom, and the limiter's first waiter
// asks Redis again); err is the round trip's error (added is then 0). An
// event "reconciled" carries max(added, 0) units in both modes, and fires
// only when added > 0. then is called on a goroutine of the engine,
// outside any lock; it is not called when the count changes nothing
// without a round trip (used < 0, Redis taken as unreachable, Close, too
// many round trips under way).
func (e *Engine) ReconcileAtThen(scope string, c rspec.Charge, used int64, r rspec.Read, then func(added int64, err error)) {
	if used >= 0 {
		e.learn(scope, c, then, func(ctx context.Context) (int64, error) { return e.st.ReconcileAt(ctx, scope, c, used, r) })
	}
}

// BudgetThen passes a server's report of a Quota limiter's budget
// (remaining units in the server's window, which ends resetIn from now;
// own: the reporting call's units when still in flight and leased, under
// the token tok, see rspec.Store.Budget) to Redis, asynchronously: one round trip on a
// goroutine of its own, bounded by Timeout; it never blocks. then, when
// not nil, is told the units the budget dropped by (negative when a new
// window raised it: then, as for a give-back of ReconcileAtThen, this
// process forgets what it learned of the limiter's next admission, wakes
// its first waiter and calls Config.OnRoom) and the round trip's error, on
// a goroutine of the engine. Nothing is sent (and then is not called)
// while Redis is taken as unreachable, after Close, or for a negative
// remaining.
func (e *Engine) BudgetThen(scope string, c rspec.Charge, remaining int64, resetIn time.Duration, own int64, tok string, then func(taken int64, err error)) {
	if remaining >= 0 {
		e.learn(scope, c, then, func(ctx context.Context) (int64, error) {
			return e.st.Budget(ctx, scope, c, remaining, resetIn, own, tok)
		})
	}
}

// learn runs op, a usage report's round trip on c's limiter, bounded by
// Timeout (send); a negative answer gave units back: this process forgets
// what it learned of the limiter (forget). then, when not nil, is told the
// answer (0 with a round trip's error) and the error.
func (e *Engine) learn(scope string, c rspec.Charge, then func(int64, error), op func(context.Context) (int64, error)) {
	e.send(func(ctx context.Context) {
		n, err := op(ctx)
		e.roundTrip(err)
		if err == nil && n < 0 {
			e.forget(scope, c)
		}
		if then != nil {
			if err != nil {
				n = 0
			}
			then(n, err)
		}
	})
}

// send runs op, one round trip bounded by Timeout, on a goroutine of its
// own; nothing is sent while Redis is taken as unreachable, after Close,
// or when too many round trips are under way.
func (e *Engine) send(op func(context.Context)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.down && !e.closed {
		e.spawnLocked(func() {
			ctx, cancel := context.WithTimeout(context.Background(), e.cfg.Timeout)
			defer cancel()
			op(ctx)
		})
	}
}

// SetLimit changes a limiter's limit for every process: c.Spec is stored
// in Redis, and every process adopts it at its next admission. It blocks
// for one round trip, at most Timeout or until ctx is done; it returns an
// error matching ErrUnavailable when Redis cannot be reached (nothing then
// changed, or the change may yet land), ctx.Err(), or Redis's error.
func (e *Engine) SetLimit(ctx context.Context, scope string, c rspec.Charge) error {
	if c.Spec == nil {
		return errors.New("ratesem: SetLimit: nil Spec")
	}
	err, left := bounded(e, ctx, e.cfg.Timeout, nil, func(octx context.Context) error {
		return e.st.SetLimit(octx, scope, c)
	}, nil)
	if err = cmp.Or(left, err); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if callerError(err) {
			return err
		}
		e.markDown(err, false)
		return e.unavailable(err)
	}
	e.markUp()
	// What this process learned under the old limit no longer holds, nor
	// do its blocks: their unused calls go back.
	e.mu.Lock()
	e.stopBlocksOfLocked(scope, c)
	e.mu.Unlock()
	e.forget(scope, c)
	return nil
}

// forget forgets what this process learned of c's limiter's next
// admission (see forgetLocked) and calls Config.OnRoom, when set, for c.
// e.mu must not be held.
func (e *Engine) forget(scope string, c rspec.Charge) {
	e.mu.Lock()
	e.forgetLocked(scope, c)
	e.mu.Unlock()
	if e.cfg.OnRoom != nil {
		e.cfg.OnRoom(scope, []rspec.Charge{c})
	}
}

// limLocked returns k's limiter, made if needed. Before it makes one, once
// lims has doubled since the last time, it forgets the limiters whose
// instants have passed (they teach nothing), so lims holds at most about
// twice the limiters that still do. e.mu must be held.
func (e *Engine) limLocked(k limKey, now time.Time) *limiter {
	if l := e.lims[k]; l != nil {
		return l
	}
	if len(e.lims) >= e.sweepAt {
		maps.DeleteFunc(e.lims, func(_ limKey, l *limiter) bool {
			drop := !now.Before(l.paused) && !now.Before(l.notBefore)
			if drop {
				e.sweptFor = max(e.sweptFor, l.forgot) // staleLocked still knows it
			}
			return drop
		})
		e.sweepAt = max(2*len(e.lims), 64)
	}
	l := &limiter{}
	e.lims[k] = l
	return l
}

// forgetLocked forgets the wait the last refusal on c's limiter taught
// this process: it asks Redis again at its next decision. e.mu must be
// held.
func (e *Engine) forgetLocked(scope string, c rspec.Charge) {
	e.forgetByLocked(scope, c, nil)
}

// forgetByLocked is forgetLocked for a release of the round trip t (nil:
// anything else). It numbers the forget: a refusal Redis made before it,
// whose answer comes after, is not learned (staleLocked); the releases of
// t ran in Redis before t's admissions, whose refusals they leave
// learnable. e.mu must be held.
func (e *Engine) forgetByLocked(scope string, c rspec.Charge, t *trip) {
	e.forgets++
	k := limKey{scope, c.Rule, c.Key}
	l := e.lims[k]
	if l == nil {
		if e.active == 0 {
			return // no decision under way: no refusal to come
		}
		l = e.limLocked(k, time.Now())
	}
	l.notBefore, l.notBeforeN = time.Time{}, 0
	own := t != nil && (l.forgotBy == t || l.forgot <= t.epoch)
	l.forgot, l.forgotBy = e.forgets, nil
	if own {
		l.forgotBy = t
	}
}

// staleLocked reports whether w's refusal on l may be older than a
// forget of l (a SetLimit, a level changed, a release, a give-back),
// answered after w's round trip was sent: Redis may have run that round
// trip first, and what its refusal teaches no longer holds. Such a
// refusal is not learned (one more round trip at the next decision).
// e.mu must be held.
func (e *Engine) staleLocked(w *waiter, l *limiter) bool {
	if e.sweptFor > w.epoch {
		return true
	}
	return l.forgot > w.epoch && (w.trip == nil || l.forgotBy != w.trip)
}

// Closed reports whether Close was called.
func (e *Engine) Closed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

// Stats returns a snapshot of the counters. It never blocks for long.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.stats
	st.Unavailable = e.down
	return st
}

// Close stops the engine: callers in Decide return ErrClosed, and so do
// later calls (an admission Redis grants as Close is called is cancelled
// there); once Close has returned, no Decide admits. Releases already
// queued are sent, for at most Timeout; those left then, and releases
// after Close, are dropped and counted (the lease covers them).
//
// Close waits for the Decide calls in progress, the release workers and
// the round trips still running, at most twice Timeout in all. A client
// that ignores its contexts' deadlines (go-redis without
// ContextTimeoutEnabled) may keep such a round trip, and its goroutine,
// until its own read timeout. Close does not close the Redis client, and
// returns nil; calling it again only waits again.
func (e *Engine) Close() error {
	e.mu.Lock()
	if !e.closed {
		e.stopBlocksLocked() // idle blocks go back first
		e.closed = true
		e.closeFn()
		close(e.rel)
	}
	var drained chan struct{}
	if e.pending > 0 || e.active > 0 {
		if e.drained == nil {
			e.drained = make(chan struct{})
		}
		drained = e.drained
	}
	e.mu.Unlock()
	flush, end := time.After(e.cfg.Timeout), time.After(2*e.cfg.Timeout)
	for drained != nil {
		select {
		case <-drained:
			drained = nil
		case <-flush:
			e.flushFn() // drop what is left of the release queue
		case <-end:
			return nil
		}
	}
	e.flushFn()
	return nil
}
