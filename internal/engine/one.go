package engine

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/sched"
	"github.com/ratesem/ratesem/internal/wake"
	"github.com/ratesem/ratesem/internal/winfast"
	"github.com/ratesem/ratesem/window"
)

// One is the engine of the one-rule front (semaphore.RateSemaphore): an
// Engine with one rule and one limiter, key "", driven without tickets
// (Release(n) ends n units) and with the semantics of a weighted semaphore
// (x/sync's Weighted when the rule has no rate). Its waiting is the
// Engine's: the limiter's queue by priority class, the wake heap and its
// timer, deadline fail-fast, queue caps and budgets, pauses, observers.
// What it adds is a fast path for a call admitted at once with nobody
// waiting (one lock, the window's cached decision, no clock read, no
// allocation) and one for Release (one clock read outside the lock).
//
// In Redis mode (NewShared) every method goes to the Redis engine
// (oneRemote): the one seam of the fronts' Redis mode.
type One struct {
	// The fields of the fast paths first, together.
	slow         bool // Redis mode or a foreign policy: the fast paths step aside
	real         bool // the real clock: nanos is time.Since(e.epoch)
	doneUsesTime bool
	timedDone    atomic.Bool    // doneUsesTime && per > 0, kept by SetLimit; read by Release without the lock
	conc         int64          // the concurrency cap in force: min(size, capOpt) (under e.mu)
	callUnits    int64          // units of the live Calls (under e.mu)
	admitted     uint64         // (under e.mu)
	fast         winfast.Window // l.policy's fast form, on the epoch e.epoch
	obs          func(ratesem.Event)

	// The engine and its one limiter, held by value: the fast paths
	// reach them without a pointer to follow. e and l point at them.
	lim limiter
	Engine

	e    *Engine
	l    *limiter
	rs   *ruleState
	orig window.Policy

	// Under e.mu.
	size    int64
	per     time.Duration
	capOpt  int64 // WithMaxUnitsInFlight, or -1
	fit     int64 // the heaviest call that can ever start: min(conc, capacity)
	waitSum time.Duration
	waitMax time.Duration
	// The calls Begin admitted (see semaphore.Call), by slot: reused
	// through freeCalls, so Begin allocates nothing once grown.
	calls     []callSlot
	freeCalls []int

	rem *oneRemote // Redis mode; nil in process
}

type callSlot struct {
	gen uint64  // odd while a call is live in the slot
	t   *Ticket // Redis mode: the call in Redis
}

// NewOne returns the in-process engine of one rule whose window is p
// (owned from now on), set up by cfg (Concurrency -1: no cap beyond N). A
// limit of N 0 or Per 0 is allowed: Per 0 is x/sync's Weighted of N units.
func NewOne(p window.Policy, cfg Config) *One {
	l := p.Limit()
	clk := wake.NewClock(cfg.Clock)
	fast := winfast.Of(p)
	_, foreign := fast.(winfast.Foreign)
	o := &One{fast: fast, orig: p, obs: cfg.Observer, slow: foreign,
		real: cfg.Clock == nil, doneUsesTime: fast.DoneUsesTime(), size: l.N, per: l.Per, capOpt: cfg.Concurrency}
	e := &o.Engine
	o.e = e
	e.rules, e.clock, e.observer, e.maxQueue = make(map[string]*ruleState), clk, cfg.Observer, int32(min(cfg.MaxQueue, math.MaxInt32))
	e.epoch = fast.Start(clk.Now())
	rs := &ruleState{Rule: &Rule{Limit: l}, keys: make(map[string]*limiter, 1), one: true}
	lim := &o.lim
	lim.rule, lim.policy, lim.refs = rs, p, 1 // pinned: never idle, never evicted
	o.l, o.rs = lim, rs
	rs.keys[""] = lim
	e.rules[""] = rs
	e.ruleList = []*ruleState{rs}
	e.live = 1
	o.setCapLocked()
	o.timedDone.Store(o.doneUsesTime && l.Per > 0)
	return o
}

