package engine

import (
	"context"
	"net/http"
	"time"

	"github.com/ratesem/ratesem/internal/rspec"
	"github.com/ratesem/ratesem/window"
)

// book is the bookkeeping the Engine drives at its entry points, the one
// place where the two modes part: inProc (the window policies, decided
// under the Engine's lock) and *redisMode (internal/remote, one round trip
// per decision, made outside the lock). The queue code (decideLocked) and
// the entry points (Acquire, TryAcquire, Release, the take-back of an
// admission an observer lost, ObserveHeaders, Reconcile, SetLimit, Pause,
// Throttled) call it without asking which mode they are in.
type book interface {
	acquire(ctx context.Context, t *Ticket, charges []Charge) error
	try(t *Ticket, charges []Charge) (time.Duration, error)
	release(t *Ticket)
	takeBack(t *Ticket)
	observe(t *Ticket, h http.Header)
	reconcile(rs *ruleState, key string, used int64) error
	setLimit(rs *ruleState, l window.Limit) error
	// pauseCap bounds a caller's pause (in Redis mode by WithMaxPause);
	// paused tells the store of a pause set on rule and key.
	pauseCap(until time.Time) time.Time
	paused(rule, key string, until time.Time)
	decideLocked(w *waiter, now time.Time) (at time.Time, needRelease, ok, asking bool)
}

// oneBook is the one-rule front's bookkeeping (One): the part of One's
// methods where the modes part, the ticketless calls of a semaphore.
// *oneProc decides on the clock in process (One's fast paths step around
// it); *oneRemote goes through the Engine's Redis mode and keeps the held
// calls a Release(n) ends.
type oneBook interface {
	acquire(ctx context.Context, n int64) error
	tryWait(n int64) (time.Duration, error)
	release(n int64)
	begin(ctx context.Context, n int64) (Call, error)
	// endLocked ends c, no longer live (t: its call in Redis), entered
	// with the engine's lock held: it unlocks.
	endLocked(c Call, t *Ticket, actual int64)
	setLimit(n int64, per time.Duration) error
	stats() Stats
}

// inProc is the in-process bookkeeping: the Engine itself.
type inProc Engine

func (b *inProc) pauseCap(until time.Time) time.Time { return until }
func (b *inProc) paused(string, string, time.Time)   {}

// The Redis bookkeeping (redis.go, learn.go, redis_learn.go).

func (r *redisMode) acquire(ctx context.Context, t *Ticket, charges []Charge) error {
	return r.p.acquireRedis(ctx, t, charges)
}
func (r *redisMode) try(t *Ticket, charges []Charge) (time.Duration, error) {
	return r.p.tryRedis(t, charges)
}
func (r *redisMode) release(t *Ticket)                { t.releaseRedisAny() }
func (r *redisMode) takeBack(t *Ticket)               { t.Release() } // ends at once in Redis, on the safe side
func (r *redisMode) observe(t *Ticket, h http.Header) { t.observeRedis(h) }
func (r *redisMode) reconcile(rs *ruleState, key string, used int64) error {
	r.p.reconcileRedis(rs, key, used, rspec.Read{})
	return nil
}
func (r *redisMode) setLimit(rs *ruleState, l window.Limit) error { return r.p.setLimitRedis(rs, l) }
func (r *redisMode) pauseCap(until time.Time) time.Time {
	return capRedisPause(until, r.p.now(), r.p.maxPause)
}
func (r *redisMode) paused(rule, key string, until time.Time) { r.p.pauseRedis(rule, key, until) }
func (r *redisMode) decideLocked(w *waiter, now time.Time) (time.Time, bool, bool, bool) {
	return r.p.redisDecideLocked(w, now)
}
