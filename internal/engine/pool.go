package engine

import (
	"cmp"
	"container/list"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/adapt"
	"github.com/ratesem/ratesem/internal/remote"
	"github.com/ratesem/ratesem/internal/rspec"
	"github.com/ratesem/ratesem/internal/sat"
	"github.com/ratesem/ratesem/internal/sched"
	"github.com/ratesem/ratesem/internal/wake"
	"github.com/ratesem/ratesem/internal/win"
	"github.com/ratesem/ratesem/window"
)

// Engine owns waiting for both fronts (clientpool.Pool, the many-rule
// front, and semaphore.RateSemaphore, the one-rule front): limiters keyed
// by (rule, key), created lazily, per-limiter FIFO queues by priority
// class, a min-heap of wake instants with one timer, deadline fail-fast,
// queue caps and budgets, pauses, eviction of idle keys, learned limits and
// quotas, reconcile, settle and observers. Its semantics are the ones
// clientpool.Pool documents. The bookkeeping is in process (the window
// policies, decided under the engine's lock) or, with a Store (Config),
// in Redis (internal/remote, reached through redisMode: the one seam).
//
// An Engine is safe for concurrent use by multiple goroutines.
type Engine struct {
	mu       sync.Mutex // first: the one-rule fast paths take it with the fields before it
	epoch    time.Time  // the clock's reading at New: limiter instants are offsets from it
	scope    string     // Table.Scope (Redis mode)
	rules    map[string]*ruleState
	ruleList []*ruleState // the rules in Table order, for eviction
	clock    wake.Clock
	idle     time.Duration
	maxKeys  int
	maxPause time.Duration
	observer func(ratesem.Event)
	book     book // inProc, or *redisMode (redisrate.Shared): the bookkeeping the engine drives

	waiters   list.List    // of *waiter, in arrival order; read only by SetLimit
	ranker    sched.Ranker // the waiters' ranks (priority, then arrival)
	maxQueue  int32        // waiting calls per limiter; 0: no cap (WithMaxQueue)
	live      int          // limiters in the registry
	wakes     wakeHeap     // queues whose head may be admitted at a known instant
	pend      []*lqueue    // queues whose head must be tried again (settleLocked)
	evictNext int          // the rule the next eviction starts with
	evictWork int          // idle limiters looked at by eviction, ever (tests)
	timer     wake.Timer
	evicted   []ratesem.Event // events of evicted keys (and noteLocked's) not yet reported (observer only)
	evictedN  atomic.Int32    // len(evicted), read without the lock
	// hook, set only by tests, is called under the lock when a waiter is
	// made (done false) and when its wait ends (done true).
	hook func(w *waiter, done bool)
	// one is the Redis part of a One in Redis mode (the semaphore front
	// over redisrate.NewSemaphore): its events name it, its errors too.
	one *oneRemote
	// onWake, set only by tests, is called under the lock on every timer
	// wake-up.
	onWake func()
}

type ruleState struct {
	*Rule
	limit    window.Limit
	capacity int64         // the heaviest charge the window can admit
	cap      int64         // concurrency cap per key; math.MaxInt64 when none
	quiet    int64         // ns of no activity after which a key's window has forgotten every call
	learning bool          // Rule.Learn with no limit known yet for any key (Pool.Limit reports N 0)
	unknown  bool          // Rule.Learn and no Limit.N given: each new key starts unknown
	quota    bool          // Rule.Learn reported the server's windows: keys admit against their budgets
	skew     time.Duration // the host's clock ahead of the server's, from the Date headers (ResetMargin)
	skewAt   time.Time     // when skew was measured
	keys     map[string]*limiter
	adCeil   int64 // Rule.Adapt: the ceiling of every new key's level (Adaptive.Ceiling, or SetLimit's N)
	adSet    bool  // Rule.Adapt in Redis mode: adCeil was set by SetLimit here (sent as the fleet's ceiling, AdaptBounds.Set)
	one      bool  // the rule of a One (the semaphore front)
	// adQuota is, for Rule.Adapt with Learn in Redis mode once the rule
	// counts in the server's windows (quota), the Spec of a key that
	// learned no limit: an rspec.Quota of the rule's limit (adapt_redis.go).
	adQuota *rspec.Spec
	// Redis mode: the rule's window as Redis keeps it (replaced, never
	// changed, by SetLimit), and whether SetLimit was called here.
	spec    *rspec.Spec
	setHere bool
	// idle lists the limiters with refs == 0, oldest last use first.
	idleHead, idleTail *limiter
}

// limiter is the state of one (rule, key). Instants are nanoseconds since
// the pool's epoch (8 bytes rather than a 24-byte time.Time: this struct is
// most of what a key costs).
type limiter struct {
	rule     *ruleState
	key      string
	policy   window.Policy // nil in Redis mode
	inflight int64
	last     int64     // latest time refs fell to 0, or pause or reconcile while idle
	q        *lqueue   // waiters it refused; nil when none
	fb       *feedback // nil until the key is paused, throttled or reconciled
	// idle list links, valid while refs == 0.
	prevIdle, nextIdle *limiter
	refs               int32      // waiters and tickets holding it: never evicted while > 0
	waiting            int32      // waiting calls charging it (WithMaxQueue)
	asking             int32      // Redis mode: calls asking Redis outside its queue (freeLocked)
	unknown            bool       // Rule.Learn: no limit learned for this key yet; one call at a time
	ad                 *adapt.Law // Rule.Adapt: the key's adaptive level (its window's N); nil for other rules
}