// setCapLocked sets the concurrency cap and the heaviest call after a
// change of the limit.
func (o *One) setCapLocked() {
	o.conc = o.size
	if o.capOpt >= 0 && o.capOpt < o.size {
		o.conc = o.capOpt
	}
	o.rs.limit = window.Limit{N: o.size, Per: o.per}
	o.rs.capacity = o.fast.Capacity()
	o.rs.cap = o.conc
	o.fit = min(o.conc, o.rs.capacity)
}

// nanos reads the clock as the window takes instants: ns since the epoch.
func (o *One) nanos() int64 {
	if o.real {
		return int64(time.Since(o.e.epoch))
	}
	return o.e.mono(o.e.now())
}

// admitCachedLocked is the clock-free fast path: nobody waiting, no pause,
// room in the cap, and the window's cached state shows room.
func (o *One) admitCachedLocked(n int64) bool {
	l := o.l
	if l.q != nil || n > o.conc-l.inflight || l.fb != nil && l.fb.paused != 0 || !o.fast.AdmitCached(n) {
		return false
	}
	l.inflight += n
	o.admitted++
	return true
}

// admitNowLocked admits n units at now when nobody waits and the window
// and the cap allow, or returns the instant it could (zero: only a release
// can help) and false.
func (o *One) admitNowLocked(n int64, now time.Time) (time.Time, bool) {
	l := o.l
	if fb := l.fb; fb != nil && fb.paused != 0 && o.e.mono(now) >= fb.paused {
		fb.paused = 0 // over: the fast path may run again
	}
	hs := [1]held{{lim: l, n: n}}
	at, needRelease, ok := o.e.admitLocked(hs[:], nil, now)
	if ok {
		o.admitted++
		return time.Time{}, true
	}
	if needRelease {
		return time.Time{}, false
	}
	return at, false
}

// tooLargeLocked is the error of a weight above what can ever start.
func (o *One) tooLargeLocked(n int64) error {
	if n > o.size {
		return fmt.Errorf("%w: weight %d, limit %d per %v", ratesem.ErrWeightTooLarge, n, o.size, o.per)
	}
	if c := o.rs.capacity; n > c {
		return fmt.Errorf("%w: weight %d, capacity %d (burst) of the window", ratesem.ErrWeightTooLarge, n, c)
	}
	return fmt.Errorf("%w: weight %d, concurrency cap %d", ratesem.ErrWeightTooLarge, n, o.conc)
}

// Acquire is semaphore.RateSemaphore.Acquire.
func (o *One) Acquire(ctx context.Context, n int64) error {
	if n < 0 || o.slow {
		return o.acquireOther(ctx, n)
	}
	done := ctx.Done()
	o.mu.Lock()
	select {
	case <-done:
		// ctx being done happened before we hold the lock; fail even
		// though the units might be free, as x/sync does.
		o.mu.Unlock()
		o.observeFailed(n, nil, ctx.Err())
		return ctx.Err()
	default:
	}
	// admitCachedLocked written out: the call was a part of the cost.
	if o.lim.q == nil && n <= o.conc-o.lim.inflight && (o.lim.fb == nil || o.lim.fb.paused == 0) && o.fast.AdmitCached(n) {
		o.lim.inflight += n
		o.admitted++
		o.mu.Unlock()
		if o.obs != nil {
			o.emitHeld(n, nil, nil)
		}
		return nil
	}
	_, err := o.acquireLocked(ctx, n, nil)
	return err
}

// acquireOther is Acquire in Redis mode, for a negative n, and for a
// foreign policy.
func (o *One) acquireOther(ctx context.Context, n int64) error {
	if o.rem != nil {
		return o.rem.acquire(ctx, n)
	}
	if n < 0 {
		o.observeFailed(n, nil, ratesem.ErrNegativeWeight)
		return fmt.Errorf("%w %d: Acquire", ratesem.ErrNegativeWeight, n)
	}
	return o.acquireForeign(ctx, n)
}

// acquireForeign is Acquire for a policy that runs a caller's code:
// acquireLocked releases the lock in a defer, so that a panic leaves it
// unlocked; the cached decision is not tried (it is never taken).
func (o *One) acquireForeign(ctx context.Context, n int64) error {
	o.mu.Lock()
	if err := ctx.Err(); err != nil {
		o.mu.Unlock()
		o.observeFailed(n, nil, err)
		return err
	}
	_, err := o.acquireLocked(ctx, n, nil)
	return err
}

