// Package redissem provides Semaphore: the RateSemaphore of package
// semaphore, with its window kept in Redis, so that every process that
// builds a Semaphore with the same name shares one limit of n units per
// interval (replicas sharing one API key or one IP).
//
// It has the API of semaphore.RateSemaphore (Acquire, TryAcquire, Release,
// Do, DoN, Pause, PauseFor, Stats) plus Close. The window is window/redis's
// completion window by default (at every instant, units in flight + units of
// calls that ended within the last interval ≤ n, across all processes), or
// its start window with a margin (WithStartWindow). The Redis server's clock
// is the only clock, so processes with skewed clocks agree.
//
// # Round trips
//
// One EVALSHA per admission decision and one per release. Inside one
// process waiters queue FIFO and only the head of the queue talks to Redis:
// 2000 goroutines blocked in Acquire cost one round trip at a time, not
// 2000. When the head is admitted the next waiter asks at once. When Redis
// refuses, it says how long to wait; the head sleeps that long plus a
// little jitter (WithJitter), and never less than MinRetry (a jittered
// 1 to 2 ms, whatever Redis said), and asks again. Nothing polls in a
// loop. A
// head that gives up (its context ended, or its deadline comes before the
// wait) hands that wait on: the next head, if as heavy, sleeps until then
// (or fails at once with ErrDeadline) rather than asking Redis what it was
// just told. The wait only shrinks if a call is cancelled elsewhere or
// Redis loses its state, so this costs at most that one wait.
//
// # Calls in flight elsewhere
//
// A refusal because calls in flight fill the limit (window/redis
// Decision.InFlight) comes with a wait that counts those calls until their
// leases run out (a minute by default), though a Release anywhere may come
// much sooner. A Release in this process wakes the head at once. For
// Releases in other processes the head's sleep is capped at a quarter of
// the interval (10 ms when the interval is 0): under the completion window
// a release never makes room at once, since its units count until its end
// + interval, so the head, re-asking at most interval/4 after the release,
// learns the exact wait with three quarters of the interval to spare and
// is admitted as early as if it had been told; the cost is at most four
// round trips per interval per process while calls in flight fill the
// limit. A pub/sub channel published by the release script was the other
// choice; it was not taken because every release would wake the head of
// every process, each paying a round trip for it (P−1 round trips per
// release for P processes, more than the cap's four per interval once
// releases are frequent), because it needs a connection and a goroutine per
// Semaphore, and because messages are lost across a reconnection, so a cap
// would be needed anyway.
//
// # When Redis is unreachable
//
// A round trip that fails (a go-redis error, or no answer within
// WithTimeout) marks Redis unreachable. Without WithFallback the caller
// then gets an error matching ErrUnavailable (wrapping the Redis error) at
// once, and so does every Acquire until the next probe; with WithFallback
// admissions go to a local semaphore.RateSemaphore of floor(share·n) units
// per interval, the process assuming it owns that share of the limit.
// Redis is probed again by the head's next admission attempt, 100 ms after
// the failure, then after twice as long each time it fails again, up to one
// second; a probe's round trip is bounded by 250 ms (or WithTimeout if
// shorter). The first probe that gets an answer switches admissions back to
// Redis. Releases go to whichever side admitted the call. A call admitted by
// Redis whose Release cannot reach it keeps its units until its lease runs
// out, then for an interval more (safe, counted in Stats.ReleasesFailed). A
// Redis that comes back empty (restarted without persistence) has forgotten
// the calls in flight (their Releases count in Stats.ReleasesLost); the
// window detects it (see Lost state), and calls admitted by the fallback
// are not counted there.
//
// Every round trip (an admission, a release, a cancellation, a pause) runs
// on a goroutine of its own, and its caller waits for it at most
// WithTimeout (and, in Acquire, until ctx is done), whatever the options
// of the go-redis client: one built without ContextTimeoutEnabled ignores
// contexts' deadlines while it waits for a reply, and a stalled server
// (DEBUG SLEEP, a long script, a full network buffer) would otherwise hold
// the caller until the client's read timeout. A round trip left behind
// goes on: an admission it brings is cancelled in Redis when the answer
// comes; a release still frees the units then (until then they count, as
// for a lost release, until the lease runs out plus the interval).
//
// # Lost state and eviction
//
// Redis may lose the limit's keys: evicted under maxmemory, deleted by
// FLUSHALL or by hand, or gone with a restart without persistence. The
// scripts detect a loss, whole or partial, that any process saw the state
// of (window/redis, Lost state): the window is rebuilt from what is left
// and held full for an interval, every process's head sleeping that long
// (one round trip per interval, not a spin); Stats.StateLost counts it. A
// loss nobody could see (every process new, or idle for longer than the
// interval) goes unnoticed and the limit may admit up to n again within
// one interval. New refuses a server whose maxmemory-policy may evict keys
// (anything but noeviction) unless WithEvictionAllowed is given.
//
// # Close
//
// Close is final: once it has returned, no Acquire succeeds. Callers in
// Acquire return ErrClosed; an admission granted by Redis as Close was
// called is cancelled there. Close waits for the calls in progress and the
// round trips still running, at most twice WithTimeout.
//
// How soon an outage shows depends on the client too: with go-redis's
// default options a refused connection is dialled 5 times and the command
// retried 3 times, well over a second, so the first failure takes the whole
// WithTimeout (1 s by default); later ones, until the next probe, are
// immediate. A client with MaxRetries and DialerRetries set low, or a
// shorter WithTimeout, fails over sooner.
//
// # Pause
//
// Pause and PauseFor hold the starts of every process sharing the limit:
// the pause is written to Redis (window/redis Window.PauseFor), and every
// admission script reads it in the same round trip, refusing with the time
// left as the wait. The pause also holds this process's waiters at once,
// without a round trip, and its fallback semaphore. While Redis is
// unreachable a pause is local only.
package redissem

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/internal/wake"
	"github.com/ratesem/ratesem/semaphore"
	"github.com/ratesem/ratesem/window"
	wredis "github.com/ratesem/ratesem/window/redis"
)

