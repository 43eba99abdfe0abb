package engine

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/remote"
	"github.com/ratesem/ratesem/internal/wake"
	"github.com/ratesem/ratesem/internal/win"
	"github.com/ratesem/ratesem/window"
)

// One is the engine of the one-rule front (semaphore.RateSemaphore): an
// Engine with one rule and one limiter, key "", driven without tickets
// (Release(n) ends n units) and with the semantics of a weighted semaphore
// (x/sync's Weighted when the rule has no rate). Its waiting is the
// Engine's own code, not a copy: a call that must wait is queued by
// queueLocked and waits in Engine.wait as a Pool's call does (the limiter's
// queue by priority class, the wake heap and its timer, deadline
// fail-fast, queue caps and budgets, cancellation without trace); a try is
// tryHeldLocked, a pause Engine.Pause, a new limit refitLocked, the end of
// a Call endLocked, the events emitCharges; Close (semaphore's) is
// Engine.Close itself.
//
// What One adds on top: a fast path for a call admitted at once with
// nobody waiting (one lock, the window's cached decision, no clock read,
// no allocation), and, on the clock, a call admitted at once without
// allocating (Engine.admitLocked over one held on the stack); Release(n)
// without a ticket (one clock read outside the lock; an over-release
// panics as x/sync's does); the calls of Begin by slot; the semaphore's
// Stats; and a rule without a rate (Per 0), where a call heavier than the
// cap waits aside (waiter.parked) instead of failing.
//
// Where the modes part, a method over Redis goes to the Engine's one
// (*oneRemote, made by NewShared): over Redis the cached decision never
// admits (conc is -1) and Acquire goes on to it; Release steps aside on
// one flag (slow, which a foreign policy sets too: its Done may panic, and
// the fast path holds the lock without a defer).
type One struct {
	// The fields of the fast paths first, together.
	slow         bool // Redis mode or a foreign policy: Release steps aside (releaseSlow)
	real         bool // the real clock: Release reads time.Since(e.epoch), not the clock
	doneUsesTime bool
	timedDone    atomic.Bool // doneUsesTime && per > 0, kept by SetLimit; read by Release without the lock
	conc         int64       // the concurrency cap in force: min(N, capOpt), rs.cap (under e.mu); -1 over Redis
	callUnits    int64       // units of the live Calls (under e.mu)
	admitted     uint64      // (under e.mu)
	fast         win.Window  // l.policy's fast form, on the epoch e.epoch
	obs          func(ratesem.Event)

	// The engine and its one limiter, held by value: the fast paths
	// reach them without a pointer to follow. e and l point at them.
	lim limiter
	Engine

	e  *Engine
	l  *limiter
	rs *ruleState

	// Under e.mu.
	capOpt  int64 // WithMaxUnitsInFlight, or -1
	waitSum time.Duration
	waitMax time.Duration
	// The calls Begin admitted (see semaphore.Call), by slot: reused
	// through freeCalls, so Begin allocates nothing once grown.
	calls     []callSlot
	freeCalls []int
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
	fast := win.Of(p)
	_, foreign := fast.(win.Foreign)
	o := &One{fast: fast, obs: cfg.Observer, slow: foreign,
		real: cfg.Clock == nil, doneUsesTime: fast.DoneUsesTime(), capOpt: cfg.Concurrency}
	o.Engine.book = (*inProc)(&o.Engine)
	o.initOne("", l, p, clk, cfg)
	o.e.epoch = fast.Start(clk.Now())
	o.setLimitLocked(l)
	return o
}

// initOne makes o's Engine one of a single rule, name, of limit l and
// window p (nil in Redis mode), whose one key "" is o's limiter, pinned
// (never idle, never evicted); on clk, with cfg's observer and queue cap.
func (o *One) initOne(name string, l window.Limit, p window.Policy, clk wake.Clock, cfg Config) {
	e := &o.Engine
	o.e = e
	e.rules, e.clock, e.observer, e.maxQueue = make(map[string]*ruleState), clk, cfg.Observer, int32(min(cfg.MaxQueue, math.MaxInt32))
	rs := &ruleState{Rule: &Rule{Name: name, Limit: l}, keys: make(map[string]*limiter, 1), one: true}
	lim := &o.lim
	lim.rule, lim.policy, lim.refs = rs, p, 1
	o.l, o.rs = lim, rs
	rs.keys[""] = lim
	e.rules[name] = rs
	e.ruleList = []*ruleState{rs}
	e.live = 1
}

// setLimitLocked makes l the rule's limit: the window's capacity, the
// concurrency cap.
func (o *One) setLimitLocked(l window.Limit) {
	o.conc = l.N
	if o.capOpt >= 0 && o.capOpt < l.N {
		o.conc = o.capOpt
	}
	o.rs.limit, o.rs.capacity, o.rs.cap = l, o.fast.Capacity(), o.conc
	o.timedDone.Store(o.doneUsesTime && l.Per > 0)
}