// feedback is the state only keys that were paused, throttled or
// reconciled need, kept apart so that a plain key costs less.
type feedback struct {
	// reconciled counts the units Reconcile and Ticket.ObserveHeaders made the
	// window count on the server's word (saturating).
	reconciled int64
	paused     int64 // no starts before; 0 when none
	// A quota rule's key (Rule.Learn with Learned.Reset): the units left in
	// the server's window ending at reset (ns since the epoch), once
	// budgeted; the units admitted on the key, ever (saturating); the N
	// its budget refills to (0: the rule's).
	budget, reset, admits, n int64
	// unreported is the units of the key's calls in flight whose
	// response has not reported yet (held.unrep); low is the lowest
	// remaining reported in the window ending at reset (math.MaxInt64
	// before any report in it): the latest report in the server's order;
	// lowAdmits is admits when low was set.
	unreported, low, lowAdmits int64
	// epoch is the window's end as the server named it (Learned.Epoch,
	// ns since the Unix epoch on its clock) when a report of the window
	// named it so; 0 otherwise (a window the key rolled to on its own,
	// before a report).
	epoch      int64
	budgeted   bool
	reported   bool   // a report (Learned.Reset) set the window once
	distrusted uint32 // reports not taken at their word (KeyState.Distrusted), wrapping
	// adLearned is, in Redis mode, the limit an adaptive key (Rule.Adapt
	// with Learn) last stored as its learned ceiling (0: none).
	adLearned int64
	// adQuota is, in Redis mode, true once this process stored (or
	// adopted) the key's Spec as an rspec.Quota in Redis: an adaptive key
	// of a rule counted in the server's windows (adapt_redis.go).
	adQuota bool
	// adStoring is, in Redis mode, true while a goroutine stores the
	// key's quota in Redis (adaptAdoptLocked).
	adStoring bool
	// adFollow is, in Redis mode, true for a key of an adaptive rule that
	// became a quota here while the key's quota was not known stored in
	// Redis: charged under its rule's Spec (redisSpec), so that Redis
	// answers with what it keeps, level or quota, without a limit
	// mismatch; adaptAdoptLocked takes the answer in (adapt_redis.go).
	adFollow bool
	// spec is, in Redis mode, the limit the key learned or adopted
	// (Rule.Learn; see redisSpec); nil: the rule's.
	spec *rspec.Spec
	// specGen numbers, in Redis mode, the limits this key learned from a
	// reply (redisMode.learn: counted when learned and when stored), and
	// specStoring counts those being stored in Redis: an admission whose
	// charges were built before (held.specGen) or answered meanwhile was
	// decided under an older stored limit, which adoptLocked does not
	// take in.
	specGen     uint64
	specStoring int
	throttles   uint32 // throttles of this key, ever (wrapping)
	streak      uint8  // throttles in a row without a usable Retry-After
}

// feedback returns l's feedback state, creating it.
func (l *limiter) feedback() *feedback {
	if l.fb == nil {
		l.fb = new(feedback)
	}
	return l.fb
}

// state returns l's feedback state for reading: a zero one, shared and
// never written, when l has none.
func (l *limiter) state() *feedback {
	if l.fb == nil {
		return &noFeedback
	}
	return l.fb
}

// noFeedback is the state of every key that has no feedback state.
var noFeedback feedback

// held is one charge of a call on its limiter (48 bytes: a call admitted
// at once allocates one per charge; what only waiters need is in qnode).
type held struct {
	lim *limiter
	n   int64
	// For rules with Usage: the window's count right after this call was
	// admitted, and the limiter's reconciled units then (see
	// Ticket.ObserveHeaders). When marked (a fixed completion window),
	// instead: the units of the window's calls that had ended by this
	// admission, and the window's index.
	usedAtAdmit, recAtAdmit int64
	thrAtAdmit              uint32 // lim.throttles at admission
	marked                  bool
	over                    bool   // heavier than the key's learned limit: admitted alone as n = that limit (learnedFit)
	reported                bool   // marked, and a usage report of this call was taken in
	settled                 bool   // Ticket.Settle named this charge's rule
	unreadSaid              bool   // Ticket.BodyUnread reported it (an Unsettled event, once)
	unrep                   bool   // counted in its key's feedback.unreported (Rule.Learn; see budgetLocked)
	cut                     bool   // Redis mode: charged less than n there (a key not learned, a learned limit); released settled at n
	specGen                 uint64 // Redis mode: lim's feedback.specGen when its charge was built (redisChargesLocked)
	actual                  int64  // the settled weight, when settled
}

// qnode is a waiting call's place on one of its limiters: nodes[i] of a
// waiter belongs to held[i].
type qnode struct {
	w *waiter
	i int // index in w.held and w.nodes
	// refused: the limiter refused the call at its latest try; when is the
	// instant it named, in ns since the pool's epoch (0: only a Release can
	// help, or never tried).
	refused    bool
	inq        bool // in the limiter's queue: refused there, or queued behind its head
	rel        bool // Redis mode: refused until a release (woken by remote.Config.OnRoom, or at when)
	when       int64
	prev, next *qnode
}

func (n *qnode) held() *held { return &n.w.held[n.i] }

type waiter struct {
	held     []held
	nodes    []qnode
	rank     sched.Rank    // its place in every queue it joins
	ready    chan struct{} // closed when granted or failed
	done     bool          // granted or failed (under the lock)
	err      error
	since    time.Time
	deadline time.Time // the context's; zero when none
	qdead    time.Time // since + the queue-wait budget; zero when none
	granted  time.Time
	elem     *list.Element
	parked   bool // One without a rate: heavier than the cap, waiting aside (in no queue)
	// uncounted: not counted in its limiters' waiting yet (Redis mode:
	// counted from its first refusal, or when it queues behind another)
	uncounted bool
	// Redis mode (await): the waiter's own goroutine asks Redis.
	ask    chan struct{} // capacity 1: a decision is wanted (decideLocked)
	asking bool          // its goroutine asks now: nobody else does
	free   bool          // it asks outside the queues (counted in its limiters' asking)
	// refused: Redis refused it at least once (askRedis): nobody queued
	// behind it asks before it does again (askAheadLocked)
	refused bool
	// setHere: one of its rules' limits was set by SetLimit here (askLocked)
	setHere bool
	out     *remote.Outcome // the decision to apply at its next try; nil when none
	rcs     []rspec.Charge  // its charges in Redis
	rcall   *remote.Call    // the call Redis admitted
}