// ErrUnavailable is matched (errors.Is) by the error Acquire returns when
// Redis could not be reached and no fallback is set (WithFallback), or the
// call is heavier than the fallback's share. The error wraps the Redis
// error too.
var ErrUnavailable = errors.New("redissem: Redis unavailable")

// ErrClosed is returned by Acquire after Close, and to callers waiting in
// Acquire when Close is called.
var ErrClosed = errors.New("redissem: semaphore closed")

// ErrWeightTooLarge is returned, wrapped, by Acquire for a call of more
// units than the limit n: such a call could never start. It is
// window.ErrWeightTooLarge.
var ErrWeightTooLarge = window.ErrWeightTooLarge

// ErrDeadline is matched, with context.DeadlineExceeded, by the error
// Acquire returns as soon as Redis's wait is known to end after ctx's
// deadline. It is semaphore.ErrDeadline.
var ErrDeadline = semaphore.ErrDeadline

const (
	probeMin     = 100 * time.Millisecond // first probe after a failure
	probeMax     = time.Second            // the longest time between probes
	probeTimeout = 250 * time.Millisecond // bound of a probe's round trip
	zeroRatePoll = 10 * time.Millisecond  // the InFlight cap when the interval is 0

	// MinRetry is the least a head sleeps before asking Redis again after
	// a refusal, whatever the wait Redis gave: a uniform draw in
	// [MinRetry, 2·MinRetry), so a head asks at most 1000 times a second
	// even if Redis says 0 (the jitter of WithJitter comes on top).
	MinRetry = time.Millisecond

	// maxPending bounds the round trips of one Semaphore left running
	// without an answer (their callers gone after WithTimeout): beyond it
	// a round trip fails at once rather than start another goroutine.
	maxPending = 1024

	// lateGrace is how much longer than its caller waits a round trip left
	// behind may take before its own context gives up: a late release still
	// frees its units sooner than the lease (and go-redis needs a live
	// context for the EVAL that follows a NOSCRIPT).
	lateGrace = 5 * time.Second
)

// errBusy is the failure of a round trip refused because maxPending
// round trips already wait for Redis.
var errBusy = errors.New("too many round trips to Redis without an answer")

// errTry is the internal refusal of TryAcquire.
var errTry = errors.New("redissem: not admitted at once")

// Semaphore is a weighted semaphore that also limits the rate, as
// semaphore.RateSemaphore does, with its window kept in Redis: every
// Semaphore built with the same name (and the same n, interval and window)
// in any process shares one limit of n units per interval. See the package
// doc for the round trips, the wake-ups, and what happens when Redis is
// unreachable.
//
// A call's start is the instant Acquire returns and its end the instant
// Release is called; the window counts them on the Redis server's clock,
// when the admission and release scripts run (just before and just after).
//
// A Semaphore is safe for concurrent use by multiple goroutines. Close it
// when done; it does not close the Redis client, which the caller owns.
type Semaphore struct {
	client      goredis.UniversalClient
	win         *wredis.Window
	name        string
	n           int64
	interval    time.Duration
	cfg         config
	local       *semaphore.RateSemaphore // the fallback, or nil
	localN      int64
	inflightCap time.Duration

	closeCtx context.Context // done after Close
	closeFn  context.CancelFunc
	wake     chan struct{} // capacity 1: a local Release, for the head

	mu        sync.Mutex
	closed    bool
	queue     list.List // of *waiter, FIFO; the front talks to Redis
	paused    time.Time // no local start before; zero when none
	down      bool      // Redis taken as unreachable
	downErr   error
	nextProbe time.Time
	backoff   time.Duration
	held      map[int64][]*held // calls in flight, by units left, oldest first
	heldUnits int64
	seq       uint64
	st        Stats // counters; the gauges are filled in by Stats

	// The latest exact refusal (not InFlight): no call of notBeforeN units
	// or more can be admitted before notBefore (only a Cancel or a Redis
	// restart elsewhere could make room sooner). A new head uses it rather
	// than asking again.
	notBefore  time.Time
	notBeforeN int64

	// Goroutines of round trips still running (pending) and Acquire calls
	// in progress (active); Close waits until both are 0 (drained is
	// closed then), for a bounded time.
	pending, active int
	drained         chan struct{}

	afterAdmit func() // test hook: after Redis admitted, before ctx is checked
}