// acquireLocked is the part of Acquire and Begin after the fast path,
// entered with e.mu held (it unlocks): n units could not be admitted from
// the cached state. It returns the admission instant. c, for Begin, gets
// the call registered at it.
func (o *One) acquireLocked(ctx context.Context, n int64, c *Call) (time.Time, error) {
	e := o.e
	locked := true
	defer func() {
		if locked {
			e.mu.Unlock()
		}
	}()
	if n > o.fit && o.per > 0 {
		err := o.tooLargeLocked(n)
		locked = false
		e.mu.Unlock()
		o.observeFailed(n, nil, err)
		return time.Time{}, err
	}
	now := e.now()
	if o.l.q == nil && n <= o.fit {
		if _, ok := o.admitNowLocked(n, now); ok {
			if c != nil {
				*c = o.newCallLocked(n, e.mono(now))
			}
			locked = false
			e.mu.Unlock()
			o.observeAdmitted(n, nil, c)
			return now, nil
		}
	}
	// It must wait: only now are the context's settings read.
	if e.maxQueue > 0 && o.l.waiting >= e.maxQueue {
		err := fmt.Errorf("%w: %d callers wait (WithMaxQueue)", ratesem.ErrQueueFull, o.l.waiting)
		locked = false
		e.mu.Unlock()
		o.observeFailed(n, nil, err)
		return time.Time{}, err
	}
	w := &waiter{held: []held{{lim: o.l, n: n}}, rank: e.ranker.Next(sched.PriorityOf(ctx)), ready: make(chan struct{}), since: now}
	w.deadline, _ = ctx.Deadline()
	if d := sched.QueueWaitOf(ctx); d > 0 {
		w.qdead = now.Add(d)
	}
	w.nodes = []qnode{{w: w}}
	o.l.waiting++
	o.l.refs++
	w.elem = e.waiters.PushBack(w)
	if e.hook != nil {
		e.hook(w, false)
	}
	if n > o.fit {
		// No rate (Per 0), as in x/sync: a call heavier than the cap
		// waits aside for its context, or for a SetLimit under which it
		// fits, without holding up the others.
		w.parked = true
	} else {
		e.tryWaiterLocked(w, now)
		e.settleLocked(now)
	}
	locked = false
	e.mu.Unlock()
	o.observeQueued(w)
	if err := e.await(ctx, w); err != nil {
		o.observeFailed(n, w, err)
		return time.Time{}, err
	}
	e.mu.Lock()
	select {
	case <-ctx.Done():
		// Admitted as ctx ended: undone, as if it never happened.
		e.undoLocked(w)
		e.unrefLocked(o.l, e.now())
		e.settleLocked(e.now())
		e.mu.Unlock()
		o.observeFailed(n, w, ctx.Err())
		return time.Time{}, ctx.Err()
	default:
	}
	e.unrefLocked(o.l, w.granted)
	o.admitted++
	wait := max(w.granted.Sub(w.since), 0)
	o.waitSum += wait
	o.waitMax = max(o.waitMax, wait)
	if c != nil {
		*c = o.newCallLocked(n, e.mono(w.granted))
	}
	e.mu.Unlock()
	o.observeAdmitted(n, w, c)
	return w.granted, nil
}

// TryAcquire is semaphore.RateSemaphore.TryAcquire.
func (o *One) TryAcquire(n int64) bool {
	if o.rem != nil {
		return o.rem.tryAcquire(n)
	}
	d, err := o.TryAcquireWait(n)
	return err == nil && d == 0
}

// TryAcquireWait is semaphore.RateSemaphore.TryAcquireWait.
func (o *One) TryAcquireWait(n int64) (time.Duration, error) {
	if o.rem != nil {
		return o.rem.tryAcquireWait(n)
	}
	if n < 0 {
		return 0, fmt.Errorf("%w %d: TryAcquireWait", ratesem.ErrNegativeWeight, n)
	}
	e := o.e
	e.mu.Lock()
	ok, d, err := o.tryLocked(n)
	e.mu.Unlock()
	if ok {
		o.observeAdmitted(n, nil, nil)
	}
	return d, err
}

