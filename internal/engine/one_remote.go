package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/remote"
	"github.com/ratesem/ratesem/internal/rspec"
	"github.com/ratesem/ratesem/internal/wake"
	"github.com/ratesem/ratesem/internal/win"
	"github.com/ratesem/ratesem/window"
)

// redisRule names the one rule of a RateSemaphore in Redis.
const redisRule = "n"

// oneRemote is the part of a One over Redis (redisrate.NewSemaphore) that
// the Engine's Redis mode does not have: its name, the fallback, and the
// calls of Acquire and TryAcquire by units, which a Release(n) without a
// ticket ends.
type oneRemote struct {
	one   *One
	rem   *redisMode
	name  string
	local remote.Fallback // or nil
	// burstN: the window's burst follows N (a bucket or GCRA made with a
	// burst of 0): SetLimit sets the spec's burst to the new N, as the
	// window's own SetLimit does in process
	burstN bool

	// Under the engine's lock.
	held      []heldCall // calls in flight, oldest first
	heldUnits int64
}

// heldCall is a call in flight admitted by this process.
type heldCall struct {
	t    *Ticket
	left int64 // units not released yet
}

// NewShared returns the One of a semaphore whose state is kept in Redis
// through o under name: redisrate.NewSemaphore (p nil: n units per per
// under cfg's window) and redisrate.NewSemaphoreWithPolicy (the window p,
// not nil). cfg comes from the options; its Redis options apply. The One's
// Engine is in Redis mode, with one rule, redisRule, whose key "" is the
// semaphore's limit in the scope name; with WithFallback, the window
// (p, or the one n and per give) at its share of N is the fallback's.
func NewShared(o rspec.Opener, name string, n int64, per time.Duration, p window.Policy, cfg Config) (*One, error) {
	cfg.Shared = &Shared{Opener: o, Prefix: cmp.Or(cfg.Redis.Prefix, DefaultPrefix)}
	if err := cmp.Or(cfg.Err(), cfg.CheckMode(), cfg.CheckFront(true)); err != nil {
		return nil, err // the first of them
	}
	fn := "redisrate.NewSemaphore"
	if p != nil {
		fn += "WithPolicy"
	}
	switch {
	case p != nil && cfg.Start:
		return nil, errors.New("ratesem: redisrate.NewSemaphoreWithPolicy: WithStartWindow conflicts with the policy given")
	case p == nil && (n <= 0 || per <= 0 || per%time.Microsecond != 0):
		return nil, fmt.Errorf("%w: redisrate.NewSemaphore: %d per %v: want n > 0 and an interval of a positive whole number of microseconds",
			ratesem.ErrInvalidLimit, n, per)
	case p == nil && cfg.Start && cfg.Margin%time.Microsecond != 0:
		return nil, fmt.Errorf("%w: redisrate.NewSemaphore: margin %v: want a whole number of microseconds", ratesem.ErrInvalidLimit, cfg.Margin)
	case name == "":
		return nil, fmt.Errorf("ratesem: %s: empty name", fn)
	case len(name) > rspec.MaxNameLen:
		// Checked here, not at the first Acquire: there the store's refusal
		// would pass for a Redis outage (ratesem.ErrUnavailable, or the fallback
		// forever) and the limit would silently not be shared.
		return nil, fmt.Errorf("ratesem: %s: a name of %d bytes: want at most %d", fn, len(name), rspec.MaxNameLen)
	case cfg.Concurrency == 0:
		return nil, fmt.Errorf("%w: %s: WithMaxUnitsInFlight(0) admits nothing", ratesem.ErrInvalidLimit, fn)
	case p == nil && cfg.Start:
		p = window.NewSlidingLog(window.Limit{N: n, Per: per}, cfg.Margin)
	case p == nil:
		p = window.NewCompletion(window.Limit{N: n, Per: per})
	}
	sp, err := rspec.SpecOf(p)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, fn)
	}
	if sp.Limit.N <= 0 || sp.Limit.Per <= 0 {
		return nil, fmt.Errorf("%w: %s: %d per %v: want n > 0 and a positive interval", ratesem.ErrInvalidLimit, fn, sp.Limit.N, sp.Limit.Per)
	}
	sp.SetSemaphoreCap(cfg.Concurrency) // N in flight, as in process, for a window that does not cap them
	if err := sp.Check(); err != nil {
		return nil, fmt.Errorf("%w (%s)", err, fn)
	}
	r := &oneRemote{name: name, burstN: win.BurstFollowsN(p)}
	one := &One{capOpt: cfg.Concurrency, slow: true, obs: cfg.Observer, conc: -1}
	r.one = one
	one.initOne(redisRule, sp.Limit, nil, wake.NewClock(nil), cfg)
	e := one.e
	e.scope, e.one, e.epoch = name, r, e.clock.Now()
	one.rs.setSpec(&sp)
	if cfg.Redis.Fallback {
		p.SetLimit(time.Now(), window.Limit{N: max(1, int64(math.Floor(cfg.Redis.Share*float64(sp.Limit.N)))), Per: sp.Limit.Per})
		r.local = fallback{NewOne(p, Config{Concurrency: cfg.Concurrency})}
	}
	if err := e.initRedis(&cfg); err != nil {
		return nil, err
	}
	r.rem = e.book.(*redisMode)
	return one, nil
}