type waiter struct {
	turn chan struct{} // closed when the waiter becomes the head
	elem *list.Element
}

// held is a call in flight admitted by this process.
type held struct {
	token string // Redis token; "" for the fallback
	local bool   // admitted by the fallback
	n     int64  // units admitted
	left  int64  // units not released yet
	seq   uint64 // admission order
}

// New returns a Semaphore named name over client that admits at most n
// units per interval across every process using the same name, under the
// completion window (window/redis NewCompletion): at every instant, units in
// flight + units of calls that ended within the last interval ≤ n. interval
// 0 caps the units in flight across processes only. Every process must use
// the same n, interval and window for the same name.
//
// New makes one round trip, bounded by WithTimeout whatever the client's
// options: it reads the server's maxmemory-policy (window/redis
// CheckEviction). A policy other than noeviction lets Redis evict the
// limiter's keys, and a window that lost its keys forgets calls it counted
// (the completion window and the start window detect it and refuse for an
// interval; see window/redis, Lost state): New then returns an error
// matching window/redis ErrEviction, unless WithEvictionAllowed is given.
// When the server forbids CONFIG (managed services often do) or does not
// answer in time, the check is skipped: make sure yourself that the keys
// are not evicted.
//
// It returns an error for a nil client or an empty name (or one longer
// than window/redis MaxNameLen once encoded), for n ≤ 0, for a negative
// interval or one that is not a whole number of microseconds (matching
// window.ErrInvalidLimit), and for an invalid option.
func New(client goredis.UniversalClient, name string, n int64, interval time.Duration, opts ...Option) (*Semaphore, error) {
	cfg := config{lease: DefaultLease, timeout: DefaultTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	if len(cfg.errs) > 0 {
		return nil, errors.Join(cfg.errs...)
	}
	l := window.Limit{N: n, Per: interval}
	var (
		win *wredis.Window
		err error
	)
	if cfg.start {
		win, err = wredis.NewSlidingLog(client, name, l, cfg.margin)
	} else {
		win, err = wredis.NewCompletion(client, name, l, wredis.WithLease(cfg.lease))
	}
	if err != nil {
		return nil, fmt.Errorf("redissem: %w", err)
	}
	if !cfg.evictionAllowed {
		if err := checkEviction(client, cfg.timeout); err != nil {
			return nil, err
		}
	}
	s := &Semaphore{
		client: client, win: win, name: name, n: n, interval: interval, cfg: cfg,
		inflightCap: interval / 4,
		wake:        make(chan struct{}, 1),
		held:        map[int64][]*held{},
	}
	if interval == 0 {
		s.inflightCap = zeroRatePoll
	}
	if cfg.fallback {
		s.localN = max(1, int64(math.Floor(cfg.share*float64(n))))
		var lo []semaphore.Option
		if cfg.start {
			lo = append(lo, semaphore.WithStartWindow(cfg.margin))
		}
		s.local = semaphore.New(s.localN, interval, lo...)
	}
	s.closeCtx, s.closeFn = context.WithCancel(context.Background())
	return s, nil
}

// checkEviction runs CheckEviction on a goroutine of its own, waiting at
// most timeout; it returns only an error matching ErrEviction.
func checkEviction(c goredis.UniversalClient, timeout time.Duration) error {
	ch := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_, err := wredis.CheckEviction(ctx, c)
		ch <- err
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-ch:
		if errors.Is(err, wredis.ErrEviction) {
			return fmt.Errorf("redissem: %w (WithEvictionAllowed to go on anyway)", err)
		}
	case <-t.C:
	}
	return nil
}

// Name returns the limit's name, as given to New.
func (s *Semaphore) Name() string { return s.name }

// Limit returns the limit shared across processes: n units per interval.
func (s *Semaphore) Limit() window.Limit { return window.Limit{N: s.n, Per: s.interval} }