func (o *One) tryLocked(n int64) (ok bool, d time.Duration, err error) {
	e := o.e
	defer func() {
		if r := recover(); r != nil {
			e.mu.Unlock()
			panic(r)
		}
	}()
	if n > o.fit {
		if o.per > 0 || n > o.size {
			return false, 0, o.tooLargeLocked(n)
		}
		return false, 0, ratesem.ErrInFlight
	}
	if q := o.l.q; q != nil && q.head != nil {
		// Callers wait: it never overtakes them. The wait of the head,
		// when known, is the least this call would wait.
		if h := q.head; h.refused && h.when != 0 {
			return false, max(e.instant(h.when).Sub(e.now()), time.Nanosecond), nil
		}
		return false, 0, ratesem.ErrInFlight
	}
	if o.admitCachedLocked(n) {
		return true, 0, nil
	}
	now := e.now()
	at, ok := o.admitNowLocked(n, now)
	switch {
	case ok:
		return true, 0, nil
	case at.IsZero():
		return false, 0, ratesem.ErrInFlight
	}
	return false, max(at.Sub(now), time.Nanosecond), nil
}

// Release is semaphore.RateSemaphore.Release. OverReleased gives the
// panic's message.
func (o *One) Release(n int64) {
	if n < 0 || o.slow {
		o.releaseOther(n)
		return
	}
	var now int64 // 0 when the window does not read it
	timed := o.timedDone.Load()
	if timed {
		// Outside the lock: the clock read is the dearest step.
		if o.real {
			now = int64(time.Since(o.epoch))
		} else {
			now = o.mono(o.now())
		}
	}
	o.mu.Lock()
	if n > o.lim.inflight-o.callUnits {
		o.overReleaseLocked(n)
	}
	o.lim.inflight -= n
	if !timed && o.doneUsesTime && o.per > 0 {
		now = o.nanos() // SetLimit raced with the read of timedDone
	}
	o.fast.Done(now, n)
	if o.lim.q != nil {
		o.markPending(o.lim.q)
		o.settleLocked(o.now())
	}
	o.mu.Unlock()
}

// overReleaseLocked unlocks and panics for a Release of n units that
// Acquire and TryAcquire do not hold.
func (o *One) overReleaseLocked(n int64) {
	held, calls := o.lim.inflight-o.callUnits, o.callUnits
	o.mu.Unlock()
	panic(OverReleased(n, held, calls))
}

// releaseOther is Release in Redis mode, for a negative n, and for a
// foreign policy (the lock released in a defer: the policy may panic).
func (o *One) releaseOther(n int64) {
	if o.rem != nil {
		o.rem.releaseOne(n)
		return
	}
	if n < 0 {
		panic("ratesem: Release with negative weight")
	}
	now := o.nanos()
	o.mu.Lock()
	unlocked := false
	defer func() {
		if !unlocked {
			o.mu.Unlock()
		}
	}()
	if n > o.lim.inflight-o.callUnits {
		unlocked = true
		o.overReleaseLocked(n)
	}
	o.lim.inflight -= n
	o.fast.Done(now, n)
	if o.lim.q != nil {
		o.markPending(o.lim.q)
		o.settleLocked(o.now())
	}
}

// OverReleased is the panic of a Release of n units that Acquire and
// TryAcquire do not hold (held units), in process and over Redis alike:
// x/sync's message, or, when the units are those of Begin's Calls (calls
// units), what to do instead.
func OverReleased(n, held, calls int64) string {
	if n <= held+calls {
		return "ratesem: Release of units held by a Call from Begin: end it with Call.End"
	}
	return "semaphore: released more than held"
}

// Pause is semaphore.RateSemaphore.Pause.
func (o *One) Pause(until time.Time) {
	if o.rem != nil {
		o.rem.pause(until)
		return
	}
	e := o.e
	set := func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		now := e.now()
		if !until.After(now) || o.l.paused() != 0 && e.mono(until) <= o.l.paused() {
			return false
		}
		e.pauseLocked(o.l, until, now)
		if o.l.q != nil {
			e.markPending(o.l.q)
			e.settleLocked(now)
		}
		return true
	}()
	if set && o.obs != nil {
		o.obs(ratesem.Event{Kind: ratesem.Paused, Until: until, Pause: until.Sub(e.now()), Source: ratesem.SourceCaller})
	}
}