// admitCachedLocked is the clock-free fast path: nobody waiting, no pause,
// room in the cap, and the window's cached state shows room for n units.
func (o *One) admitCachedLocked(n int64) bool {
	if o.lim.q == nil && n <= o.conc-o.lim.inflight && (o.lim.fb == nil || o.lim.fb.paused == 0) && o.fast.AdmitCached(n) {
		o.lim.inflight += n
		o.admitted++
		return true
	}
	return false
}

// unpauseLocked clears a pause that is over at now: the fast path, which
// reads no clock, may run again.
func (o *One) unpauseLocked(now time.Time) {
	if fb := o.l.fb; fb != nil && fb.paused != 0 && o.e.mono(now) >= fb.paused {
		fb.paused = 0
	}
}

// Acquire is semaphore.RateSemaphore.Acquire.
func (o *One) Acquire(ctx context.Context, n int64) error {
	if n < 0 {
		return o.negative(n, "Acquire")
	}
	done := ctx.Done()
	o.mu.Lock()
	select {
	case <-done:
		// ctx being done happened before we hold the lock; fail even
		// though the units might be free, as x/sync does.
		o.mu.Unlock()
		o.observeFailed(n, ctx.Err())
		return ctx.Err()
	default:
	}
	// admitCachedLocked written out: the call was a part of the cost.
	if o.lim.q == nil && n <= o.conc-o.lim.inflight && (o.lim.fb == nil || o.lim.fb.paused == 0) && o.fast.AdmitCached(n) {
		o.lim.inflight += n
		o.admitted++
		o.mu.Unlock()
		if o.obs != nil {
			o.emitHeld(n, nil)
		}
		return nil
	}
	if o.one != nil { // over Redis the cached state never admits
		o.mu.Unlock()
		_, err := o.one.acquireLocal(ctx, n)
		return err
	}
	return o.acquireLocked(ctx, n, nil)
}

// negative returns the ratesem.ErrNegativeWeight error of op for n < 0,
// reported (observeFailed).
func (o *One) negative(n int64, op string) error {
	err := fmt.Errorf("%w %d: %s", ratesem.ErrNegativeWeight, n, op)
	o.observeFailed(n, err)
	return err
}

// acquireLocked is the part of Acquire and Begin after the fast path,
// entered with e.mu held (it unlocks): n units could not be admitted from
// the cached state. c, for Begin, gets the call registered at the
// admission. A call admitted on the clock at once allocates nothing; one
// that must wait goes through the Engine's own queueing (queueLocked,
// Engine.wait) as the Pool's calls do.
func (o *One) acquireLocked(ctx context.Context, n int64, c *Call) error {
	w, err := o.startLocked(ctx, n, c)
	if w == nil {
		if err != nil {
			o.observeFailed(n, err)
		} else if o.obs != nil {
			o.emitHeld(n, c)
		}
		return err
	}
	ch := []Charge{{Rule: o.rs.Name, Weight: n}}
	if err := o.wait(ctx, &Ticket{pool: o.e, held: w.held, charges: ch}, w, ch); err != nil {
		return err
	}
	wait := max(w.granted.Sub(w.since), 0)
	o.mu.Lock()
	o.unrefLocked(o.l, w.granted)
	o.admitted++
	o.waitSum += wait
	o.waitMax = max(o.waitMax, wait)
	if c != nil {
		*c = o.newCallLocked(n, o.mono(w.granted))
	}
	o.mu.Unlock()
	return nil
}

// startLocked admits n units at once (a nil waiter and error), fails, or
// queues the call and returns its waiter; it unlocks o.mu, in a defer: a
// foreign policy may panic.
func (o *One) startLocked(ctx context.Context, n int64, c *Call) (*waiter, error) {
	defer o.mu.Unlock()
	ch := [1]Charge{{Rule: o.rs.Name, Weight: n}}
	if err := o.tooHeavyLocked(ch[:]); err != nil && o.rs.limit.Per > 0 {
		return nil, err // without a rate, it waits aside (x/sync's Weighted)
	}
	now := o.now()
	if o.l.q == nil && n <= o.rs.fit() {
		o.unpauseLocked(now)
		hs := [1]held{{lim: o.l, n: n}}
		if _, _, ok := o.admitLocked(hs[:], nil, now); ok {
			o.admitted++
			if c != nil {
				*c = o.newCallLocked(n, o.mono(now))
			}
			return nil, nil
		}
	}
	o.refOne(o.l) // the waiter's: queueLocked and await drop it on failure
	return o.queueLocked(ctx, []held{{lim: o.l, n: n}}, now, true)
}

// TryAcquire is semaphore.RateSemaphore.TryAcquire.
func (o *One) TryAcquire(n int64) bool {
	d, err := o.TryAcquireWait(n)
	return err == nil && d == 0
}