// Acquire acquires n units (n ≥ 0) of the shared limit, blocking until they
// are admitted or ctx is done. On success it returns nil and the caller must
// Release(n) when the call ends. Waiters of one process are served FIFO. A
// call of 0 units is admitted at once, without a round trip.
//
// On failure nothing is held and nothing stays counted in Redis (an
// admission that came as ctx ended is cancelled there), and it returns:
//   - ctx.Err() when ctx is done (at once while waiting; after the round
//     trip in progress, bounded by WithTimeout, if one is);
//   - an error matching ErrDeadline and context.DeadlineExceeded as soon as
//     Redis's wait is known to end after ctx's deadline;
//   - an error matching ErrWeightTooLarge at once when n exceeds the limit;
//   - an error matching ErrUnavailable, wrapping the Redis error, when Redis
//     cannot be reached and there is no fallback (or n exceeds the
//     fallback's share): at once if a round trip failed recently, else
//     after the one failed round trip;
//   - ErrClosed after Close, and to a call in progress when Close is
//     called (once Close has returned, no Acquire returns nil);
//   - an error matching window.ErrNegativeWeight for a negative n.
//
// No Redis round trip holds it beyond WithTimeout, or beyond ctx, whatever
// the options of the client (ContextTimeoutEnabled or not): the round trip
// runs on a goroutine of its own, and one whose caller left takes back
// what it admitted when its answer comes (or its lease does).
func (s *Semaphore) Acquire(ctx context.Context, n int64) error {
	_, err := s.acquire(ctx, n, false)
	return err
}

// TryAcquire acquires n units (n ≥ 0) if they are admitted at once,
// without waiting for room: it returns true on success (the caller must
// Release(n) later), false otherwise, leaving nothing held. It fails at
// once, without a round trip, when other callers of this process are
// waiting (it never overtakes them), during a pause, when n exceeds the
// limit, after Close, and when Redis was found unreachable recently and
// there is no fallback; otherwise it blocks for one admission round trip at
// most (bounded by WithTimeout), or asks the fallback. It returns false
// for a negative n.
func (s *Semaphore) TryAcquire(n int64) bool {
	_, err := s.acquire(context.Background(), n, true)
	return err == nil
}

