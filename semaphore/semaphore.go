package semaphore

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/sched"
	"github.com/ratesem/ratesem/internal/wake"
	"github.com/ratesem/ratesem/internal/winfast"
	"github.com/ratesem/ratesem/window"
)

// RateSemaphore is a weighted semaphore that also limits the rate: at most n
// units in flight at once (or a lower concurrency cap) and, by default, at
// most n units per interval counted by the completion window
// (window.Completion): at every instant, units in flight + units of calls
// that ended within the last interval ≤ n. A server that counts arrivals
// therefore never sees more than n per interval, whatever the latency.
// NewWithPolicy puts any other window of package window in its place.
//
// Its method set is a superset of *semaphore.Weighted from
// golang.org/x/sync, so it is a drop-in replacement: Acquire blocks until
// admitted, TryAcquire never blocks, Release ends a call. Do wraps a call the
// way Python's `async with sem:` does. Waiters are served in FIFO order
// within a priority class (ratesem.WithPriority on the context): a caller
// never overtakes one of its class or a higher one that asked earlier, so
// large weights do not starve, and at most ratesem.MaxOvertakes later
// callers of each higher class overtake it. A waiter sleeps on one timer,
// set for the instant the head of the queue can be admitted; nothing polls.
//
// A call's start is the instant Acquire returns and its end the instant
// Release is called: release as soon as the call's response has been read,
// since the rate window counts from then.
//
// The zero RateSemaphore is not usable; call New. A RateSemaphore is safe
// for concurrent use by multiple goroutines.
type RateSemaphore struct {
	// Immutable after New.
	clock        wake.Clock
	epoch        time.Time // instant 0 of the window's nanosecond instants (nanos)
	realClock    bool      // no WithClock: nanos is time.Since(epoch)
	doneUsesTime bool      // policy.Done reads its instant

	timedDone atomic.Bool // doneUsesTime && interval > 0, kept by SetLimit; read by Release without mu

	mu       sync.Mutex
	size     int64          // n: the most units per interval, and in flight
	interval time.Duration  // 0: no rate limit, exactly like x/sync's Weighted
	capOpt   int64          // WithMaxUnitsInFlight, or -1
	conc     int64          // the concurrency cap in force: min(size, capOpt)
	fit      int64          // the heaviest call that can ever start: min(conc, policy capacity)
	cur      int64          // units in flight
	policy   winfast.Window // guarded when it runs a caller's code (guard)
	orig     window.Policy  // the policy given, for its window.Settler
	// deferredUnlock: the frame holding mu unlocks it in a deferred call
	// (lockDeferred), so a Policy's panic must not (guarded)
	deferredUnlock bool
	waiters        list.List // of *waiter, by rank: priority class, then arrival
	parked         list.List // of *waiter heavier than the cap while interval is 0
	paused         time.Time // no starts before; zero when no pause is pending
	ranker         sched.Ranker
	maxQueue       int // WithMaxQueue; 0: no cap

	timer wake.Timer // set for the instant the head waiter can be admitted

	admitted  uint64
	totalWait time.Duration
	maxWait   time.Duration

	onWake func() // test hook: called under mu on every timer wake-up
	// test hook: called under mu when a waiter is made (done false) and
	// when it is granted or failed (done true).
	onWaiter func(w *waiter, done bool)

	obs func(ratesem.Event) // WithObserver, or nil; called without mu

	// The calls Begin admitted, so that End can tell a live call from one
	// already ended (End twice, on any copy) whoever else holds units: a
	// slot per call in flight, reused through freeCalls (no allocation once
	// the slab has grown to the most calls ever in flight at once).
	calls     []callSlot
	freeCalls []int
	callUnits int64 // units of the live Calls, a part of cur in process

	// remote is set by redisrate.NewSemaphore: the state is in Redis and every
	// method goes there; nil in process (the fields above are then unused but
	// for size, interval and capOpt).
	remote *redisSem
}

type waiter struct {
	n        int64
	ready    chan struct{} // closed when granted or failed
	err      error         // set before ready is closed when the wait failed
	since    time.Time     // when it began waiting
	deadline time.Time     // ctx's deadline; zero if none
	qdead    time.Time     // since + its queue-wait budget; zero if none
	rank     sched.Rank    // its place in s.waiters
	granted  time.Time     // the instant of admission, for policy.Cancel
	elem     *list.Element // in s.waiters, or in s.parked if parked
	parked   bool
}