// TryAcquireWait is semaphore.RateSemaphore.TryAcquireWait.
func (o *One) TryAcquireWait(n int64) (time.Duration, error) {
	if n < 0 {
		return 0, fmt.Errorf("%w %d: TryAcquireWait", ratesem.ErrNegativeWeight, n)
	}
	if o.one != nil {
		return o.one.tryWait(n)
	}
	o.e.mu.Lock()
	d, err := o.tryLocked(n)
	if d == 0 && err == nil && o.obs != nil {
		o.emitHeld(n, nil)
	}
	return d, err
}

// tryLocked is TryAcquireWait with e.mu held (it unlocks, in a defer: a
// foreign policy may panic), for n ≥ 0.
func (o *One) tryLocked(n int64) (time.Duration, error) {
	defer o.mu.Unlock()
	ch := [1]Charge{{Rule: o.rs.Name, Weight: n}}
	if err := o.tooHeavyLocked(ch[:]); err != nil {
		if o.rs.limit.Per > 0 || n > o.rs.limit.N {
			return 0, err
		}
		return 0, ratesem.ErrInFlight // without a rate: a weight above the burst waits
	}
	if o.admitCachedLocked(n) {
		return 0, nil
	}
	now := o.now()
	o.unpauseLocked(now)
	hs := [1]held{{lim: o.l, n: n}}
	d, err := o.tryHeldLocked(hs[:], now)
	if d == 0 && err == nil {
		o.admitted++
	}
	return d, err
}

// Release is semaphore.RateSemaphore.Release. OverReleased gives the
// panic's message.
func (o *One) Release(n int64) {
	if n < 0 || o.slow {
		o.releaseSlow(n)
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
	if !timed && o.doneUsesTime && o.rs.limit.Per > 0 {
		now = o.mono(o.now()) // SetLimit raced with the read of timedDone
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

// releaseSlow is Release off the fast path: for a negative n, over
// Redis, and for a foreign policy (the lock released in a defer: the
// policy may panic).
func (o *One) releaseSlow(n int64) {
	if n < 0 {
		panic("ratesem: Release with negative weight")
	}
	if o.one != nil {
		o.one.releaseSettled(n, n)
		return
	}
	o.mu.Lock()
	if n > o.l.inflight-o.callUnits {
		o.overReleaseLocked(n)
	}
	defer o.mu.Unlock()
	now := o.now()
	o.endLocked(o.l, 0, n, n, false, now)
	o.settleLocked(now)
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

// Pause is semaphore.RateSemaphore.Pause: Engine.Pause of the one key.
func (o *One) Pause(until time.Time) {
	_ = o.e.Pause(o.rs.Name, "", until) // the key exists: no error; capped at WithMaxPause's default over Redis
}

// Now reads the engine's clock.
func (o *One) Now() time.Time { return o.e.now() }

// SetLimit is semaphore.RateSemaphore.SetLimit, for n ≥ 0 and per ≥ 0.
func (o *One) SetLimit(n int64, per time.Duration) error {
	if o.one != nil {
		return o.one.setLimit(n, per)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.now()
	o.fast.SetLimit(o.mono(now), n, per)
	o.setLimitLocked(window.Limit{N: n, Per: per})
	o.refitLocked(o.rs, now)
	return nil
}

// Limit is semaphore.RateSemaphore.Limit.
func (o *One) Limit() window.Limit {
	l, _ := o.e.Limit(o.rs.Name) // the rule exists and learns nothing
	return l
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

// Stats is semaphore.RateSemaphore.Stats: over Redis, with the Redis
// engine's counts.
func (o *One) Stats() Stats {
	r := o.e.one
	var es remote.Stats
	if r != nil {
		es = r.rem.eng.Stats()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	st := Stats{InFlight: o.l.inflight, Waiting: int(o.l.waiting), Admitted: o.admitted, TotalWait: o.waitSum, MaxWait: o.waitMax}
	if p := o.l.state().paused; p != 0 {
		st.PausedUntil = o.instant(p)
	}
	if r == nil {
		return st
	}
	return Stats{
		InFlight:         r.heldUnits + o.callUnits, // Begin's calls are not among the held ones
		Waiting:          st.Waiting,
		Admitted:         es.Admitted,
		TotalWait:        st.TotalWait,
		MaxWait:          st.MaxWait,
		PausedUntil:      es.PausedUntil,
		FallbackAdmitted: es.FallbackAdmitted,
		FallbackCarried:  es.Carried,
		RedisAdmits:      es.RedisAdmits,
		RedisErrors:      es.RedisErrors,
		Cancelled:        es.Cancelled,
		CancelsFailed:    es.CancelsFailed,
		ReleasesFailed:   es.ReleasesFailed,
		ReleasesDropped:  es.ReleasesDropped,
		ReleasesLost:     es.ReleasesLost,
		Recoveries:       es.Recoveries,
		StateLost:        es.StateLost,
		LimitMismatches:  es.LimitMismatches,
		Unavailable:      es.Unavailable,
	}
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