// acquire is Acquire, or TryAcquire when try is set; it reports whether the
// fallback admitted the call.
func (s *Semaphore) acquire(ctx context.Context, n int64, try bool) (local bool, err error) {
	if n < 0 {
		if try {
			return false, errTry
		}
		return false, fmt.Errorf("redissem: Acquire(%d): %w", n, window.ErrNegativeWeight)
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if n == 0 {
		return false, nil
	}
	if n > s.n {
		if try {
			return false, errTry
		}
		return false, fmt.Errorf("%w: weight %d, limit %d per %v", ErrWeightTooLarge, n, s.n, s.interval)
	}
	since := time.Now()
	w := &waiter{turn: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false, ErrClosed
	}
	if try && s.queue.Len() > 0 {
		s.mu.Unlock()
		return false, errTry
	}
	w.elem = s.queue.PushBack(w)
	head := s.queue.Front() == w.elem
	s.active++
	s.mu.Unlock()
	defer s.leave(w)
	if !head {
		select {
		case <-w.turn:
		case <-ctx.Done():
			return false, ctx.Err()
		case <-s.closeCtx.Done():
			return false, ErrClosed
		}
	}
	return s.admit(ctx, n, since, try)
}

// leave takes w out of the queue and, if it was the head, makes the next
// waiter the head.
func (s *Semaphore) leave(w *waiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	front := s.queue.Front() == w.elem
	s.queue.Remove(w.elem)
	if next := s.queue.Front(); front && next != nil {
		close(next.Value.(*waiter).turn)
	}
	s.active--
	s.checkDrained()
}

// checkDrained closes drained once no round trip and no Acquire is in
// progress. s.mu must be held.
func (s *Semaphore) checkDrained() {
	if s.pending == 0 && s.active == 0 && s.drained != nil {
		close(s.drained)
		s.drained = nil
	}
}

// spawn runs op on a goroutine of its own, counted in pending; it returns
// false, starting nothing, when maxPending round trips are running.
func (s *Semaphore) spawn(op func()) bool {
	s.mu.Lock()
	if s.pending >= maxPending {
		s.mu.Unlock()
		return false
	}
	s.pending++
	s.mu.Unlock()
	go func() {
		defer func() {
			s.mu.Lock()
			s.pending--
			s.checkDrained()
			s.mu.Unlock()
		}()
		op()
	}()
	return true
}

// bounded runs op, one round trip, on a goroutine of its own under a
// context with timeout d + lateGrace, and waits for it at most d: a client that
// ignores the context's deadline (built without ContextTimeoutEnabled)
// cannot hold the caller longer. An op left running goes on; its result is
// dropped. It returns op's error, context.DeadlineExceeded when d passed,
// or errBusy.
func (s *Semaphore) bounded(d time.Duration, op func(context.Context) error) error {
	ch := make(chan error, 1)
	if !s.spawn(func() {
		ctx, cancel := context.WithTimeout(context.Background(), d+lateGrace)
		defer cancel()
		ch <- op(ctx)
	}) {
		return errBusy
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case err := <-ch:
		return err
	case <-t.C:
		return context.DeadlineExceeded
	}
}

// admitResult is the outcome of an admission round trip.
type admitResult struct {
	d   wredis.Decision
	err error
}

// redisAdmit asks Redis to admit n units, on a goroutine of its own, and
// waits for the answer until timeout passes, ctx is done or Close is
// called. It returns the decision and the Redis error, or, when it left
// before the answer, left: context.DeadlineExceeded (timeout), ctx.Err()
// or ErrClosed. The round trip is not cut short by ctx (its context is its
// own, bounded by timeout + lateGrace): if the script admitted the call after the
// caller left, the goroutine cancels the admission when the answer comes.
func (s *Semaphore) redisAdmit(ctx context.Context, n int64, timeout time.Duration) (d wredis.Decision, err, left error) {
	ch := make(chan admitResult, 1)
	claimed := new(atomic.Bool)
	if !s.spawn(func() {
		octx, cancel := context.WithTimeout(context.Background(), timeout+lateGrace)
		d, err := s.win.Admit(octx, n)
		cancel()
		if claimed.CompareAndSwap(false, true) {
			ch <- admitResult{d, err}
			return
		}
		// The caller left: nobody will use this admission.
		if err == nil && d.OK {
			cctx, cancel := context.WithTimeout(context.Background(), s.cfg.timeout)
			cerr := s.win.Cancel(cctx, d.Token)
			cancel()
			s.countCancel(cerr)
		}
	}) {
		return wredis.Decision{}, errBusy, nil
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.d, r.err, nil
	case <-t.C:
		left = context.DeadlineExceeded
	case <-ctx.Done():
		left = ctx.Err()
	case <-s.closeCtx.Done():
		left = ErrClosed
	}
	if !claimed.CompareAndSwap(false, true) {
		r := <-ch // the answer is in: the caller deals with it
		return r.d, r.err, nil
	}
	return wredis.Decision{}, nil, left
}

// admit is the head's loop: ask Redis (or the fallback), and sleep for the
// wait it prescribes, until admitted or failed.
func (s *Semaphore) admit(ctx context.Context, n int64, since time.Time, try bool) (bool, error) {
	for {
		select {
		case <-s.wake: // a Release before this attempt: it will see its effect
		default:
		}
		now := time.Now()
		s.mu.Lock()
		closed, paused := s.closed, s.paused
		down, probe, downErr := s.down, !now.Before(s.nextProbe), s.downErr
		if n >= s.notBeforeN && s.notBefore.After(paused) {
			// As good as a pause: Redis said so to an earlier head.
			paused = s.notBefore
		}
		s.mu.Unlock()
		switch {
		case closed:
			return false, ErrClosed
		case ctx.Err() != nil:
			return false, ctx.Err()
		}
		if now.Before(paused) {
			if try {
				return false, errTry
			}
			if dl, ok := ctx.Deadline(); ok && paused.After(dl) {
				return false, &wake.DeadlineError{Sentinel: ErrDeadline, Wait: paused.Sub(now)}
			}
			if err := s.sleep(ctx, paused.Sub(now), false); err != nil {
				return false, err
			}
			continue
		}
		if down && !probe {
			return s.fallback(ctx, n, since, try, downErr)
		}
		timeout := s.cfg.timeout
		if down {
			timeout = min(timeout, probeTimeout)
		}
		d, err, left := s.redisAdmit(ctx, n, timeout)
		s.mu.Lock()
		s.st.RedisAdmits++
		if d.StateLost {
			s.st.StateLost++
		}
		if d.LimitMismatch {
			s.st.LimitMismatches++
		}
		s.mu.Unlock()
		switch {
		case left == ErrClosed:
			return false, ErrClosed
		case left != nil && ctx.Err() != nil:
			return false, ctx.Err()
		case left != nil:
			err = left // no answer within the timeout
		}
		if err != nil {
			s.markDown(err, true)
			return s.fallback(ctx, n, since, try, err)
		}
		s.markUp()
		if d.OK {
			if s.afterAdmit != nil {
				s.afterAdmit()
			}
			if ctx.Err() != nil {
				s.cancelToken(d.Token)
				return false, ctx.Err()
			}
			if err := s.hold(d.Token, false, n, since); err != nil {
				s.cancelToken(d.Token)
				return false, err
			}
			return false, nil
		}
		if try {
			return false, errTry
		}
		wait := d.Wait
		if d.InFlight {
			wait = min(wait, s.inflightCap)
		} else {
			at := time.Now().Add(wait)
			s.mu.Lock()
			s.notBefore, s.notBeforeN = at, n
			s.mu.Unlock()
			if dl, ok := ctx.Deadline(); ok && at.After(dl) {
				return false, &wake.DeadlineError{Sentinel: ErrDeadline, Wait: wait}
			}
		}
		// Never ask again at once, whatever Redis said.
		wait = max(wait, MinRetry+rand.N(MinRetry)) + s.jitter(wait)
		if err := s.sleep(ctx, wait, d.InFlight); err != nil {
			return false, err
		}
	}
}

// fallback admits the call locally when there is a fallback, or fails it
// with ErrUnavailable wrapping cause.
func (s *Semaphore) fallback(ctx context.Context, n int64, since time.Time, try bool, cause error) (bool, error) {
	if s.local == nil {
		if try {
			return false, errTry
		}
		return false, s.unavailable(cause)
	}
	if n > s.localN {
		if try {
			return false, errTry
		}
		return false, fmt.Errorf("%w: weight %d exceeds the fallback's share of %d units: %w", ErrUnavailable, n, s.localN, s.causeOf(cause))
	}
	if try {
		if !s.local.TryAcquire(n) {
			return false, errTry
		}
	} else {
		lctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(s.closeCtx, cancel)
		err := s.local.Acquire(lctx, n)
		stop()
		cancel()
		if err != nil {
			if ctx.Err() == nil && s.closeCtx.Err() != nil {
				return false, ErrClosed
			}
			return false, err
		}
	}
	if err := s.hold("", true, n, since); err != nil {
		s.local.Release(n)
		return false, err
	}
	return true, nil
}

func (s *Semaphore) causeOf(cause error) error {
	if errors.Is(cause, context.DeadlineExceeded) || errors.Is(cause, context.Canceled) {
		// Our own round-trip bound, not the caller's context: do not let
		// the error match context.DeadlineExceeded.
		return fmt.Errorf("no answer within %v (%s)", s.cfg.timeout, cause.Error())
	}
	return cause
}

func (s *Semaphore) unavailable(cause error) error {
	return fmt.Errorf("%w: %w", ErrUnavailable, s.causeOf(cause))
}

// hold records an admitted call, or returns ErrClosed, recording nothing,
// once Close was called: no Acquire succeeds after Close.
func (s *Semaphore) hold(token string, local bool, n int64, since time.Time) error {
	wait := time.Since(since)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.seq++
	s.held[n] = append(s.held[n], &held{token: token, local: local, n: n, left: n, seq: s.seq})
	s.heldUnits += n
	s.st.Admitted++
	if local {
		s.st.FallbackAdmitted++
	}
	s.st.TotalWait += wait
	s.st.MaxWait = max(s.st.MaxWait, wait)
	return nil
}

// sleep sleeps d, or less when ctx ends (its error), Close is called
// (ErrClosed) or, if onRelease, a Release of this process comes (nil).
func (s *Semaphore) sleep(ctx context.Context, d time.Duration, onRelease bool) error {
	t := time.NewTimer(d)
	defer t.Stop()
	var woken <-chan struct{}
	if onRelease {
		woken = s.wake
	}
	select {
	case <-t.C:
		return nil
	case <-woken:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.closeCtx.Done():
		return ErrClosed
	}
}

// jitter draws the extra sleep added to a wait.
func (s *Semaphore) jitter(wait time.Duration) time.Duration {
	m := s.cfg.jitter
	if !s.cfg.jitterSet {
		m = min(wait/10, MaxDefaultJitter)
	}
	if m <= 0 {
		return 0
	}
	return rand.N(m + 1)
}

// markDown records a failed round trip. An admission (probe) pushes the
// next probe back, twice as far each time; other round trips only open the
// circuit if it was closed.
func (s *Semaphore) markDown(err error, probe bool) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.RedisErrors++
	s.downErr = err
	switch {
	case !s.down:
		s.down, s.backoff = true, probeMin
		s.nextProbe = now.Add(s.backoff)
	case probe:
		s.backoff = min(2*s.backoff, probeMax)
		s.nextProbe = now.Add(s.backoff)
	}
}