// New returns a RateSemaphore that admits at most n units in flight and at
// most n units per interval (a time.Duration) under the completion window.
//
// interval 0 means no rate limit: the semaphore then behaves like
// golang.org/x/sync/semaphore.NewWeighted(n), edge cases included (n = 0
// admits only zero weights; a weight larger than n waits for its context
// without blocking other callers), with one intended difference: a
// negative weight, on which x/sync panics, is refused instead (Acquire
// returns an error matching ratesem.ErrNegativeWeight, TryAcquire false;
// Release of a negative n panics, as in x/sync). New panics if n or
// interval is negative.
func New(n int64, interval time.Duration, opts ...Option) *RateSemaphore {
	if n < 0 || interval < 0 {
		panic(fmt.Sprintf("ratesem: New(%d, %v): negative limit", n, interval))
	}
	cfg := buildConfig(opts)
	inProcess(&cfg)
	l := window.Limit{N: n, Per: interval}
	if cfg.Start {
		return newSemaphore(window.NewSlidingLog(l, cfg.Margin), cfg)
	}
	return newSemaphore(window.NewCompletion(l), cfg)
}

// NewWithPolicy returns a RateSemaphore whose rate window is p, any of the
// windows of package window: window.NewFixedWindow(l) to match a server
// that counts fixed windows, window.NewGCRA(l, burst) or
// window.NewTokenBucket(l, burst) for a token bucket, and so on; each
// documents its exact guarantee. The semaphore admits at most p.Limit().N
// units in flight (or the WithMaxUnitsInFlight cap), and SetLimit(n, interval)
// sets p's limit to n per interval. Waiting, FIFO order, cancellation, Pause
// and Stats work as with New.
//
// A call heavier than can ever start (p.Capacity(), a bucket's burst, or
// p.Limit().N or the concurrency cap, whichever is least) is handled as in
// Acquire: while p has a rate (Per > 0) it fails at once with
// ratesem.ErrWeightTooLarge; with Per 0 the semaphore is x/sync's Weighted
// of N units, and such a call waits for its context, as Weighted does for a
// weight above its size, without holding up other callers, or until a
// SetLimit makes it fit.
//
// A window of another package works too (it implements window.Policy); the
// windows of package window take a faster path, with no time.Time built for
// an admitted call. Its methods run under the semaphore's lock: one that
// blocks stalls every caller meanwhile; one that panics (or calls
// runtime.Goexit) leaves the semaphore unlocked and usable, and the panic
// goes on, unrecovered, to the caller of the method that ran it (Acquire,
// Release, End, SetLimit …; when the semaphore's timer admits a waiter, its
// goroutine, which ends the program).
//
// The semaphore owns p: do not use p elsewhere. NewWithPolicy panics if p is
// nil or if WithStartWindow is given too (the policy already is the window).
func NewWithPolicy(p window.Policy, opts ...Option) *RateSemaphore {
	if p == nil {
		panic("ratesem: NewWithPolicy: nil policy")
	}
	cfg := buildConfig(opts)
	inProcess(&cfg)
	if cfg.Start {
		panic("ratesem: NewWithPolicy: WithStartWindow conflicts with the policy given")
	}
	return newSemaphore(p, cfg)
}

func newSemaphore(p window.Policy, cfg config) *RateSemaphore {
	l := p.Limit()
	s := &RateSemaphore{clock: wake.NewClock(cfg.Clock), size: l.N, interval: l.Per, capOpt: cfg.Concurrency, orig: p}
	s.policy = guard(winfast.Of(p), s)
	s.obs = cfg.Observer
	s.maxQueue = cfg.MaxQueue
	s.epoch = s.policy.Start(s.clock.Now())
	s.realClock = cfg.Clock == nil
	s.doneUsesTime = s.policy.DoneUsesTime()
	s.timedDone.Store(s.doneUsesTime && l.Per > 0)
	s.setCapLocked()
	return s
}

func (s *RateSemaphore) setCapLocked() {
	s.conc = s.size
	if s.capOpt >= 0 && s.capOpt < s.size {
		s.conc = s.capOpt
	}
	s.fit = min(s.conc, s.policy.Capacity())
}

// now reads the clock once.
func (s *RateSemaphore) now() time.Time { return s.clock.Now() }

// nanos reads the clock once, as the window takes instants: nanoseconds
// since s.epoch. On the real clock it is one monotonic read (time.Since),
// with no time.Time built: the read of Release's fast path.
func (s *RateSemaphore) nanos() int64 {
	if s.realClock {
		return int64(time.Since(s.epoch))
	}
	return s.clockNanos()
}

// clockNanos is nanos on an injected clock.
func (s *RateSemaphore) clockNanos() int64 { return s.nanosOf(s.clock.Now()) }

