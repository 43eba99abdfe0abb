package remote

import (
	"cmp"
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/ratesem/ratesem/internal/rspec"
)

// # Adaptive limits
//
// A limiter whose limit the fleet learns (Rule.Adapt) keeps its level in
// Redis (rspec.Adapter, internal/rstore's Store.AdaptAll): every process
// reports its ended calls there and the level is stored as the limiter's
// limit, which every admission adopts. Reports cost round trips, so they
// are batched per limiter: the successes of a limiter go in one round trip
// at most per eighth of its Per (adaptEvery), sent by the call whose
// success finds it passed (or, when they may prove the level, by a timer
// then if no success comes to send them: flushLaterLocked), or at once
// when they would prove the level (as
// far as this process can tell: at most one more round trip per Per, a
// level is proven once per Per at most); a throttle goes at once, with the
// successes queued before it (a cut must reach the fleet before its next
// admissions, and reads the successes of the last Per). Successes are
// queued in two groups, the calls admitted before the level's last change
// as Redis last answered it and those admitted since, so that the former
// never keep the latter from proving the next level. Reports are sent on
// goroutines of the engine, never on the caller's, and dropped while
// Redis is taken as unreachable (the fallback then limits, under its own
// limits) or after Close.
//
// The cadence was measured (TestAdaptiveRedisFleet in clientpool, 3
// processes, W = 250 ms): at a quarter of Per the fleet took 15 windows to
// climb back after the limit tripled, against 8 for one process in
// process; at an eighth, 9. Eight round trips per Per per limiter per
// process are few next to the admissions (one per call).

// adaptEvery: the successes of a limiter are reported at most once per
// Per/adaptEvery (see # Adaptive limits).
const adaptEvery = 8

// ErrNoAdapt is the error of an adaptive report to an Engine whose Store
// keeps no adaptive limits (not an rspec.Adapter: the engine's fakes).
var ErrNoAdapt = errors.New("ratesem: the Redis store keeps no adaptive limits")

// adapts holds the successes of this process not yet reported, per
// limiter.
type adapts struct {
	mu      sync.Mutex
	m       map[limKey]*adaptQ
	sweepAt int
	closed  bool      // the engine closed: no flush timer is armed any more
	watch   sync.Once // watches the engine's Close (stopFlushes)
}

// adaptQ is one limiter's successes not yet reported, in two groups: the
// calls admitted before the level's last change as Redis last answered it
// (they cannot prove the next level) and those admitted since, so that the
// former do not keep the latter from proving it (a report's Start is the
// earliest of its calls).
type adaptQ struct {
	old, cur adaptGroup
	since    time.Time // the level's last change, Redis's clock, as last answered; zero: unknown
	cyc      int64     // the successes proving the level since then, as last answered
	newest   time.Time // the latest admission (Redis's clock) of the successes queued in cur
	last     time.Time // this process's clock: the latest report of successes sent
	per      time.Duration
	busy     bool               // a report of successes is under way
	timer    *time.Timer        // the flush of the successes queued, when scheduled (flushLater)
	then     func(int64, error) // the latest AdaptSuccess's, told a flush's answer
	n        int64              // the level Redis last answered; 0: none yet
	sent     uint64             // the reports sent (report numbers them)
	answered uint64             // the number of the latest report whose answer n, cyc and since hold
	c        rspec.Charge
	bounds   rspec.AdaptBounds
	// tell orders the thens of q's reports (report): held while one is
	// told the latest level and runs, so that a then told an older level
	// never runs after one told a newer (the engine applies the level it
	// is told).
	tell sync.Mutex
}

// adaptGroup is successes queued: their count, the earliest admission
// (Redis's clock) and the sum of their durations.
type adaptGroup struct {
	count int64
	start time.Time
	dur   time.Duration
}

// add counts count units of successes whose latencies sum to dur (each
// unit weighs its call's latency: a call of w units adds w·latency), both
// saturating.
func (g *adaptGroup) add(start time.Time, dur time.Duration, count int64) {
	g.count = satAdd(g.count, count)
	g.dur = time.Duration(satAdd(int64(g.dur), int64(dur)))
	if g.start.IsZero() || start.Before(g.start) {
		g.start = start
	}
}