// New returns an Engine over rules, set up by opts; scope names the group
// of limits in Redis mode (clientpool.Table.Scope). It returns an error for
// a rule without a name or with a duplicate name, for a limit that is not
// N > 0 per Per > 0 or a negative MaxUnitsInFlight (matching
// ratesem.ErrInvalidLimit), for an invalid option, and in Redis mode the
// errors of the Redis checks (see redisrate.Shared).
func New(rules []Rule, scope string, opts ...Option) (*Engine, error) {
	cfg := Config{Idle: DefaultIdleTimeout}
	cfg.Build(opts)
	if err := cfg.Err(); err != nil {
		return nil, err
	}
	switch {
	case cfg.MaxQueue < 0 || cfg.MaxQueue > math.MaxInt32:
		return nil, fmt.Errorf("ratesem: WithMaxQueue(%d): want 0 ≤ n ≤ %d", cfg.MaxQueue, math.MaxInt32)
	case cfg.MaxKeys < 0:
		return nil, fmt.Errorf("ratesem: WithMaxKeys(%d): want ≥ 0", cfg.MaxKeys)
	}
	if err := cmp.Or(cfg.CheckMode(), cfg.CheckFront(false)); err != nil {
		return nil, err // the first of them
	}
	switch {
	case cfg.Redis.Fallback:
		return nil, errors.New("ratesem: redisrate.WithFallback applies to a semaphore only: a Pool has no local fallback")
	case cfg.Redis.Prefix != "":
		return nil, errors.New("ratesem: redisrate.WithPrefix applies to a semaphore only: a Pool's prefix is redisrate.Shared's")
	}
	p := &Engine{
		scope: scope, rules: make(map[string]*ruleState),
		clock: wake.NewClock(cfg.Clock), idle: cfg.Idle, observer: cfg.Observer,
		maxKeys: cfg.MaxKeys, maxPause: cfg.MaxPause, maxQueue: int32(cfg.MaxQueue),
	}
	p.book = (*inProc)(p)
	p.epoch = p.clock.Now()
	for i := range rules {
		r := &rules[i]
		if err := r.check(); err != nil {
			return nil, err
		}
		if _, dup := p.rules[r.Name]; dup {
			return nil, fmt.Errorf("ratesem: two rules named %q", r.Name)
		}
		rs := &ruleState{Rule: r, keys: make(map[string]*limiter)}
		lim := r.Limit
		if lim.N == 0 {
			// Unknown until a response says: the window admits anything
			// (one call at a time, admitLocked; in Redis mode
			// rspec.Unknown, redisMode.learn) and keeps the record.
			lim.N, rs.learning, rs.unknown = MaxLearnedN, true, true
		}
		rs.setLimit(lim)
		if r.Adapt != nil {
			rs.adaptInit() // Redis mode: checked in initRedis (adapt_redis.go)
		}
		p.rules[r.Name] = rs
		p.ruleList = append(p.ruleList, rs)
	}
	if cfg.Shared != nil {
		if err := p.initRedis(&cfg); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// HasRule reports whether the engine has a rule of that name. The rules
// are fixed after New: it takes no lock.
func (p *Engine) HasRule(name string) bool { _, ok := p.rules[name]; return ok }

func (rs *ruleState) setLimit(l window.Limit) {
	rs.limit = l
	rs.capacity = rs.newPolicy(l).Capacity()
	rs.cap = math.MaxInt64
	if rs.MaxUnitsInFlight > 0 {
		rs.cap = rs.MaxUnitsInFlight
	}
	rs.adaptCapacity()
	rs.quiet = int64(quiet(l, rs.capacity))
}

func (p *Engine) now() time.Time { return p.clock.Now() }

// mono converts an instant of the pool's clock to nanoseconds since its
// epoch, saturating.
func (p *Engine) mono(t time.Time) int64 { return int64(t.Sub(p.epoch)) }

// instant converts mono's result back.
func (p *Engine) instant(ns int64) time.Time { return p.epoch.Add(time.Duration(ns)) }

// Ticket is an admitted call of the engine: it holds its charges until
// Release. The front embeds it in its own ticket (clientpool.Ticket) and
// Acquire fills it in, so that an admission allocates one ticket. Its
// methods are safe for concurrent use.
type Ticket struct {
	pool     *Engine
	held     []held
	charges  []Charge
	at       int64 // the admission instant, ns since the pool's epoch
	released atomic.Bool
	// throttled: a throttle of this call was reported (ThrottledTicket,
	// OverloadedTicket), so its Release is no success for an adaptive
	// rule. Under the engine's lock; in released's padding.
	throttled bool
	// rcall is, in Redis mode, the call Redis admitted, kept after
	// Release: a usage report read then still carries its mark (redisMode.observe).
	rcall *remote.Call
}

// Charges returns the charges the ticket holds, merged per (rule, key).
func (t *Ticket) Charges() []Charge { return t.charges }

// Release ends the call: every charge leaves flight at once (for the
// completion window, the call's end is now), and a key that saw no
// throttle since the call was admitted ends its backoff streak. It never
// blocks (in Redis mode the release reaches Redis in the background). It
// panics if called twice.
func (t *Ticket) Release() {
	if t.released.Swap(true) {
		panic("ratesem: Ticket released twice")
	}
	t.pool.book.release(t)
}

// release is Ticket.Release in process.
func (b *inProc) release(t *Ticket) {
	p := (*Engine)(b)
	p.mu.Lock()
	defer p.mu.Unlock() // a window that panics must not leave the pool locked
	now := p.now()
	p.timedLocked(t, now)
	p.releaseLocked(t, 0, now)
	p.settleLocked(now)
}

// releaseLocked ends t's charges from the index from on. When a
// Rule.Window of the caller's panics in Done or Settle (or exits its
// goroutine), its charge is out of flight and unreferenced all the same,
// and the charges after it are ended first, then the panic goes on: no
// limiter keeps units in flight for a call that has ended.
func (p *Engine) releaseLocked(t *Ticket, from int, now time.Time) {
	i := from
	defer func() {
		if i < len(t.held) { // endLocked has marked its waiters pending
			p.unrefLocked(t.held[i].lim, now)
			p.releaseLocked(t, i+1, now)
		}
	}()
	for ; i < len(t.held); i++ {
		h := &t.held[i]
		l := h.lim
		l.reported(h) // ended: the server has seen it (without a report: as the old model, counted)
		if fb := l.fb; h.settled && l.rule.quota && fb != nil && fb.budgeted && h.actual > h.n {
			// A debit spends the server's budget too; a refund is not
			// given back to it (its window may have changed since).
			fb.budget = sat.Sub(fb.budget, h.actual-h.n)
		}
		p.endLocked(l, t.at, h.n, h.actual, h.settled, now)
		if fb := l.fb; fb != nil && fb.streak != 0 && fb.throttles == h.thrAtAdmit {
			fb.streak = 0 // a call went through without a throttle
		}
		if l.ad != nil && !t.throttled {
			units := h.n
			if h.settled {
				units = h.actual
			}
			p.book.adaptSuccess(l, t.at, units, now) // may panic in a Rule.Window's SetLimit: ended all the same
		}
		p.unrefLocked(l, now)
	}
}

// endLocked ends a charge of n units on l admitted at at (ns since the
// epoch) at now: it leaves flight, and the window counts its end, settled
// to actual units when settled and the window is a window.Settler; l's
// waiters are tried again at the next settleLocked.
func (p *Engine) endLocked(l *limiter, at, n, actual int64, settled bool, now time.Time) {
	l.inflight -= n
	if l.q != nil {
		p.markPending(l.q)
	}
	if st, ok := l.policy.(window.Settler); ok && settled {
		st.Settle(now, p.instant(at), n, actual)
	} else {
		l.policy.Done(now, n)
	}
}

// Acquire admits a call that costs every charge at once, blocking until all
// of its rules admit it at the same instant or ctx is done. Charges to the
// same rule and key are added up (saturating). On success the caller must
// Release the Ticket when the call ends.
//
// On failure it holds nothing and returns ctx.Err() when ctx is done (a context
// done before the call never acquires); an error matching both
// context.DeadlineExceeded and ratesem.ErrDeadline as soon as the admission is
// known to come after ctx's deadline; an error matching ratesem.ErrUnknownRule
// for a charge to a rule the pool does not have; an error matching
// ratesem.ErrWeightTooLarge at once for a charge heavier than its rule can ever
// admit (a limit a key learned from a server's reply, Rule.Learn, never makes a
// charge too heavy: the call goes alone, see Distrusted in ratesem.Event); an error matching ratesem.ErrNegativeWeight for a negative weight; or
// an error matching ratesem.ErrTooManyKeys at once when the call needs a new
// key and the pool is full (WithMaxKeys); an error matching
// ratesem.ErrQueueFull at once when it must wait and one of its limiters
// already has the WithMaxQueue number of waiting calls; an error matching
// ratesem.ErrQueueTimeout (not context.DeadlineExceeded) when it waited its
// queue-wait budget (ratesem.WithQueueWait on ctx), or as soon as its admission
// is known to come after that budget. A call with no charges is admitted at
// once.
//
// A call that must wait reads its priority from ctx (ratesem.WithPriority):
// on each of its limiters a higher class is served first, within the bound of
// 16 overtakes (see ratesem.Priority); a call admitted at once reads nothing from ctx but its
// Err. In Redis mode (redisrate.Shared) priorities, WithMaxQueue and the
// queue-wait budget hold among this process's waiters. In Redis mode
// (redisrate.Shared) it may also return an error matching
// ratesem.ErrLimitMismatch, ratesem.ErrUnavailable or ratesem.ErrClosed; the
// checks above come first, without a round trip.
func (p *Engine) Acquire(ctx context.Context, t *Ticket, charges []Charge) error {
	charges, err := p.merge(charges)
	if err != nil {
		p.emitFailed(charges, nil, err)
		return err
	}
	w, err := p.start(ctx, t, charges)
	if err != nil {
		p.flushEvicted()
		p.emitFailed(charges, nil, err)
		return err
	}
	p.flushFor(t, w)
	if w == nil {
		p.emitAdmitted(t, charges, 0, false)
		return nil
	}
	return p.wait(ctx, t, w, charges)
}

// wait is Acquire for a call of charges that did not start at once (w):
// it waits (await) and reports the outcome; t becomes the call's ticket
// when w is granted (in Redis mode holding the call Redis admitted).
func (p *Engine) wait(ctx context.Context, t *Ticket, w *waiter, charges []Charge) error {
	queued, err := p.await(ctx, w, charges)
	if err != nil {
		if !queued {
			w = nil // asked Redis at once and never waited (Redis mode)
		}
		p.emitFailed(charges, w, err)
		return err
	}
	t.at = p.mono(w.granted)
	if w.rcall != nil {
		p.holdRedis(t, w.held, charges, w.rcall)
	}
	wait := time.Duration(0)
	if queued {
		wait = max(w.granted.Sub(w.since), 0)
	}
	p.emitAdmitted(t, charges, wait, queued)
	return nil
}

// await waits until w is granted or fails, or ctx is done, reporting
// Queued for charges once w has to wait. In Redis mode it asks Redis
// (askRedis: Decide, outside the lock, on the caller's goroutine) whenever
// the queues want a decision for w (decideLocked); in process w.ask is nil.
// It returns whether w queued, and nil when w was granted (w keeps its
// references on its limiters; w.rcall in Redis mode), or the error, w
// having let go of everything.
func (p *Engine) await(ctx context.Context, w *waiter, charges []Charge) (queued bool, err error) {
	p.mu.Lock()
	queued = !w.uncounted
	p.mu.Unlock()
	if queued {
		p.emitQueued(w, charges)
	}
	var budget <-chan time.Time // nil: no queue-wait budget
	if !w.qdead.IsZero() {
		budget = p.clock.After(w.qdead.Sub(w.since))
	}
	for {
		select {
		case <-budget:
			budget = nil
			p.expire(w) // fails w unless it was admitted meanwhile
		case <-ctx.Done():
			p.abandon(w) // out of the queues; or admitted as ctx ended: undone, as if it never happened
			return queued, ctx.Err()
		case <-w.ready:
			if w.err != nil {
				p.mu.Lock()
				leaveFreeLocked(w) // failed before it took its ask
				p.unrefHeldLocked(w.held, p.now())
				p.mu.Unlock()
				return queued, w.err
			}
			if err := ctx.Err(); err != nil {
				p.abandon(w)
				return queued, err
			}
			return queued, nil
		case <-w.ask:
			if p.book.(*redisMode).askRedis(ctx, w) && !queued {
				queued = true
				p.emitQueued(w, charges)
			}
		}
	}
}

// start is Acquire under the lock: it admits the call at once (a nil
// waiter), or queues it and returns its waiter, or fails.
func (p *Engine) start(ctx context.Context, t *Ticket, charges []Charge) (*waiter, error) {
	p.mu.Lock()
	defer p.mu.Unlock() // a window that panics must not leave the pool locked
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := p.now()
	hs, err := p.refChargesLocked(charges, now)
	if err != nil {
		return nil, err
	}
	t.pool, t.held, t.charges = p, hs, charges
	queued, ok := p.book.admitNowLocked(t, hs, now)
	if ok {
		return nil, nil
	}
	return p.queueLocked(ctx, hs, now, queued)
}

// queuedLocked reports whether a caller waits on one of the limiters of hs.
func queuedLocked(hs []held) bool {
	for i := range hs {
		if q := hs[i].lim.q; q != nil && q.head != nil {
			return true
		}
	}
	return false
}

// queueLocked makes the waiter of a call of charges hs (referenced) that
// was not admitted at once, tries it and returns it; or, when one of its
// limiters already has the WithMaxQueue number of waiting calls, drops the
// references and fails with ratesem.ErrQueueFull. A charge heavier than
// its rule can ever admit (only a rule without a rate gets here with one:
// a One of Per 0, as x/sync's Weighted) waits aside (parked) for a SetLimit
// under which it fits, or for its context. queued is false only in Redis
// mode for a call nobody refused waits ahead of: it asks Redis at once
// (askFreeLocked) and counts as waiting from its first refusal.
func (p *Engine) queueLocked(ctx context.Context, hs []held, now time.Time, queued bool) (*waiter, error) {
	// Waiting from here on: only now are the context's settings read.
	if err := p.queueFullLocked(hs); queued && err != nil {
		p.unrefHeldLocked(hs, now)
		return nil, err
	}
	w := &waiter{held: hs, rank: p.ranker.Next(sched.PriorityOf(ctx)), ready: make(chan struct{}), since: now, uncounted: true}
	w.deadline, _ = ctx.Deadline()
	if d := sched.QueueWaitOf(ctx); d > 0 {
		w.qdead = now.Add(d)
	}
	w.nodes = make([]qnode, len(hs))
	for i := range w.nodes {
		w.nodes[i] = qnode{w: w, i: i}
		rs := hs[i].lim.rule
		w.parked = w.parked || rs.limit.Per == 0 && hs[i].n > rs.fit()
	}
	p.book.newWaiterLocked(w)
	if queued {
		p.countLocked(w)
	}
	w.elem = p.waiters.PushBack(w)
	if p.hook != nil {
		p.hook(w, false)
	}
	switch {
	case !queued:
		askFreeLocked(w)
	case !w.parked:
		p.tryWaiterLocked(w, now)
		p.settleLocked(now)
	}
	return w, nil
}

// where names the limiter of key under rs in an error message: its rule
// and key; nothing for a One's.
func (rs *ruleState) where(key string) string {
	if rs.one {
		return ""
	}
	return fmt.Sprintf(" under rule %q%s", rs.Name, keyText(key))
}

// fit is the heaviest charge rs can ever admit at once.
func (rs *ruleState) fit() int64 { return min(rs.capacity, rs.cap) }

// abandon ends the wait of a caller whose ctx is done: w leaves its
// queues, or its admission is taken back if it came meanwhile.
func (p *Engine) abandon(w *waiter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !w.done {
		p.finishLocked(w, context.Canceled)
	} else if w.err == nil && w.rcall != nil {
		w.rcall.Release() // admitted by Redis while ctx became done
		w.rcall = nil
	} else if w.err == nil {
		p.undoLocked(w.held, w.granted) // admitted while ctx became done
	}
	leaveFreeLocked(w) // left before it took its ask (out of the queues: none asks it again)
	now := p.now()
	p.unrefHeldLocked(w.held, now)
	p.settleLocked(now)
}

func (p *Engine) unrefAll(hs []held) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unrefHeldLocked(hs, p.now())
}

// merge validates charges and adds up those to the same limiter, saturating
// at math.MaxInt64 (which no rule admits), and checks, in Redis mode, that
// there are at most MaxRedisCharges of them (the charges are returned with
// that error, nil with the others). The rules map is fixed after New, so
// it needs no lock.
func (p *Engine) merge(charges []Charge) ([]Charge, error) {
	out := make([]Charge, 0, len(charges))
	for _, c := range charges {
		if _, ok := p.rules[c.Rule]; !ok {
			return nil, fmt.Errorf("%w %q", ratesem.ErrUnknownRule, c.Rule)
		}
		if c.Weight < 0 {
			return nil, fmt.Errorf("%w %d under rule %q%s", ratesem.ErrNegativeWeight, c.Weight, c.Rule, keyText(c.Key))
		}
		if i := slices.IndexFunc(out, func(o Charge) bool { return o.Rule == c.Rule && o.Key == c.Key }); i >= 0 {
			out[i].Weight = sat.Add(out[i].Weight, c.Weight)
		} else {
			out = append(out, c)
		}
	}
	if _, redis := p.book.(*redisMode); redis && len(out) > MaxRedisCharges {
		return out, fmt.Errorf("%w: %d, at most %d", ratesem.ErrTooManyCharges, len(out), MaxRedisCharges)
	}
	return out, nil
}

// tooHeavyLocked returns the ratesem.ErrWeightTooLarge error for the first
// charge heavier than its rule can ever admit, or nil.
func (p *Engine) tooHeavyLocked(charges []Charge) error {
	for _, c := range charges {
		rs := p.rules[c.Rule]
		fit := rs.cap
		if rs.Learn == nil {
			fit = min(rs.capacity, fit) // a learned limit is per key, and never refuses a call (learnedFit)
		}
		if c.Weight == math.MaxInt64 && !rs.one {
			// No limit admits it: the rule's way to refuse a request (the
			// presets' body that bounds no charge), said as such.
			return fmt.Errorf("%w: rule %q%s refuses the request: it charges math.MaxInt64",
				ratesem.ErrWeightTooLarge, c.Rule, keyText(c.Key))
		}
		if c.Weight > fit {
			return fmt.Errorf("%w: weight %d%s can never start: the rule admits at most %d (%v) at once; lower the weight or raise the rule's limit",
				ratesem.ErrWeightTooLarge, c.Weight, rs.where(c.Key), fit, rs.limit)
		}
	}
	return nil
}

// keyText names a key in an error message: "" for the rule's only key.
func keyText(key string) string {
	if key == "" {
		return ""
	}
	return fmt.Sprintf(" key %q", key)
}

// undoLocked takes back the admission of hs at the instant granted, whose
// caller gave up: the units go back without a completion, as if it had
// never been admitted.
func (p *Engine) undoLocked(hs []held, granted time.Time) {
	for i := len(hs) - 1; i >= 0; i-- {
		h := &hs[i]
		h.lim.inflight -= h.n
		h.lim.policy.Cancel(granted, h.n)
		if fb := h.lim.fb; h.lim.rule.quota && fb != nil && fb.budgeted {
			fb.budget = sat.Add(fb.budget, h.n)
		}
		h.lim.reported(h)
		if h.lim.q != nil {
			p.markPending(h.lim.q)
		}
	}
}

// admitLocked admits hs at now if every limiter admits it, or changes
// nothing but the refusal marks of hs and returns the instant the call
// could start at the earliest (the latest instant a refusing limiter
// names), with needRelease when some limiter's refusal does not depend on
// time alone. When nodes is not nil, each node of a refusing limiter is
// marked refused with the instant its limiter named (its when).
func (p *Engine) admitLocked(hs []held, nodes []qnode, now time.Time) (at time.Time, needRelease, ok bool) {
	refused := false
	for i := range nodes {
		nodes[i].refused, nodes[i].when = false, 0
	}
	refuse := func(i int, when time.Time) {
		refused = true
		var ns int64
		if when.IsZero() {
			needRelease = true
		} else {
			ns = max(p.mono(when), 1)
			if when.After(at) {
				at = when
			}
		}
		if nodes != nil {
			nodes[i].refused, nodes[i].when = true, ns
		}
	}
	nowNs := p.mono(now)
	for i := range hs {
		h := &hs[i]
		switch l := h.lim; {
		case l.inflight > l.rule.cap-h.n:
			refuse(i, time.Time{})
		case nowNs < l.state().paused:
			refuse(i, p.instant(l.state().paused))
		case l.unknown && l.inflight > 0:
			refuse(i, time.Time{}) // the limit is not known yet: one call at a time
		case l.inflight > 0 && h.n > l.learnedFit():
			refuse(i, time.Time{}) // heavier than the learned limit: one call at a time
		}
	}
	if refused {
		return at, needRelease, false
	}
	for i := range hs {
		if l := hs[i].lim; l.rule.quota {
			if ok, until := l.budgetAdmits(nowNs, hs[i].charge()); !ok {
				refuse(i, p.instant(until))
			}
		}
	}
	if refused {
		return at, needRelease, false
	}
	// Refused, or a Rule.Window of the caller's panicked (or exited its
	// goroutine) in Admit or Capacity: the charges admitted before the
	// first refusal are taken back, in reverse order, each the latest
	// admission at now (exact), so that no window counts a call nobody
	// holds.
	admitted := 0
	defer func() {
		for i := admitted - 1; !ok && i >= 0; i-- {
			hs[i].lim.policy.Cancel(now, hs[i].charge())
		}
	}()
	for i := range hs {
		h := &hs[i]
		if when, ok := h.lim.policy.Admit(now, h.charge()); !ok {
			refuse(i, when)
		} else if !refused {
			admitted = i + 1
		} else {
			h.lim.policy.Cancel(now, h.charge()) // admitted after a refusal: undo at once
		}
	}
	if refused {
		return at, needRelease, false
	}
	ok = true
	for i := range hs {
		h := &hs[i]
		if fit := h.lim.learnedFit(); h.n > fit {
			// From here on the call holds what its window took.
			h.n, h.over = fit, true
			h.lim.feedback().distrusted++
		}
		h.lim.inflight += h.n
		h.thrAtAdmit = h.lim.state().throttles
		if h.lim.rule.Usage != nil || h.lim.rule.Learn != nil {
			if win, ended, _, ok := win.Mark(h.lim.policy, now); ok {
				h.usedAtAdmit, h.recAtAdmit, h.marked = ended, win, true
			} else if r, ok := h.lim.policy.(window.Reconciler); ok {
				h.usedAtAdmit, h.recAtAdmit = r.Used(now), h.lim.state().reconciled
			}
		}
		if fb := h.lim.fb; h.lim.rule.quota && fb != nil && fb.budgeted {
			fb.budget -= h.n // budgetAdmits checked h.n ≤ budget
			fb.admits = sat.Add(fb.admits, h.n)
			h.usedAtAdmit = fb.admits
		}
		if h.lim.rule.Learn != nil && h.n > 0 {
			// Until its response reports, the call may reach the server
			// after any report (budgetLocked); counted from the first
			// admission on, before the rule is known to count in windows.
			fb := h.lim.feedback()
			fb.unreported = sat.Add(fb.unreported, h.n)
			h.unrep = true
		}
	}
	return time.Time{}, false, true
}

// charge is the units h's window takes: at most its key's learned limit
// (learnedFit).
func (h *held) charge() int64 { return min(h.n, h.lim.learnedFit()) }

// SetLimit changes a rule's limit at run time, for every key, keeping the
// accounting: what each key's window counted still counts against the new
// limit. Waiters heavier than the new limit fail with
// ratesem.ErrWeightTooLarge. It returns an error matching
// ratesem.ErrUnknownRule for an unknown rule, and one matching
// ratesem.ErrInvalidLimit for a limit that is not N > 0 per Per > 0. In
// process it never blocks; it walks every key of the rule and every waiter
// under the pool's lock. In Redis mode (redisrate.Shared) it changes the
// limit for every process and blocks for one round trip per key of the
// rule this process knows (each bounded by the Redis timeout, one second);
// it stops at the first key whose round trip fails and returns that error
// (ratesem.ErrUnavailable when Redis cannot be reached), so an outage costs
// one timeout, not one per key. The keys it did not reach still get the new
// limit in Redis: this process writes it the next time it admits a call on
// each of them, and every process adopts it from there. In Redis mode a
// limit Redis cannot keep exactly (a Per not a whole number of µs) also
// matches ratesem.ErrInvalidLimit.
func (p *Engine) SetLimit(rule string, l window.Limit) error {
	rs, ok := p.rules[rule]
	if !ok {
		return fmt.Errorf("%w %q", ratesem.ErrUnknownRule, rule)
	}
	if l.N <= 0 || l.Per <= 0 {
		return fmt.Errorf("%w: SetLimit(%q, %v): want N > 0 per Per > 0", ratesem.ErrInvalidLimit, rule, l)
	}
	return p.book.setLimit(rs, l)
}

// setLimit is SetLimit in process, for a valid limit.
func (b *inProc) setLimit(rs *ruleState, l window.Limit) error {
	p := (*Engine)(b)
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if rs.Adapt != nil {
		p.adaptSetLimitLocked(rs, l, now)
		p.refitLocked(rs, now)
		return nil
	}
	rs.learning, rs.unknown = false, false
	rs.setLimit(l)
	for _, lim := range rs.keys {
		lim.unknown = false
		if !rs.quota {
			lim.policy.SetLimit(now, l)
		}
	}
	p.refitLocked(rs, now)
	return nil
}

// refitLocked walks the waiters after rs's limit changed: one with a charge
// on rs heavier than rs can now admit at once fails with
// ratesem.ErrWeightTooLarge, or, under a limit without a rate (a One of Per
// 0, as x/sync's Weighted), leaves the queues to wait aside; those aside
// that fit again rejoin the queues by arrival order. Then the heads of
// rs's queues are tried again under the new limit (settleLocked).
func (p *Engine) refitLocked(rs *ruleState, now time.Time) {
	fit := rs.fit()
	for e := p.waiters.Front(); e != nil; {
		next := e.Next()
		w := e.Value.(*waiter)
		heavy := false
		for _, h := range w.held {
			if h.lim.rule == rs && h.n > fit {
				heavy = true
				if rs.limit.Per > 0 {
					p.finishLocked(w, fmt.Errorf("%w: weight %d%s, now %v", ratesem.ErrWeightTooLarge, h.n, rs.where(h.lim.key), rs.limit))
				}
				break
			}
		}
		switch {
		case w.done:
		case heavy && !w.parked:
			for i := range w.nodes {
				if n := &w.nodes[i]; n.inq {
					p.dequeueLocked(n)
				}
			}
			w.parked = true
		case !heavy && w.parked:
			w.parked = false
			p.tryWaiterLocked(w, now)
		}
		e = next
	}
	for _, l := range rs.keys {
		if l.q != nil {
			p.markPending(l.q)
		}
	}
	p.settleLocked(now)
}

// Limit returns a rule's current limit (N units per Per), and false for an
// unknown rule; N is 0 while a rule with Learn has not learned its limit
// yet. It does not block. In Redis mode it is the limit this
// process set or, for a rule with Learn, learned or adopted from another
// process (the latest of them), not one another process stored by SetLimit.
func (p *Engine) Limit(rule string) (window.Limit, bool) {
	rs, ok := p.rules[rule]
	if !ok {
		return window.Limit{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if rs.learning {
		return window.Limit{Per: rs.limit.Per}, true // not known yet (Rule.Learn)
	}
	return rs.limit, true
}

// Snapshot returns the state of every live limiter, sorted by rule and key.
// It walks every key under the pool's lock and makes no round trip to
// Redis: in Redis mode it tells what this process knows.
func (p *Engine) Snapshot() []KeyState {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	var out []KeyState
	for _, rs := range p.ruleList {
		for _, l := range rs.keys {
			ks := KeyState{Rule: rs.Name, Key: l.key, InFlight: l.inflight, Used: -1,
				Limit: window.Limit{Per: rs.limit.Per}, Distrusted: l.state().distrusted}
			if !l.unknown { // N 0 while the key knows no limit (Rule.Learn)
				ks.Limit = p.book.keyLimitLocked(l)
			}
			if l.state().paused != 0 {
				ks.PausedUntil = p.instant(l.state().paused)
			}
			if r, ok := l.policy.(window.Reconciler); ok {
				ks.Used = r.Used(now)
			}
			out = append(out, ks)
		}
	}
	slices.SortFunc(out, func(a, b KeyState) int {
		return cmp.Or(strings.Compare(a.Rule, b.Rule), strings.Compare(a.Key, b.Key))
	})
	return out
}

// Len returns the number of live limiters (rule, key pairs) in this
// process. It does not block.
func (p *Engine) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.live
}

// TryAcquire admits charges at once if every rule admits them now and no
// earlier caller waits on one of their limiters, filling t (see
// clientpool.Pool.TryAcquire): then it returns (0, nil). Refused by time
// alone, it changes nothing and returns how long from now the call could
// start if nothing else changed (> 0); ratesem.ErrInFlight when only calls
// in flight ending can make room (or callers wait whose admission time is
// not known). It never blocks in process; in Redis mode it makes one round
// trip and returns the wait Redis names (ratesem.ErrInFlight when only
// calls in flight ending can make room); when this process's own releases
// on those limiters are still on their way to Redis, it first waits for
// them (at most the Redis timeout) and asks again.
func (p *Engine) TryAcquire(t *Ticket, charges []Charge) (time.Duration, error) {
	charges, err := p.merge(charges)
	if err != nil {
		p.emitFailed(nil, nil, err)
		return 0, err
	}
	return p.book.try(t, charges)
}

// try is TryAcquire in process, for charges already merged.
func (b *inProc) try(t *Ticket, charges []Charge) (time.Duration, error) {
	p := (*Engine)(b)
	d, err := p.try(t, charges)
	if d == 0 && err == nil {
		p.flushFor(t, nil)
	} else {
		p.flushEvicted()
	}
	switch {
	case err != nil:
		p.emitFailed(charges, nil, err)
	case d == 0:
		p.emitAdmitted(t, charges, 0, false)
	}
	return d, err
}

// try is TryAcquire under the lock.
func (p *Engine) try(t *Ticket, charges []Charge) (d time.Duration, err error) {
	p.mu.Lock()
	defer p.mu.Unlock() // a window that panics must not leave the pool locked
	now := p.now()
	hs, err := p.refChargesLocked(charges, now)
	if err != nil {
		return 0, err
	}
	defer func() {
		if d != 0 || err != nil {
			p.unrefHeldLocked(hs, now)
		}
	}()
	d, err = p.tryHeldLocked(hs, now)
	if d == 0 && err == nil {
		t.pool, t.held, t.charges, t.at = p, hs, charges, p.mono(now)
	}
	return d, err
}

// tryHeldLocked admits hs at now if every limiter admits it and no earlier
// caller waits on one of them (0, nil); otherwise it changes nothing and
// returns how long from now the call could start (> 0), or
// ratesem.ErrInFlight when only calls in flight ending can make room.
func (p *Engine) tryHeldLocked(hs []held, now time.Time) (time.Duration, error) {
	if d, err := p.aheadLocked(hs, now); d != 0 || err != nil {
		return d, err
	}
	at, needRelease, ok := p.admitLocked(hs, nil, now)
	switch {
	case ok:
		return 0, nil
	case needRelease:
		return 0, ratesem.ErrInFlight
	}
	return max(at.Sub(now), time.Nanosecond), nil
}

// aheadLocked returns what callers queued on the limiters of hs tell a
// try at now, which never overtakes them: the wait until the latest of
// their heads' wakes, or ratesem.ErrInFlight when one waits for a release
// (in Redis mode, or is being decided); (0, nil) when none waits.
func (p *Engine) aheadLocked(hs []held, now time.Time) (time.Duration, error) {
	var at time.Time
	for i := range hs {
		if q := hs[i].lim.q; q != nil && q.head != nil {
			if h := q.head; !h.refused || h.when == 0 || h.rel {
				return 0, ratesem.ErrInFlight
			} else if w := p.instant(h.when); w.After(at) {
				at = w
			}
		}
	}
	if at.IsZero() {
		return 0, nil
	}
	return max(at.Sub(now), time.Nanosecond), nil
}