// nanosOf converts an instant of the clock to the window's nanoseconds.
func (s *RateSemaphore) nanosOf(t time.Time) int64 { return int64(t.Sub(s.epoch)) }

// instant converts the window's nanoseconds back to an instant of the
// clock; winfast.None (no instant) is the zero time.Time.
func (s *RateSemaphore) instant(ns int64) time.Time {
	if ns == winfast.None {
		return time.Time{}
	}
	return s.epoch.Add(time.Duration(ns))
}

// Acquire acquires n units (n ≥ 0), blocking until they are admitted or ctx
// is done. On success it returns nil and the caller must Release(n) when the
// call ends.
//
// On failure it leaves the semaphore unchanged (no unit held, nothing
// recorded in the window, the waiters behind it move on) and returns:
//   - ctx.Err() itself when ctx is done, even if the units were free: a
//     context done before the call never acquires;
//   - an error matching both ratesem.ErrDeadline and context.DeadlineExceeded
//     (errors.Is) as soon as the wait is known to end after ctx's deadline,
//     without waiting for the deadline; the estimate assumes the limit is
//     not raised meanwhile, and the deadline is compared with instants of
//     the semaphore's clock (with WithClock, derive ctx from that clock, as
//     clock.Mock's WithTimeout does);
//   - an error matching ratesem.ErrWeightTooLarge at once when the semaphore is
//     rate-limited and n exceeds its limit, concurrency cap or window's
//     capacity (a bucket's burst, see NewWithPolicy). Without a
//     rate limit (interval 0) such a call waits for ctx, as x/sync does,
//     without holding up other callers (or until a SetLimit makes it fit);
//   - an error matching ratesem.ErrNegativeWeight at once when n is
//     negative;
//   - an error matching ratesem.ErrQueueFull at once when the call must wait
//     and WithMaxQueue callers already wait;
//   - an error matching ratesem.ErrQueueTimeout (not
//     context.DeadlineExceeded) when the call waited its queue-wait budget
//     (ratesem.WithQueueWait on ctx), or as soon as its admission is known
//     to come after that budget.
//
// A call that must wait reads its priority (ratesem.WithPriority) and its
// queue-wait budget from ctx; a call admitted at once reads neither. Built with
// redisrate.NewSemaphore, priorities, WithMaxQueue and the queue-wait budget
// hold among this process's waiters.
//
// Built with redisrate.NewSemaphore, it may also return an error matching
// ratesem.ErrUnavailable (Redis unreachable, no fallback),
// ratesem.ErrLimitMismatch (another process opened the name with another limit)
// or ratesem.ErrClosed (after Close); a call of 0 units makes no round trip,
// and ctx's deadline holds whatever the Redis client's options.
func (s *RateSemaphore) Acquire(ctx context.Context, n int64) error {
	if s.remote != nil {
		return s.remote.acquire(ctx, n)
	}
	if n < 0 {
		s.observeFailed(n, nil, ratesem.ErrNegativeWeight)
		return fmt.Errorf("%w %d: Acquire", ratesem.ErrNegativeWeight, n)
	}
	done := ctx.Done()

	s.mu.Lock()
	select {
	case <-done:
		// ctx being done happened before we hold the lock; fail even though
		// the units might be free, as x/sync does.
		s.mu.Unlock()
		s.observeFailed(n, nil, ctx.Err())
		return ctx.Err()
	default:
	}
	// admitCachedLocked written out: the call was an eighth of an admitted
	// Acquire+Release without a rate.
	if s.waiters.Len() == 0 && n <= s.conc-s.cur && s.paused == (time.Time{}) && s.policy.AdmitCached(n) {
		s.cur += n
		s.admitted++
		s.mu.Unlock()
		s.observeAdmitted(n, nil, nil)
		return nil
	}
	if n > s.fit && s.interval > 0 {
		err := s.tooLargeLocked(n)
		s.mu.Unlock()
		s.observeFailed(n, nil, err)
		return err
	}

	now := s.now()
	if s.waiters.Len() == 0 {
		// The cached state may lag: log entries expire lazily. Decide on
		// the clock before allocating a waiter.
		if _, ok := s.admitLocked(now, n); ok {
			s.mu.Unlock()
			s.observeAdmitted(n, nil, nil)
			return nil
		}
	}
	w, err := s.queue(ctx, n, now)
	if err == nil {
		s.observeAdmitted(n, w, nil)
	}
	return err
}