// event is g as one report (g.count > 0).
func (g *adaptGroup) event() rspec.AdaptEvent {
	return rspec.AdaptEvent{Start: g.start, Count: g.count, Latency: max(g.dur/time.Duration(g.count), time.Microsecond)}
}

// CanAdapt reports whether the Engine's Store keeps adaptive limits
// (rspec.Adapter). It does not block.
func (e *Engine) CanAdapt() bool {
	_, ok := e.st.(rspec.Adapter)
	return ok
}

// Start returns Redis's clock at c's admission (rspec.Decision.Now), the
// instant adaptive reports take as the call's start; the zero time.Time
// for a call the fallback admitted, or of no charges.
func (c *Call) Start() time.Time {
	if c.fb {
		return time.Time{}
	}
	return c.d.Now
}

// AdaptSuccess reports a call of units units (its weight, or settled
// weight: the level counts units) of c's limiter in scope, admitted at start
// (Redis's clock: Call.Start), that ended without a throttle after dur
// (this process's clock), to the limiter's adaptive level kept in Redis
// with bounds b. It never blocks: the success is queued, and sent with
// the limiter's other successes at most once per eighth of c.Spec's Per
// (by a timer of the engine when they may prove the level and no later
// success sends them), or at once when they would prove the level (see #
// Adaptive limits).
// then, when not nil, is told the level Redis answered (units per Per)
// after a report this call sent (the successes of the calls that sent
// none are in it), or the latest level known when a fresher answer (of
// another report, or of AdaptCeiling) came first, on a goroutine of the
// engine, outside the engine's locks; the thens of one limiter's reports
// run one at a time, each told the latest level when it starts (a then
// told an older level never runs after one told a newer); when
// the level changed, this process
// also forgets what it learned of the limiter's next admission and calls
// Config.OnRoom (as after SetLimit). A success with a zero start (the
// fallback's call) is not reported: nothing tells when it started on
// Redis's clock. It returns ErrNoAdapt when the Store keeps no adaptive
// limits; nothing else (a report that fails marks Redis unreachable, as
// any round trip).
func (e *Engine) AdaptSuccess(scope string, c rspec.Charge, b rspec.AdaptBounds, start time.Time, dur time.Duration, units int64, then func(n int64, err error)) error {
	if !e.CanAdapt() {
		return ErrNoAdapt
	}
	if start.IsZero() || c.Spec == nil || units <= 0 {
		return nil
	}
	k := limKey{scope, c.Rule, c.Key}
	now := time.Now()
	a := &e.ad
	a.mu.Lock()
	q := a.queueLocked(k, c, b, now)
	if start.Before(q.since) {
		q.old.add(start, satMul(max(dur, 0), units), units)
	} else {
		q.cur.add(start, satMul(max(dur, 0), units), units)
		if start.After(q.newest) {
			q.newest = start
		}
	}
	if then != nil {
		q.then = then
	}
	if q.busy || now.Sub(q.last) < q.per/adaptEvery && !q.provesLocked() {
		e.flushLaterLocked(k, q, now)
		a.mu.Unlock()
		return nil
	}
	evs := q.takeLocked(now)
	a.mu.Unlock()
	e.report(k, q, evs, true, then)
	return nil
}