// Now reads the engine's clock.
func (o *One) Now() time.Time { return o.e.now() }

// SetLimit is semaphore.RateSemaphore.SetLimit, for n ≥ 0 and per ≥ 0.
func (o *One) SetLimit(n int64, per time.Duration) error {
	if o.rem != nil {
		return o.rem.setLimit(n, per)
	}
	e := o.e
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	o.size, o.per = n, per
	o.fast.SetLimit(e.mono(now), n, per)
	o.setCapLocked()
	o.timedDone.Store(o.doneUsesTime && per > 0)
	// Waiters heavier than the cap leave the queue (they fail under a
	// rate, wait aside without one); those aside that fit again rejoin
	// it by arrival order.
	for el := e.waiters.Front(); el != nil; {
		next := el.Next()
		w := el.Value.(*waiter)
		switch n := w.held[0].n; {
		case n > o.fit && o.per > 0:
			e.finishLocked(w, o.tooLargeLocked(n))
		case n > o.fit && !w.parked:
			if w.nodes[0].inq {
				e.dequeueLocked(&w.nodes[0])
			}
			w.parked = true
		case n <= o.fit && w.parked:
			w.parked = false
			e.tryWaiterLocked(w, now)
		}
		el = next
	}
	if o.l.q != nil {
		e.markPending(o.l.q)
	}
	e.settleLocked(now)
	return nil
}

// Limit is semaphore.RateSemaphore.Limit.
func (o *One) Limit() window.Limit {
	if o.rem != nil {
		return o.rem.spec().Limit
	}
	o.e.mu.Lock()
	defer o.e.mu.Unlock()
	return window.Limit{N: o.size, Per: o.per}
}

// Stats is semaphore.Stats, field for field.
type Stats struct {
	InFlight         int64
	Waiting          int
	Admitted         uint64
	TotalWait        time.Duration
	MaxWait          time.Duration
	PausedUntil      time.Time
	FallbackAdmitted uint64
	FallbackCarried  uint64
	RedisAdmits      uint64
	RedisErrors      uint64
	Cancelled        uint64
	CancelsFailed    uint64
	ReleasesFailed   uint64
	ReleasesDropped  uint64
	ReleasesLost     uint64
	Recoveries       uint64
	StateLost        uint64
	LimitMismatches  uint64
	Unavailable      bool
}

// Stats is semaphore.RateSemaphore.Stats.
func (o *One) Stats() Stats {
	if o.rem != nil {
		st := o.rem.stats()
		o.e.mu.Lock()
		st.InFlight += o.callUnits // Begin's calls, not held by remote
		o.e.mu.Unlock()
		return st
	}
	e := o.e
	e.mu.Lock()
	defer e.mu.Unlock()
	st := Stats{InFlight: o.l.inflight, Waiting: int(o.l.waiting), Admitted: o.admitted, TotalWait: o.waitSum, MaxWait: o.waitMax}
	if p := o.l.paused(); p != 0 {
		st.PausedUntil = e.instant(p)
	}
	return st
}

// Close is semaphore.RateSemaphore.Close.
func (o *One) Close() error {
	if o.rem != nil {
		return o.e.Close()
	}
	return nil
}

// SetTestHooks sets, for tests, fns called under the engine's lock: onWake
// on every timer wake-up, onWaiter when a waiter (id) is made (done false)
// and when its wait ends (done true, err its failure or nil), with the
// number of waiting calls.
func (o *One) SetTestHooks(onWake func(), onWaiter func(id any, done bool, err error, waiting int)) {
	o.e.mu.Lock()
	defer o.e.mu.Unlock()
	o.e.onWake = onWake
	if onWaiter == nil {
		o.e.hook = nil
		return
	}
	o.e.hook = func(w *waiter, done bool) { onWaiter(w, done, w.err, int(o.l.waiting)) }
}

// Locked reports whether the engine's lock is held (tests).
func (o *One) Locked() bool {
	if o.e.mu.TryLock() {
		o.e.mu.Unlock()
		return false
	}
	return true
}