// queue is the waiting part of Acquire and Begin, entered with s.mu held
// (it unlocks): n units could not be admitted at now. It returns the
// waiter once admitted (its granted field is the admission instant), or the
// error, with a nil waiter when it failed before waiting.
func (s *RateSemaphore) queue(ctx context.Context, n int64, now time.Time) (*waiter, error) {
	done := ctx.Done()
	// It must wait: only now are the context's settings read.
	if s.maxQueue > 0 && s.waiters.Len()+s.parked.Len() >= s.maxQueue {
		err := fmt.Errorf("%w: %d callers wait (WithMaxQueue)", ratesem.ErrQueueFull, s.waiters.Len()+s.parked.Len())
		s.mu.Unlock()
		s.observeFailed(n, nil, err)
		return nil, err
	}
	w := &waiter{n: n, ready: make(chan struct{}), since: now, rank: s.ranker.Next(ratesem.PriorityOf(ctx))}
	w.deadline, _ = ctx.Deadline()
	if s.onWaiter != nil {
		s.onWaiter(w, false)
	}
	budget := ratesem.QueueWaitOf(ctx)
	if budget > 0 {
		w.qdead = now.Add(budget)
	}
	if n > s.fit {
		// No rate (interval 0), as in x/sync: don't make other Acquire calls
		// block on one that is doomed to fail. It waits aside for its
		// context, or for a SetLimit under which it fits.
		w.elem, w.parked = s.parked.PushBack(w), true
	} else {
		s.insertLocked(w)
		if s.waiters.Front() == w.elem {
			// Fails or arms the timer. Its admission check repeats the one
			// above, which has no side effect on failure: slow path only.
			s.notifyLocked(now)
		}
	}
	s.mu.Unlock()
	s.observeQueued(w)

	var expired <-chan time.Time // nil: no queue-wait budget
	if budget > 0 {
		expired = s.clock.After(budget)
	}
	select {
	case <-done:
		s.abandon(w)
		s.observeFailed(n, w, ctx.Err())
		return nil, ctx.Err()

	case <-expired:
		// The budget ran out: fail w unless it was decided meanwhile
		// (admitted no later than the budget).
		s.mu.Lock()
		select {
		case <-w.ready:
		default:
			s.dropLocked(w)
			s.failLocked(w, queueTimeout(w, time.Time{}, time.Time{}))
		}
		s.mu.Unlock()
		return w, s.waited(ctx, w)

	case <-w.ready:
		return w, s.waited(ctx, w)
	}
}

// abandon takes w back: out of its queue while undecided, or its
// admission undone (as if it never happened) if it was granted meanwhile.
// The waiters behind it move on.
func (s *RateSemaphore) abandon(w *waiter) {
	s.lockDeferred()
	defer s.unlockDeferred()
	select {
	case <-w.ready:
		if w.err == nil {
			s.undoLocked(w)
		}
	default:
		s.dropLocked(w)
	}
}

// waited ends the Acquire of w once w.ready is closed: granted or failed.
// It reports a failure or a cancellation; the caller reports the
// admission (observeAdmitted), once it is the caller's.
func (s *RateSemaphore) waited(ctx context.Context, w *waiter) error {
	n, done := w.n, ctx.Done()
	if w.err != nil {
		s.observeFailed(n, w, w.err)
		return w.err
	}
	s.mu.Lock()
	select {
	case <-done:
		s.undoLocked(w)
		s.mu.Unlock()
		s.observeFailed(n, w, ctx.Err()) // Cancelled
		return ctx.Err()
	default:
	}
	// Count the wait only now that the admission is kept.
	wait := max(w.granted.Sub(w.since), 0) // Release may pass an earlier now
	s.totalWait += wait
	s.maxWait = max(s.maxWait, wait)
	s.mu.Unlock()
	return nil
}

func (s *RateSemaphore) tooLargeLocked(n int64) error {
	if n > s.size {
		return fmt.Errorf("%w: weight %d, limit %d per %v", ratesem.ErrWeightTooLarge, n, s.size, s.interval)
	}
	if c := s.policy.Capacity(); n > c {
		return fmt.Errorf("%w: weight %d, capacity %d (burst) of the window", ratesem.ErrWeightTooLarge, n, c)
	}
	return fmt.Errorf("%w: weight %d, concurrency cap %d", ratesem.ErrWeightTooLarge, n, s.conc)
}

// undoLocked takes back the admission of w, whose caller gave up before it
// could use it: the units go back without a completion stamp.
func (s *RateSemaphore) undoLocked(w *waiter) {
	s.cur -= w.n
	s.policy.Cancel(s.nanosOf(w.granted), w.n)
	s.admitted--
	s.notifyLocked(s.now())
}