// AdaptThrottle reports a call of c's limiter in scope, admitted at start
// (Redis's clock: Call.Start), that the server throttled, to the
// limiter's adaptive level kept in Redis with bounds b: one round trip at
// once, on a goroutine of the engine; it never blocks. A throttle of a
// call started before the level's last cut changes nothing (hysteresis:
// every process may report one overload). A zero start (the fallback's
// call) cuts only a level that was never cut. then and the errors as
// AdaptSuccess.
func (e *Engine) AdaptThrottle(scope string, c rspec.Charge, b rspec.AdaptBounds, start time.Time, then func(n int64, err error)) error {
	if !e.CanAdapt() {
		return ErrNoAdapt
	}
	if c.Spec == nil {
		return nil
	}
	k := limKey{scope, c.Rule, c.Key}
	a := &e.ad
	now := time.Now()
	a.mu.Lock()
	q := a.queueLocked(k, c, b, now)
	if q.busy {
		a.mu.Unlock()
		e.report(k, q, []rspec.AdaptEvent{{Throttled: true, Start: start}}, false, then)
		return nil
	}
	// the successes queued go first, in the same round trip: the cut
	// reads the successes of the last Per
	evs := append(q.takeLocked(now), rspec.AdaptEvent{Throttled: true, Start: start})
	a.mu.Unlock()
	e.report(k, q, evs, true, then)
	return nil
}

// provesLocked reports whether q's successes queued would prove the
// level now, as far as this process can tell (the successes Redis counted
// at its last answer, and a Per passed since the level's change by the
// latest admission queued, which is at or before Redis's now): such a
// report goes at once, not Per/adaptEvery after the last (at most one
// more round trip per Per: a level is proven once per Per at most).
// a.mu must be held.
func (q *adaptQ) provesLocked() bool {
	return q.n > 0 && !q.since.IsZero() && q.cur.count > 0 && q.cyc+q.cur.count >= q.n && q.newest.Sub(q.since) >= q.per
}

// flushLaterLocked schedules a report of q's successes an eighth of Per
// after the last (at once when that has passed) when they may prove the
// level (some were admitted at it, three quarters of a Per or more after
// its change, as Redis last answered it) and none is scheduled: such
// successes go then even when no success follows them. Without it the
// last successes of a burst waited for the next success of this process,
// up to a whole Per when a fleet admits in bursts (a completion window
// whose slots free together), and the proof of a level (a Per passed and
// n successes, the fleet's) slipped by as much: 3 processes took 1.15 to
// 2 windows a cycle where one process took 1.07. Successes that cannot
// prove the level yet wait for the next success, as before: flushing them
// too cost the fleet about 2.5 points of throughput once settled
// (TestAdaptiveRedisFleet's server, 3 processes, alternating runs: 90.0
// to 90.5% against 92.1 to 93.4%). It keeps the bound of one round trip
// per eighth of Per. a.mu must be held.
func (e *Engine) flushLaterLocked(k limKey, q *adaptQ, now time.Time) {
	a := &e.ad
	if a.closed || e.closeCtx.Err() != nil || q.timer != nil || q.busy || q.cur.count == 0 || q.n == 0 || q.since.IsZero() || q.newest.Sub(q.since) < q.per-q.per/4 {
		return
	}
	a.watch.Do(func() { context.AfterFunc(e.closeCtx, e.stopFlushes) })
	var t *time.Timer
	t = time.AfterFunc(max(q.last.Add(q.per/adaptEvery).Sub(now), 0), func() {
		a.mu.Lock()
		if q.timer == t {
			q.timer = nil
		}
		now := time.Now()
		if a.closed || q.busy || q.cur.count == 0 {
			a.mu.Unlock()
			return
		}
		if now.Sub(q.last) < q.per/adaptEvery {
			e.flushLaterLocked(k, q, now) // a report went since: later
			a.mu.Unlock()
			return
		}
		evs, then := q.takeLocked(now), q.then
		a.mu.Unlock()
		e.report(k, q, evs, true, then)
	})
	q.timer = t
}

// stopFlushes stops the flush timers pending, and keeps any from being
// armed, once the engine is closed: each would keep the closed engine and
// its queues until it fired, an eighth of Per on (45 days for a Per of a
// year), for every limiter with successes queued.
func (e *Engine) stopFlushes() {
	a := &e.ad
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	for _, q := range a.m {
		if q.timer != nil {
			q.timer.Stop()
			q.timer = nil
		}
	}
}