// DefaultPrefix is the prefix of a semaphore's keys in Redis
// (redisrate.DefaultPrefix).
const DefaultPrefix = "ratesem:sem"

// setSpec makes sp the Redis form of rs, a One's rule: its limit, and the
// heaviest charge, which the spec decides (the concurrency cap included),
// at most N as in process.
func (rs *ruleState) setSpec(sp *rspec.Spec) {
	rs.spec, rs.limit = sp, sp.Limit
	rs.capacity, rs.cap = sp.Capacity(), sp.Limit.N
}

// named rewrites a limit mismatch to name the semaphore, not its rule in
// Redis; other errors are returned as they are.
func (r *oneRemote) named(err error) error {
	var me *rspec.MismatchError
	if !errors.As(err, &me) {
		return err
	}
	return fmt.Errorf("%w: semaphore %q: this process has %s, Redis has %s (every process sharing the name must build it with the same limit; SetLimit changes it for all)",
		ratesem.ErrLimitMismatch, r.name, me.Have, me.Stored)
}

// charges returns the one charge of a call of n units.
func charges(n int64) []Charge { return []Charge{{Rule: redisRule, Weight: n}} }

// acquireLocal is One.Acquire over Redis, for n ≥ 0; it reports whether
// the fallback admitted the call. An Acquire of 0 units makes no round
// trip.
func (r *oneRemote) acquireLocal(ctx context.Context, n int64) (bool, error) {
	if n == 0 {
		if err := ctx.Err(); err != nil {
			r.one.e.emitFailed(charges(0), nil, err)
			return false, err
		}
		r.one.e.emitCharges(ratesem.Event{Kind: ratesem.Admitted}, charges(0))
		return false, nil
	}
	t, err := r.admit(ctx, n)
	if err != nil {
		return false, err
	}
	r.hold(t, n)
	return t.rcall.Local(), nil
}

// admit is the admission of Acquire and Begin, for n ≥ 0: the Engine's
// Redis admission (the checks, the failures and the events are its own;
// if the observer panics, the call is released first).
func (r *oneRemote) admit(ctx context.Context, n int64) (*Ticket, error) {
	e := r.one.e
	t := new(Ticket)
	since := time.Now()
	if err := e.Acquire(ctx, t, charges(n)); err != nil {
		return nil, r.named(err)
	}
	wait := time.Since(since) // in the engine's queues and Redis's round trips
	e.mu.Lock()
	r.one.waitSum += wait
	r.one.waitMax = max(r.one.waitMax, wait)
	e.mu.Unlock()
	return t, nil
}

func (r *oneRemote) hold(t *Ticket, n int64) {
	r.one.e.mu.Lock()
	r.held = append(r.held, heldCall{t: t, left: n})
	r.heldUnits += n
	r.one.e.mu.Unlock()
}

// releaseSettled is Release(n) over Redis (actual n), for n ≥ 0: it ends
// n units of this process's calls from Acquire and TryAcquire (Begin's are
// not held here: Call.End ends them): the oldest call of exactly n units
// left, or else n units taken from the oldest calls, ending each whose
// units are all released (a call partly released stays in flight in
// Redis: it counts longer, never less). When n is more than Acquire and
// TryAcquire hold it panics as in process, changing nothing. It never
// waits on Redis.
//
// For a call whose weight is known only after it (actual ≠ n), the oldest
// call of exactly n units left (its estimate) is settled in Redis to
// actual units in the background (a refund where the window still counts
// it, a debit from now on; actual < 0 counts as 0). Without one, n units
// are released as above: the estimate counts (on the safe side when
// actual ≤ n).
func (r *oneRemote) releaseSettled(n, actual int64) {
	if n == 0 {
		return
	}
	e := r.one.e
	e.mu.Lock()
	if n > r.heldUnits {
		held, calls := r.heldUnits, r.one.callUnits
		e.mu.Unlock()
		panic(OverReleased(n, held, calls))
	}
	r.heldUnits -= n
	if exact := slices.IndexFunc(r.held, func(h heldCall) bool { return h.left == n }); exact > 0 {
		h := r.held[exact] // ended first, alone
		copy(r.held[1:exact+1], r.held[:exact])
		r.held[0] = h
	} else if exact < 0 {
		actual = n // spread over calls: each counts what it held
	}
	var done []*Ticket // the first len(done) calls; a call partly released stays
	for rest := n; rest > 0; {
		h := &r.held[len(done)]
		take := min(h.left, rest)
		rest, h.left = rest-take, h.left-take
		if h.left == 0 {
			done = append(done, h.t)
		}
	}
	r.held = slices.Delete(r.held, 0, len(done))
	e.mu.Unlock()
	if actual != n {
		_ = done[0].Settle(redisRule, max(actual, 0))
	}
	for _, t := range done {
		t.Release() // never waits on Redis
	}
}