// TryAcquire acquires n units (n ≥ 0) without blocking. It returns true on
// success (the caller must Release(n) later); on failure it returns false and
// leaves the semaphore unchanged. It fails whenever other callers are waiting,
// so it never overtakes them. A negative n is refused (false). Built with
// redisrate.NewSemaphore, it makes one admission round trip (bounded by
// WithRedisTimeout) unless callers wait, a pause is on or the limit is known
// full, when it fails at once.
func (s *RateSemaphore) TryAcquire(n int64) (ok bool) {
	if s.remote != nil {
		return s.remote.tryAcquire(n)
	}
	if n < 0 {
		return false
	}
	defer func() {
		if ok { // after the unlock below
			s.observeAdmitted(n, nil, nil)
		}
	}()
	s.lockDeferred()
	defer s.unlockDeferred()
	if s.waiters.Len() != 0 {
		return false
	}
	if s.admitCachedLocked(n) {
		return true
	}
	_, ok = s.admitLocked(s.now(), n)
	return ok
}

// Release releases n units (n ≥ 0) held by a call that has ended; under the
// completion window the instant of Release is the call's end. It never blocks,
// over Redis either: the release is sent in the background (see
// redisrate.NewSemaphore), and Release of n units ends the oldest call of
// exactly n units that Acquire or TryAcquire admitted in this process, or else
// n units of the oldest such calls (a call partly released stays in flight in
// Redis until all its units are). It panics
// if n is negative or more units are released than Acquire and TryAcquire
// admitted and are not yet released (caller bugs), as x/sync does; the units
// of a Call from Begin are not Release's to give back (its End does), so a
// Release that would take them panics too, whoever else holds units.
func (s *RateSemaphore) Release(n int64) {
	if s.remote != nil {
		if held, ok := s.remote.release(n); !ok {
			s.mu.Lock()
			calls := s.callUnits
			s.mu.Unlock()
			panic(overReleased(n, held, calls))
		}
		return
	}
	if n < 0 {
		panic("ratesem: Release with negative weight")
	}
	var now int64 // 0 when the window does not read it
	timed := s.timedDone.Load()
	if timed {
		// Outside the lock: the clock read is the dearest step. Written out
		// rather than s.nanos(), which is too large to inline.
		if s.realClock {
			now = int64(time.Since(s.epoch))
		} else {
			now = s.clockNanos()
		}
	}
	s.mu.Lock()
	if n > s.cur-s.callUnits {
		held, calls := s.cur-s.callUnits, s.callUnits
		s.mu.Unlock()
		panic(overReleased(n, held, calls))
	}
	s.cur -= n
	if !timed && s.doneUsesTime && s.interval > 0 {
		now = s.nanos() // SetLimit raced with the read of timedDone
	}
	s.policy.Done(now, n)
	if s.waiters.Len() > 0 {
		// A fresh reading: the one above may predate waiters queued while
		// we waited for mu, and would set the timer late.
		s.notifyLocked(s.now())
	}
	s.mu.Unlock()
}

// overReleased is the panic of a Release of n units that Acquire and
// TryAcquire do not hold (held units), in process and over Redis alike:
// x/sync's message, or, when the units are those of Begin's Calls (calls
// units), what to do instead.
func overReleased(n, held, calls int64) string {
	if n <= held+calls {
		return "ratesem: Release of units held by a Call from Begin: end it with Call.End"
	}
	return "semaphore: released more than held"
}

// Do acquires one unit, runs fn, and releases the unit when fn returns or
// panics (the panic then goes on). It returns Acquire's error without
// running fn, or fn's error. It blocks like Acquire.
func (s *RateSemaphore) Do(ctx context.Context, fn func(context.Context) error) error {
	return s.DoN(ctx, 1, fn)
}

// DoN is Do for a call of n units; a negative n fails as in Acquire,
// without running fn.
func (s *RateSemaphore) DoN(ctx context.Context, n int64, fn func(context.Context) error) error {
	if err := s.Acquire(ctx, n); err != nil {
		return err
	}
	defer s.Release(n)
	return fn(ctx)
}