// markUp records a round trip that got an answer.
func (s *Semaphore) markUp() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		s.down, s.downErr, s.backoff = false, nil, 0
		s.st.Recoveries++
	}
}

// cancelToken takes back an admission whose caller gave up, waiting for
// the round trip at most WithTimeout.
func (s *Semaphore) cancelToken(token string) {
	err := s.bounded(s.cfg.timeout, func(ctx context.Context) error { return s.win.Cancel(ctx, token) })
	s.roundTrip(err)
	s.countCancel(err)
}

// countCancel counts the outcome of a cancellation.
func (s *Semaphore) countCancel(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err == nil:
		s.st.Cancelled++
	case errors.Is(err, wredis.ErrNotInFlight):
	default:
		s.st.CancelsFailed++
	}
}

// roundTrip records the outcome of a release, cancellation or pause.
func (s *Semaphore) roundTrip(err error) {
	if err != nil && !errors.Is(err, wredis.ErrNotInFlight) {
		s.markDown(err, false)
	} else {
		s.markUp()
	}
}

// Release ends n units (n ≥ 0) of this process's calls in flight; the
// instant of Release is the calls' end. It ends the oldest call of exactly
// n units admitted by this process; if there is none, it takes the n units
// from the oldest calls, ending each whose units are all released (a call
// partly released stays in flight in Redis: it counts longer, never less).
// A call admitted by Redis is ended by one round trip (the release script),
// so Release blocks for that long, at most WithTimeout whatever the
// client's options (the round trip runs on a goroutine of its own; one
// that takes longer goes on without the caller, and counts in
// Stats.ReleasesFailed); one admitted by the fallback is released locally. If Redis cannot be reached, the call's units
// come back when its lease runs out, plus the interval (Stats.ReleasesFailed
// counts it); if Redis no longer knows the call (a restart, or its lease ran
// out), Stats.ReleasesLost counts it. A Release wakes this process's head
// waiter if it was waiting for calls in flight to end. Release works after
// Close too. It panics if n is negative or more than this process holds, as
// x/sync does.
func (s *Semaphore) Release(n int64) {
	if n < 0 {
		panic("redissem: Release with negative weight")
	}
	if n == 0 {
		return
	}
	s.mu.Lock()
	if n > s.heldUnits {
		s.mu.Unlock()
		panic("redissem: released more than held")
	}
	s.heldUnits -= n
	var (
		done       []*held // calls all of whose units are released
		localUnits int64   // units of the fallback released
	)
	if q := s.held[n]; len(q) > 0 {
		e := q[0]
		s.popHeld(n)
		e.left = 0
		if e.local {
			localUnits = n
		}
		done = append(done, e)
	} else {
		for rest := n; rest > 0; {
			e := s.oldestHeld()
			s.popHeld(e.left)
			take := min(e.left, rest)
			rest -= take
			e.left -= take
			if e.local {
				localUnits += take
			}
			if e.left == 0 {
				done = append(done, e)
			} else {
				s.pushHeldFront(e)
			}
		}
	}
	s.mu.Unlock()
	for _, e := range done {
		if e.local {
			continue // released below, with the partial units
		}
		err := s.bounded(s.cfg.timeout, func(ctx context.Context) error { return s.win.Release(ctx, e.token) })
		s.roundTrip(err)
		if err != nil {
			s.mu.Lock()
			if errors.Is(err, wredis.ErrNotInFlight) {
				s.st.ReleasesLost++
			} else {
				s.st.ReleasesFailed++
			}
			s.mu.Unlock()
		}
	}
	if localUnits > 0 {
		s.local.Release(localUnits)
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Semaphore) popHeld(left int64) {
	q := s.held[left]
	q[0] = nil
	if len(q) == 1 {
		delete(s.held, left)
	} else {
		s.held[left] = q[1:]
	}
}

// oldestHeld returns the oldest call in flight (heldUnits > 0).
func (s *Semaphore) oldestHeld() *held {
	var o *held
	for _, q := range s.held {
		if o == nil || q[0].seq < o.seq {
			o = q[0]
		}
	}
	return o
}

// pushHeldFront files e, the oldest call in flight, under its units left.
func (s *Semaphore) pushHeldFront(e *held) {
	s.held[e.left] = append([]*held{e}, s.held[e.left]...)
}

// Do acquires one unit, runs fn, and releases the unit when fn returns or
// panics (the panic then goes on). It returns Acquire's error without
// running fn, or fn's error. It blocks like Acquire, and for the release's
// round trip.
func (s *Semaphore) Do(ctx context.Context, fn func(context.Context) error) error {
	return s.DoN(ctx, 1, fn)
}

// DoN is Do for a call of n units.
func (s *Semaphore) DoN(ctx context.Context, n int64, fn func(context.Context) error) error {
	if err := s.Acquire(ctx, n); err != nil {
		return err
	}
	defer s.Release(n)
	return fn(ctx)
}

// Pause holds every new start until the instant until, in every process
// sharing the limit: calls in flight go on, waiters keep waiting in order.
// This process's waiters and fallback are held at once; the other processes
// are held through Redis (the pause is written there in one round trip, the
// server's clock then counting the time left, and the admission script
// reads it). Overlapping pauses do not add up; the later end wins. A time
// in the past changes nothing. Pause blocks for that one round trip, at most
// WithTimeout; while Redis is unreachable the pause is local only (the
// failure counts in Stats.RedisErrors). Feed it from a 429 or 418
// response's Retry-After, capped.
func (s *Semaphore) Pause(until time.Time) {
	now := time.Now()
	d := until.Sub(now)
	if d <= 0 {
		return
	}
	s.mu.Lock()
	if until.After(s.paused) {
		s.paused = until
	}
	down := s.down
	s.mu.Unlock()
	if s.local != nil {
		s.local.Pause(until)
	}
	if down {
		return
	}
	err := s.bounded(s.cfg.timeout, func(ctx context.Context) error {
		_, err := s.win.PauseFor(ctx, d)
		return err
	})
	s.roundTrip(err)
}

// PauseFor is Pause(now + d): no new start, in any process, for d from now.
// A d ≤ 0 changes nothing.
func (s *Semaphore) PauseFor(d time.Duration) {
	if d <= 0 {
		return
	}
	s.Pause(time.Now().Add(d))
}

// Stats is a snapshot of a Semaphore's counters, for this process.
type Stats struct {
	// InFlight is the units held by this process's calls not yet
	// released, admitted by Redis or by the fallback.
	InFlight int64
	// Waiting is the number of this process's callers blocked in Acquire
	// (the head, talking to Redis, included).
	Waiting int
	// Admitted counts the calls admitted since New, by Acquire or
	// TryAcquire, through Redis or the fallback; an admission its caller
	// gave up on is not counted.
	Admitted uint64
	// FallbackAdmitted counts the calls of Admitted that the fallback
	// admitted while Redis was unreachable.
	FallbackAdmitted uint64
	// TotalWait is the time admitted calls spent in Acquire, summed;
	// TotalWait / Admitted is the mean wait.
	TotalWait time.Duration
	// MaxWait is the longest time one admitted call spent in Acquire.
	MaxWait time.Duration
	// PausedUntil is when the latest pause set in this process ends; zero
	// when none was set. It may lie in the past.
	PausedUntil time.Time
	// RedisAdmits counts the admission round trips (EVALSHA of the
	// admission script), refused, admitted or failed.
	RedisAdmits uint64
	// RedisErrors counts the round trips of any kind that failed (no
	// answer within WithTimeout, or a Redis error).
	RedisErrors uint64
	// Cancelled counts admissions taken back from Redis because the
	// caller's context ended as Redis admitted it.
	Cancelled uint64
	// CancelsFailed counts the cancellations that could not reach Redis:
	// those units count until the lease runs out, plus the interval.
	CancelsFailed uint64
	// ReleasesFailed counts the releases that could not reach Redis: those
	// units count until the lease runs out, plus the interval.
	ReleasesFailed uint64
	// ReleasesLost counts the releases of calls Redis no longer knew: it
	// lost its state (a restart), or the call outlived its lease.
	ReleasesLost uint64
	// Recoveries counts the times Redis answered again after being taken
	// as unreachable.
	Recoveries uint64
	// StateLost counts the admission round trips that found the limit's
	// state lost in Redis, all of it or part (evicted, deleted, a restart;
	// see window/redis, Lost state): each time the window is rebuilt and
	// held full for an interval. The admissions refused while it is held
	// are not counted again.
	StateLost uint64
	// LimitMismatches counts the admission round trips that found the
	// state written with another n (another process built with another
	// limit): they were decided under the smaller n.
	LimitMismatches uint64
	// Unavailable reports whether Redis is taken as unreachable now (until
	// a probe gets an answer): admissions go to the fallback, or fail.
	Unavailable bool
}

// Stats returns a snapshot of the counters. It never blocks for long.
func (s *Semaphore) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	st.InFlight = s.heldUnits
	st.Waiting = s.queue.Len()
	st.PausedUntil = s.paused
	st.Unavailable = s.down
	return st
}

// Close stops the semaphore: callers in Acquire return ErrClosed, and so
// do later calls to Acquire (TryAcquire returns false); an admission Redis
// grants to a caller as Close is called is cancelled there. Once Close has
// returned, no Acquire returns nil. Calls in flight may still be released;
// Release works after Close.
//
// Close waits for the Acquire calls in progress to return and for the
// round trips still running (those whose callers left after WithTimeout,
// and the cancellation of what they admitted), at most twice WithTimeout.
// A client that ignores its contexts' deadlines (built without
// ContextTimeoutEnabled) may keep such a round trip, and its goroutine,
// until its own read timeout, or until the client is closed. Close does
// not close the Redis client, and returns nil; calling it again only waits
// again.
func (s *Semaphore) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		s.closeFn()
	}
	var drained chan struct{}
	if s.pending > 0 || s.active > 0 {
		if s.drained == nil {
			s.drained = make(chan struct{})
		}
		drained = s.drained
	}
	s.mu.Unlock()
	if drained != nil {
		t := time.NewTimer(2 * s.cfg.timeout)
		defer t.Stop()
		select {
		case <-drained:
		case <-t.C:
		}
	}
	return nil
}