// queueLocked returns k's queue, made if needed (with c and b, which the
// latest report sets); before it makes one, once the map has doubled since
// the last time, it drops the queues idle for more than their Per. a.mu
// must be held.
func (a *adapts) queueLocked(k limKey, c rspec.Charge, b rspec.AdaptBounds, now time.Time) *adaptQ {
	q := a.m[k]
	if q == nil {
		if a.m == nil {
			a.m, a.sweepAt = map[limKey]*adaptQ{}, 64
		}
		if len(a.m) >= a.sweepAt {
			for k, q := range a.m {
				if q.old.count == 0 && q.cur.count == 0 && !q.busy && now.Sub(q.last) > q.per {
					if q.timer != nil {
						q.timer.Stop() // nothing to flush
						q.timer = nil
					}
					delete(a.m, k)
				}
			}
			a.sweepAt = max(64, 2*len(a.m))
		}
		q = &adaptQ{}
		a.m[k] = q
	}
	q.c, q.bounds, q.per = c, b, c.Spec.Limit.Per
	return q
}

// takeLocked takes q's successes as one report (the older group first),
// marks q busy and returns the report's events. a.mu must be held.
func (q *adaptQ) takeLocked(now time.Time) []rspec.AdaptEvent {
	evs := make([]rspec.AdaptEvent, 0, 2)
	for _, g := range []*adaptGroup{&q.old, &q.cur} {
		if g.count > 0 {
			evs = append(evs, g.event())
		}
		*g = adaptGroup{}
	}
	q.newest = time.Time{}
	q.busy, q.last = true, now
	return evs
}

// report sends evs for q's limiter on a goroutine of the engine (succ: a
// report of successes, which clears q.busy when done and goes back to
// q's queue when it cannot be sent).
func (e *Engine) report(k limKey, q *adaptQ, evs []rspec.AdaptEvent, succ bool, then func(int64, error)) {
	ad := e.st.(rspec.Adapter)
	a := &e.ad
	a.mu.Lock()
	c, b := q.c, q.bounds
	q.sent++
	seq := q.sent
	a.mu.Unlock()
	e.mu.Lock()
	ok := !e.down && !e.closed && e.spawnLocked(func() {
		ctx, cancel := context.WithTimeout(context.Background(), e.cfg.Timeout)
		lv, err := ad.AdaptAll(ctx, k.scope, c, b, evs...)
		cancel()
		e.roundTrip(err)
		n := lv.N
		a.mu.Lock()
		if succ {
			q.busy = false
		}
		// the answer of a report sent before one already answered (a
		// throttle's and a success's round trips run at once) is older:
		// it teaches nothing
		fresh := err == nil && seq > q.answered
		changed := fresh && q.n != 0 && n != q.n
		if fresh {
			q.answered = seq
			q.n, q.cyc = n, lv.Cycled
			if !lv.Changed.Equal(q.since) {
				// the successes queued since, admitted before it,
				// cannot prove the next level: they move to the old
				// group. An earlier change than the one known is
				// Redis's clock gone back (the law re-anchors its
				// change to it): taken as well, or every success
				// would count as admitted before it (never flushed by
				// the timer, never sent at once) for as long as the
				// clock's jump.
				q.since = lv.Changed
				if q.cur.count > 0 && q.cur.start.Before(q.since) {
					q.old.add(q.cur.start, q.cur.dur, q.cur.count)
					q.cur = adaptGroup{}
				}
			}
		}
		if succ {
			// on the level and change just answered (before them, the
			// first report's successes queued meanwhile saw no level)
			e.flushLaterLocked(k, q, time.Now())
		}
		a.mu.Unlock()
		if changed {
			e.forget(k.scope, c)
		}
		if then != nil {
			q.tell.Lock()
			defer q.tell.Unlock()
			n = 0
			if err == nil {
				// the latest level, not the older answer's when a fresher
				// one came first (or came since: its then runs after)
				a.mu.Lock()
				n = q.n
				a.mu.Unlock()
			}
			then(n, err)
		}
	})
	e.mu.Unlock()
	if !ok && succ {
		// Not sent (Redis down, Close, too many round trips): the
		// successes wait for the next report.
		a.mu.Lock()
		q.busy = false
		for _, ev := range evs {
			if ev.Throttled {
				continue // dropped, as every report while Redis is down
			}
			g := &q.cur
			if ev.Start.Before(q.since) {
				g = &q.old
			}
			g.add(ev.Start, ev.Latency*time.Duration(ev.Count), ev.Count)
		}
		a.mu.Unlock()
	}
}