// Pause holds every new start until the instant until (read on the
// semaphore's clock): callers keep waiting, in order, and calls in flight go
// on. Overlapping pauses do not add up; the later end wins. A time in the
// past changes nothing. It never blocks. Feed it from a 429 or 418 response's
// Retry-After; PauseFor takes the delay form.
//
// Built with redisrate.NewSemaphore, the pause is measured on the real clock,
// capped at 5 minutes (a hostile Retry-After cannot hold the fleet longer),
// holds this process at once and is sent to Redis in the background (one
// round trip bounded by WithRedisTimeout, skipped while Redis is unreachable),
// so every process sharing the name pauses.
func (s *RateSemaphore) Pause(until time.Time) {
	if s.remote != nil {
		s.remote.pause(until)
		return
	}
	set := false
	defer func() { s.observePaused(set, until) }() // after the unlock below
	s.lockDeferred()
	defer s.unlockDeferred()
	if !until.After(s.paused) {
		return
	}
	now := s.now()
	if !until.After(now) {
		return
	}
	s.paused = until
	s.notifyLocked(now)
	set = true
}

// PauseFor is Pause(now + d): no new starts for the time.Duration d from now.
// A d ≤ 0 changes nothing.
func (s *RateSemaphore) PauseFor(d time.Duration) {
	if d <= 0 {
		return
	}
	s.Pause(s.now().Add(d))
}

// SetLimit changes the limit to n units per interval, at run time, keeping the
// accounting: units in flight and the window's record of calls still inside the
// old window count against the new limit at once, so lowering it never lets a
// burst through, and raising it admits waiters at once. A concurrency cap set
// by WithMaxUnitsInFlight stays in force (never above n). Waiters whose weight
// no longer fits fail at once with ratesem.ErrWeightTooLarge; with interval 0
// they wait aside, as in Acquire, until their context ends or a later SetLimit
// makes them fit, and then rejoin the queue in their order of arrival. It
// returns an error matching ratesem.ErrInvalidLimit, and changes nothing, if n
// or interval is negative. It never blocks in process.
//
// For a RateSemaphore built with redisrate.NewSemaphore, SetLimit stores the
// new limit in Redis for every process sharing the name (each adopts it at its
// next admission), in one round trip bounded by WithRedisTimeout; it returns an
// error matching ratesem.ErrUnavailable when Redis cannot be reached, and one
// matching ratesem.ErrInvalidLimit for n = 0, interval 0 or an interval that is
// not a whole number of microseconds.
//
// Calls that ended while interval was 0 read no clock, so a switch from
// interval 0 to a positive interval starts the window afresh: only units in
// flight count.
func (s *RateSemaphore) SetLimit(n int64, interval time.Duration) error {
	if n < 0 || interval < 0 {
		return fmt.Errorf("%w: SetLimit(%d, %v): negative", ratesem.ErrInvalidLimit, n, interval)
	}
	if s.remote != nil {
		return s.remote.setLimit(n, interval)
	}
	s.lockDeferred()
	defer s.unlockDeferred()
	now := s.now()
	s.size, s.interval = n, interval
	s.policy.SetLimit(s.nanosOf(now), n, interval)
	s.setCapLocked()
	s.timedDone.Store(s.doneUsesTime && interval > 0)
	s.refitLocked()
	s.notifyLocked(now)
	return nil
}

// refitLocked sorts the waiters after a limit change: those heavier than the
// cap leave the queue (they fail under a rate, wait aside without one), and
// those waiting aside that fit again rejoin it by arrival order.
func (s *RateSemaphore) refitLocked() {
	for e := s.waiters.Front(); e != nil; {
		next := e.Next()
		if w := e.Value.(*waiter); w.n > s.fit {
			s.waiters.Remove(e)
			if s.interval > 0 {
				s.failLocked(w, s.tooLargeLocked(w.n))
			} else {
				w.elem, w.parked = s.parked.PushBack(w), true
			}
		}
		e = next
	}
	for e := s.parked.Front(); e != nil; {
		next := e.Next()
		w := e.Value.(*waiter)
		switch {
		case w.n <= s.fit:
			s.parked.Remove(e)
			s.insertLocked(w)
			w.parked = false
		case s.interval > 0:
			s.parked.Remove(e)
			s.failLocked(w, s.tooLargeLocked(w.n))
		}
		e = next
	}
}

// insertLocked puts w in s.waiters by rank (sched.Rank): after the
// waiters that go before it, usually at the back.
func (s *RateSemaphore) insertLocked(w *waiter) {
	at := s.waiters.Back()
	for at != nil && w.rank.Before(at.Value.(*waiter).rank) {
		at = at.Prev()
	}
	if at == nil {
		w.elem = s.waiters.PushFront(w)
	} else {
		w.elem = s.waiters.InsertAfter(w, at)
	}
}