func (r *oneRemote) setLimit(n int64, interval time.Duration) error {
	if n <= 0 || interval <= 0 {
		return fmt.Errorf("%w: SetLimit(%d, %v): want n > 0 and a positive interval over Redis", ratesem.ErrInvalidLimit, n, interval)
	}
	e := r.one.e
	e.mu.Lock()
	sp := *r.one.rs.spec // the Redis form of the limit in force
	e.mu.Unlock()
	sp.Limit = window.Limit{N: n, Per: interval}
	if r.burstN {
		sp.Burst = n
	}
	sp.SetSemaphoreCap(r.one.capOpt)
	if err := sp.Check(); err != nil {
		return fmt.Errorf("%w (SetLimit)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), remote.DefaultTimeout+time.Second)
	defer cancel()
	if err := r.rem.eng.SetLimit(ctx, r.name, rspec.Charge{Rule: redisRule, Spec: &sp}); err != nil {
		return fmt.Errorf("%w (SetLimit)", err)
	}
	e.mu.Lock()
	r.one.rs.setSpec(&sp)
	e.mu.Unlock()
	return nil
}

// fallback admits calls in this process alone while Redis is unreachable
// (remote.Fallback, whose calls remote carries into Redis when it answers
// again): an in-process One of its own over the window at its share of
// the limit, under a lock of its own (remote may end a call of it while
// the engine's lock is held). Its methods never block.
type fallback struct{ o *One }

// Check implements remote.FallbackChecker: a weight above the share fails
// with ratesem.ErrUnavailable.
func (f fallback) Check(_ string, cs []rspec.Charge) error {
	if n, share := cs[0].Weight, f.o.Limit().N; n > share {
		return fmt.Errorf("%w: weight %d exceeds the fallback's share of %d units", ratesem.ErrUnavailable, n, share)
	}
	return nil
}

// TryAcquire implements remote.Fallback: the call's units if the share has
// room now; the function returned releases them.
func (f fallback) TryAcquire(_ string, cs []rspec.Charge) (func(), bool) {
	n := cs[0].Weight
	if !f.o.TryAcquire(n) {
		return nil, false
	}
	return func() { f.o.Release(n) }, true
}

// Pause implements remote.Fallback: local admissions wait until until too.
func (f fallback) Pause(_ string, _ rspec.Charge, until time.Time) { f.o.Pause(until) }

// begin is One.Begin over Redis: the call is kept with its slot, not
// among the calls Release ends. A call of 0 units makes its round trip too
// (Acquire(ctx, 0) makes none), so that End has a call in Redis to settle
// a debit on.
func (r *oneRemote) begin(ctx context.Context, n int64) (Call, error) {
	t, err := r.admit(ctx, n)
	if err != nil {
		return Call{}, err
	}
	o := r.one
	o.e.mu.Lock()
	c := o.newCallLocked(n, 0)
	o.calls[c.slot].t = t
	o.e.mu.Unlock()
	return c, nil
}

// tryWait is One.TryAcquireWait over Redis (Engine.TryAcquire: a
// refusal by Redis is ratesem.ErrInFlight, its wait not known). A weight
// no limit admits fails as in process, with no event; n ≥ 0.
func (r *oneRemote) tryWait(n int64) (time.Duration, error) {
	e := r.one.e
	e.mu.Lock()
	err := e.tooHeavyLocked(charges(n))
	e.mu.Unlock()
	if err != nil || n == 0 {
		return 0, err
	}
	t := new(Ticket)
	d, err := e.TryAcquire(t, charges(n))
	if err != nil || d > 0 {
		return d, r.named(err)
	}
	r.hold(t, n)
	return 0, nil
}

// AcquireLocal is Acquire over Redis that reports whether the fallback
// admitted the call (tests).
func (o *One) AcquireLocal(ctx context.Context, n int64) (bool, error) {
	return o.e.one.acquireLocal(ctx, n)
}

// ReleaseSettled is the release over Redis of a call of n ≥ 0 units
// settled to actual (tests).
func (o *One) ReleaseSettled(n, actual int64) { o.e.one.releaseSettled(n, actual) }

// RemoteStats returns the Redis engine's own stats (tests).
func (o *One) RemoteStats() remote.Stats { return o.e.one.rem.eng.Stats() }

// RemoteClosed reports whether the Redis engine is closed (tests).
func (o *One) RemoteClosed() bool { return o.e.one.rem.eng.Closed() }
