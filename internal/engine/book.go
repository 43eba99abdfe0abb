package engine

import (
	"time"

	"github.com/ratesem/ratesem/window"
)

// book is the bookkeeping the Engine drives, the one place where the two
// modes part: inProc (the window policies, decided under the Engine's
// lock) and *redisMode (internal/remote, one round trip per decision, made
// outside the lock). The queue code (start, queueLocked, decideLocked),
// the registry (newLimiterLocked, keyLimitLocked) and the entry points
// (Acquire, TryAcquire, Release, the take-back of an admission an observer
// lost, ObserveHeaders, Reconcile, SetLimit, Pause, Throttled, Close) call
// it without asking which mode they are in; only merge (the number of
// charges Redis takes) and await (a waiter's goroutine asks Redis,
// redisMode.askRedis) reach *redisMode itself.
type book interface {
	try(t *Ticket, charges []Charge) (time.Duration, error)
	release(t *Ticket)
	takeBack(t *Ticket)
	// learn and observe are ObserveHeaders for t's charge hd (its index i):
	// a report of Rule.Learn, a count of Rule.Usage.
	learn(t *Ticket, hd *held, in Learned, date time.Time)
	observe(t *Ticket, i int, used int64)
	reconcile(rs *ruleState, key string, used int64) error
	setLimit(rs *ruleState, l window.Limit) error
	// pauseCap bounds a caller's pause (in Redis mode by WithMaxPause);
	// paused tells the store of a pause set on rule and key.
	pauseCap(until time.Time) time.Time
	paused(rule, key string, until time.Time)
	// admitNowLocked is start's decision for a call of hs (t's) that
	// arrives: admitted at once (ok, t filled in), or to wait, in the
	// queues (queue) or asking Redis at once.
	admitNowLocked(t *Ticket, hs []held, now time.Time) (queue, ok bool)
	// newWaiterLocked gives w, a call about to wait, what its decisions
	// take.
	newWaiterLocked(w *waiter)
	decideLocked(w *waiter, now time.Time) (at time.Time, needRelease, ok bool)
	// policyFor is the window of a new key of rs (nil in Redis mode);
	// keyLimitLocked the limit a key that knows one is held to.
	policyFor(rs *ruleState) window.Policy
	keyLimitLocked(l *limiter) window.Limit
	// adaptSuccess and adaptThrottle feed the adaptive law of l (Rule.Adapt)
	// a call admitted at start (ns since the epoch) that ended at now
	// without a throttle (having cost units: the level counts units), or
	// was throttled (its reply came at now); t, for a throttle, is the
	// throttled call (nil when the report has none). In process they
	// update l.ad and its window; in Redis mode they go to the script that
	// keeps the key's level for the fleet (adapt_redis.go; successes go
	// from redisMode.release, which does not run releaseLocked).
	adaptSuccess(l *limiter, start, units int64, now time.Time)
	adaptThrottle(l *limiter, t *Ticket, start int64, now time.Time)
	close() error
}

// inProc is the in-process bookkeeping: the Engine itself.
type inProc Engine

func (b *inProc) pauseCap(until time.Time) time.Time     { return until }
func (b *inProc) paused(string, string, time.Time)       {}
func (b *inProc) newWaiterLocked(*waiter)                {}
func (b *inProc) policyFor(rs *ruleState) window.Policy  { return rs.policyFor() }
func (b *inProc) keyLimitLocked(l *limiter) window.Limit { return l.limit() }
func (b *inProc) close() error                           { return nil }

// admitNowLocked admits the call at once when nobody waits on its
// limiters and its windows admit it now; else it queues.
func (b *inProc) admitNowLocked(t *Ticket, hs []held, now time.Time) (queue, ok bool) {
	p := (*Engine)(b)
	if queuedLocked(hs) {
		return true, false
	}
	if _, _, ok := p.admitLocked(hs, nil, now); ok {
		t.at = p.mono(now)
		return false, true
	}
	return true, false
}