// dropLocked takes the undecided w out of its list; the waiters behind it
// move on.
func (s *RateSemaphore) dropLocked(w *waiter) {
	if w.parked {
		s.parked.Remove(w.elem)
		return
	}
	isFront := s.waiters.Front() == w.elem
	s.waiters.Remove(w.elem)
	if isFront {
		s.notifyLocked(s.now())
	}
}

// queueTimeout is the error of w when its queue-wait budget ran out at now
// (zero: just now), or its admission at at (zero: unknown) would come
// after it. It matches ratesem.ErrQueueTimeout, not
// context.DeadlineExceeded.
func queueTimeout(w *waiter, now, at time.Time) error {
	budget := w.qdead.Sub(w.since)
	if at.IsZero() {
		return fmt.Errorf("%w: still queued after %v", ratesem.ErrQueueTimeout, budget)
	}
	return fmt.Errorf("%w: admission in %v, budget %v (%v left)", ratesem.ErrQueueTimeout, at.Sub(now), budget, w.qdead.Sub(now))
}

// failLocked ends w's wait with err; w is in no list.
func (s *RateSemaphore) failLocked(w *waiter, err error) {
	w.err = err
	if s.onWaiter != nil {
		s.onWaiter(w, true)
	}
	close(w.ready)
}

// Limit returns the current limit: n units per interval (Per 0: no rate). For a
// RateSemaphore built with redisrate.NewSemaphore it is the limit this process
// set (redisrate.NewSemaphore or SetLimit): a SetLimit in another process is
// adopted in Redis, where every admission is decided, but not shown here, and
// this process still refuses at once a weight above its own n.
func (s *RateSemaphore) Limit() window.Limit {
	if s.remote != nil {
		return s.remote.spec.Load().Limit
	}
	s.lockDeferred()
	defer s.unlockDeferred()
	return window.Limit{N: s.size, Per: s.interval}
}

// Stats is a snapshot of a RateSemaphore's counters (RateSemaphore.Stats).
// Counts are totals since New; durations are time.Duration. A plain value.
type Stats struct {
	// InFlight is the units held by admitted calls not yet released.
	InFlight int64
	// Waiting is the number of callers blocked in Acquire.
	Waiting int
	// Admitted counts the calls admitted since New, by Acquire or
	// TryAcquire; an admission its caller gave up on is not counted.
	Admitted uint64
	// TotalWait is the time admitted calls spent waiting in Acquire, summed;
	// TotalWait / Admitted is the mean wait.
	TotalWait time.Duration
	// MaxWait is the longest wait of one admitted call.
	MaxWait time.Duration
	// PausedUntil is when the current pause ends; zero when none is set.
	// It may lie in the past once the pause is over. Over Redis it is the
	// latest pause set in this process.
	PausedUntil time.Time

	// The counters below are of a RateSemaphore built with
	// redisrate.NewSemaphore; they are zero in process.

	// FallbackAdmitted counts the calls of Admitted that the fallback
	// (WithFallback) admitted while Redis was unreachable.
	FallbackAdmitted uint64
	// FallbackCarried counts the calls of the fallback carried into Redis
	// when it answered again (see WithFallback).
	FallbackCarried uint64
	// RedisAdmits counts the admission round trips (refused, admitted or
	// failed).
	RedisAdmits uint64
	// RedisErrors counts the round trips of any kind that failed (no answer
	// within WithRedisTimeout, or a Redis error).
	RedisErrors uint64
	// Cancelled counts admissions taken back from Redis because the
	// caller's context ended (or Close came) as Redis admitted it.
	Cancelled uint64
	// CancelsFailed counts the cancellations that could not reach Redis:
	// those units count until the lease runs out.
	CancelsFailed uint64
	// ReleasesFailed counts the releases that failed in Redis (an error,
	// no answer in time): those units count until the lease runs out.
	ReleasesFailed uint64
	// ReleasesDropped counts the releases never sent: the release queue
	// was full, or Close came first. Those units count until the lease
	// runs out.
	ReleasesDropped uint64
	// ReleasesLost counts the releases of calls Redis no longer knew: it
	// lost its state (a restart), or the call outlived its lease.
	ReleasesLost uint64
	// Recoveries counts the times Redis answered again after being taken
	// as unreachable.
	Recoveries uint64
	// StateLost counts the admissions that found the limit's state lost in
	// Redis (evicted, deleted, a restart); the limit is then held full for
	// the time the state mattered.
	StateLost uint64
	// LimitMismatches counts the admissions refused with ratesem.ErrLimitMismatch.
	LimitMismatches uint64
	// Unavailable reports whether Redis is taken as unreachable now (until
	// a probe gets an answer): admissions go to the fallback, or fail.
	Unavailable bool
}

