package remote

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ratesem/ratesem/internal/rspec"
)

// # Adaptive limits
//
// A limiter whose limit the fleet learns (Rule.Adapt) keeps its level in
// Redis (rspec.Adapter, internal/rstore's Store.Adapt): every process
// reports its ended calls there and the level is stored as the limiter's
// limit, which every admission adopts. Reports cost round trips, so they
// are batched per limiter: the successes of a limiter go in one round trip
// at most per quarter of its Per (the law proves a level once per Per, so
// a quarter delays a proof by at most that), sent by the call whose
// success finds the quarter passed; a throttle goes at once, in a round
// trip of its own (a cut must reach the fleet before its next
// admissions). Reports are sent on goroutines of the engine, never on the
// caller's, and dropped while Redis is taken as unreachable (the fallback
// then limits, under its own limits) or after Close.

// ErrNoAdapt is the error of an adaptive report to an Engine whose Store
// keeps no adaptive limits (not an rspec.Adapter: the engine's fakes).
var ErrNoAdapt = errors.New("ratesem: the Redis store keeps no adaptive limits")

// adapts holds the successes of this process not yet reported, per
// limiter.
type adapts struct {
	mu      sync.Mutex
	m       map[limKey]*adaptQ
	sweepAt int
}

// adaptQ is one limiter's successes not yet reported.
type adaptQ struct {
	count  int64         // successes queued
	start  time.Time     // the earliest admission (Redis's clock) of those queued
	dur    time.Duration // the sum of their durations
	last   time.Time     // this process's clock: the latest report of successes sent
	per    time.Duration // the limiter's Per
	busy   bool          // a report of successes is under way
	n      int64         // the level Redis last answered; 0: none yet
	c      rspec.Charge
	bounds rspec.AdaptBounds
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

// AdaptSuccess reports a call of c's limiter in scope, admitted at start
// (Redis's clock: Call.Start), that ended without a throttle after dur
// (this process's clock), to the limiter's adaptive level kept in Redis
// with bounds b. It never blocks: the success is queued, and sent with
// the limiter's other successes at most once per quarter of c.Spec's Per
// (see # Adaptive limits). then, when not nil, is told the level Redis
// answered (units per Per) after a report this call sent, on a goroutine
// of the engine, outside any lock; when the level changed, this process
// also forgets what it learned of the limiter's next admission and calls
// Config.OnRoom (as after SetLimit). A success with a zero start (the
// fallback's call) is not reported: nothing tells when it started on
// Redis's clock. It returns ErrNoAdapt when the Store keeps no adaptive
// limits; nothing else (a report that fails marks Redis unreachable, as
// any round trip).
func (e *Engine) AdaptSuccess(scope string, c rspec.Charge, b rspec.AdaptBounds, start time.Time, dur time.Duration, then func(n int64, err error)) error {
	if !e.CanAdapt() {
		return ErrNoAdapt
	}
	if start.IsZero() || c.Spec == nil {
		return nil
	}
	k := limKey{scope, c.Rule, c.Key}
	now := time.Now()
	a := &e.ad
	a.mu.Lock()
	q := a.queueLocked(k, c, b, now)
	q.count++
	q.dur += max(dur, 0)
	if q.start.IsZero() || start.Before(q.start) {
		q.start = start
	}
	if q.busy || now.Sub(q.last) < q.per/4 {
		a.mu.Unlock()
		return nil
	}
	ev := q.takeLocked(now)
	a.mu.Unlock()
	e.report(k, q, ev, true, then)
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
	a.mu.Lock()
	q := a.queueLocked(k, c, b, time.Now())
	a.mu.Unlock()
	e.report(k, q, rspec.AdaptEvent{Throttled: true, Start: start}, false, then)
	return nil
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
				if q.count == 0 && !q.busy && now.Sub(q.last) > q.per {
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

// takeLocked takes q's successes as one report, marks q busy and returns
// the report. a.mu must be held.
func (q *adaptQ) takeLocked(now time.Time) rspec.AdaptEvent {
	ev := rspec.AdaptEvent{Start: q.start, Count: q.count, Latency: max(q.dur/time.Duration(q.count), time.Microsecond)}
	q.count, q.dur, q.start = 0, 0, time.Time{}
	q.busy, q.last = true, now
	return ev
}

// report sends ev for q's limiter on a goroutine of the engine (succ: a
// report of successes, which clears q.busy when done and goes back to
// q's queue when it cannot be sent).
func (e *Engine) report(k limKey, q *adaptQ, ev rspec.AdaptEvent, succ bool, then func(int64, error)) {
	ad := e.st.(rspec.Adapter)
	a := &e.ad
	a.mu.Lock()
	c, b := q.c, q.bounds
	a.mu.Unlock()
	e.mu.Lock()
	ok := !e.down && !e.closed && e.spawnLocked(func() {
		ctx, cancel := context.WithTimeout(context.Background(), e.cfg.Timeout)
		n, err := ad.Adapt(ctx, k.scope, c, b, ev)
		cancel()
		e.roundTrip(err)
		a.mu.Lock()
		if succ {
			q.busy = false
		}
		changed := err == nil && q.n != 0 && n != q.n
		if err == nil {
			q.n = n
		}
		a.mu.Unlock()
		if changed {
			e.forget(k.scope, c)
		}
		if then != nil {
			if err != nil {
				n = 0
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
		q.count += ev.Count
		q.dur += ev.Latency * time.Duration(ev.Count)
		if q.start.IsZero() || ev.Start.Before(q.start) {
			q.start = ev.Start
		}
		a.mu.Unlock()
	}
}