// satAdd is a + b for a, b ≥ 0, saturating at math.MaxInt64.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// satMul is d·n for d, n ≥ 0, saturating at the longest Duration.
func satMul(d time.Duration, n int64) time.Duration {
	if n > 0 && d > time.Duration(math.MaxInt64/n) {
		return time.Duration(math.MaxInt64)
	}
	return d * time.Duration(n)
}

// AdaptCeiling stores the fleet's ceilings of b (b.Set with b.Force:
// SetLimit on an adaptive rule; b.Learned: a limit the key learned from a
// reply) with the adaptive level of c's limiter in scope, kept in Redis,
// and returns the level now in force (units per c.Spec's Per; the level
// of a report sent after it whose answer came first, when one did: that
// answer is fresher): one round trip, bounded by the Redis timeout and ctx, on the caller's goroutine;
// the level comes down to the ceiling at once if above, and is stored as
// the limiter's limit for every process. When the level changed, this
// process forgets what it learned of the limiter's next admission and
// calls Config.OnRoom (as after SetLimit). Errors: ErrNoAdapt when the
// Store keeps no adaptive limits; ctx's error; the Store's for an invalid
// charge or bounds; else an error matching ErrUnavailable wrapping the round
// trip's (Redis is then taken as unreachable). Safe for concurrent use.
func (e *Engine) AdaptCeiling(ctx context.Context, scope string, c rspec.Charge, b rspec.AdaptBounds) (int64, error) {
	ad, ok := e.st.(rspec.Adapter)
	if !ok {
		return 0, ErrNoAdapt
	}
	if c.Spec == nil {
		return 0, errors.New("ratesem: AdaptCeiling: nil Spec")
	}
	type res struct {
		lv  rspec.AdaptLevel
		err error
	}
	k := limKey{scope, c.Rule, c.Key}
	a := &e.ad
	// Numbered with the reports (report): an answer of a report sent
	// after this round trip and answered first is fresher than this one.
	a.mu.Lock()
	q := a.m[k]
	if q == nil {
		q = a.queueLocked(k, c, b, time.Now())
		q.bounds = rspec.AdaptBounds{} // the reports set theirs (b forces a ceiling)
	}
	q.sent++
	seq := q.sent
	a.mu.Unlock()
	r, left := bounded(e, ctx, e.cfg.Timeout, nil, func(octx context.Context) res {
		lv, err := ad.AdaptAll(octx, scope, c, b, rspec.AdaptEvent{})
		return res{lv, err}
	}, nil)
	err := cmp.Or(left, r.err)
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if callerError(err) {
			return 0, err
		}
		e.markDown(err, false)
		return 0, e.unavailable(err)
	}
	e.markUp()
	a.mu.Lock()
	n := r.lv.N
	changed := false
	if seq > q.answered {
		changed = q.n != n
		q.n, q.cyc = n, r.lv.Cycled
		// A report sent before this round trip is answered with an older
		// state when it ran first: not fresh any more (report).
		q.answered = seq
		if r.lv.Changed.After(q.since) {
			q.since = r.lv.Changed
			if q.cur.count > 0 && q.cur.start.Before(q.since) {
				q.old.add(q.cur.start, q.cur.dur, q.cur.count)
				q.cur = adaptGroup{}
			}
		}
	} else {
		// A report (or a ceiling) sent after this round trip was answered
		// first, with a fresher state: its level is the one in force, and
		// what it changed was forgotten then.
		n = q.n
	}
	a.mu.Unlock()
	if changed {
		e.forget(scope, c)
	}
	return n, nil
}