// Stats returns a snapshot of the counters. It makes no round trip to Redis
// and blocks only for the semaphore's lock.
func (s *RateSemaphore) Stats() Stats {
	if s.remote != nil {
		st := s.remote.stats()
		s.mu.Lock()
		st.InFlight += s.callUnits // Begin's calls, not held by remote
		s.mu.Unlock()
		return st
	}
	s.lockDeferred()
	defer s.unlockDeferred()
	return Stats{
		InFlight:    s.cur,
		Waiting:     s.waiters.Len() + s.parked.Len(),
		Admitted:    s.admitted,
		TotalWait:   s.totalWait,
		MaxWait:     s.maxWait,
		PausedUntil: s.paused,
	}
}

// Close stops a RateSemaphore built with redisrate.NewSemaphore: callers in
// Acquire return ratesem.ErrClosed, and so do later calls to Acquire
// (TryAcquire returns false); once Close has returned, no Acquire succeeds.
// Releases already queued are sent for at most WithRedisTimeout; a Release
// after Close is not sent (the lease covers it; Stats.ReleasesDropped counts
// it). Close waits for the round trips still running, at most twice
// WithRedisTimeout, does not close the Redis client, and returns nil; calling
// it again only waits again. In process Close does nothing and returns nil.
func (s *RateSemaphore) Close() error {
	if s.remote != nil {
		return s.remote.eng.Close()
	}
	return nil
}

// admitCachedLocked is the clock-free fast path: it admits n units when
// nothing is paused and the policy's state already shows room.
func (s *RateSemaphore) admitCachedLocked(n int64) bool {
	if n > s.conc-s.cur || s.paused != (time.Time{}) || !s.policy.AdmitCached(n) { // not cur+n > conc: that wraps for n near math.MaxInt64
		return false
	}
	s.cur += n
	s.admitted++
	return true
}

// admitLocked is the one admission decision every path goes through: admit n
// units at now, or return the instant to try again (zero when only a
// Release, or SetLimit, can make room).
func (s *RateSemaphore) admitLocked(now time.Time, n int64) (time.Time, bool) {
	if n > s.conc-s.cur {
		return time.Time{}, false
	}
	if !s.paused.IsZero() {
		if now.Before(s.paused) {
			return s.paused, false
		}
		s.paused = time.Time{}
	}
	if at, ok := s.policy.Admit(s.nanosOf(now), n); !ok {
		return s.instant(at), false
	}
	s.cur += n
	s.admitted++
	return time.Time{}, true
}

// notifyLocked admits waiters from the front of the queue, in order, until
// one does not fit; then it sets the timer for the instant that one can be
// admitted, if time alone will do it. It stops at the first waiter that does
// not fit, even if smaller ones behind it would: letting them pass could
// starve a large waiter forever.
func (s *RateSemaphore) notifyLocked(now time.Time) {
	for {
		front := s.waiters.Front()
		if front == nil {
			break
		}
		w := front.Value.(*waiter)
		at, ok := s.admitLocked(now, w.n)
		if ok {
			w.granted = now
			s.waiters.Remove(front)
			if s.onWaiter != nil {
				s.onWaiter(w, true)
			}
			close(w.ready)
			continue
		}
		if at.IsZero() {
			break // a Release will call us again
		}
		if !w.qdead.IsZero() && at.After(w.qdead) && (w.deadline.IsZero() || !w.qdead.After(w.deadline)) {
			// The head cannot be admitted within its queue-wait budget,
			// which runs out no later than its deadline: fail it now.
			s.waiters.Remove(front)
			s.failLocked(w, queueTimeout(w, now, at))
			continue
		}
		if !w.deadline.IsZero() && at.After(w.deadline) {
			// The head cannot be admitted before its deadline: fail it now
			// rather than when the deadline fires (golang/go#54541).
			s.waiters.Remove(front)
			s.failLocked(w, &wake.DeadlineError{Sentinel: ratesem.ErrDeadline, Wait: at.Sub(now)})
			continue
		}
		s.timer.Arm(s.clock, now, at, s.onTimer)
		return
	}
	s.timer.Stop()
}

// onTimer runs when the head waiter may be admissible. A timer that fires
// after being re-armed finds nothing to do, or re-arms itself.
func (s *RateSemaphore) onTimer() {
	s.mu.Lock()
	if s.onWake != nil {
		s.onWake()
	}
	s.timer.Fired()
	s.notifyLocked(s.now())
	s.mu.Unlock()
}
