package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/backoff"
	"github.com/ratesem/ratesem/internal/remote"
	"github.com/ratesem/ratesem/internal/rspec"
	"github.com/ratesem/ratesem/window"
)

// MaxRedisCharges is the most distinct (rule, key) charges of one call in
// Redis mode (redisrate.MaxCharges).
const MaxRedisCharges = rspec.MaxCharges

// hashedKey begins the Redis name of a key that is too long for Redis
// mode (or begins with hashedKey itself): the rest is the hex SHA-256 of
// the key, so that every key keeps its own limiter whatever its length.
const hashedKey = "\x00sha256:"

// redisKey returns the name of key in Redis: key itself, or for a key
// longer than rspec.MaxNameLen (or one that begins with hashedKey, so
// that no key can pose as another's hash) hashedKey and its SHA-256.
func redisKey(key string) string {
	if len(key) <= rspec.MaxNameLen && !strings.HasPrefix(key, hashedKey) {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return hashedKey + hex.EncodeToString(sum[:])
}

// redisMode is a Pool's state in Redis mode.
type redisMode struct {
	eng   *remote.Engine
	scope string
	// late, with WithDeferredRedisChecks, is the eviction check deferred
	// to the first Acquire that finds Redis answering (nil when there is
	// none).
	late *remote.DeferredCheck
	// calls holds the Redis call of every Ticket not yet released (under
	// Pool.mu): kept here rather than in the Ticket, so that a Ticket of
	// the in-process Pool stays as small as it was.
	calls map[*Ticket]*remote.Call
	// timeout bounds one round trip (redisrate.WithTimeout).
	timeout time.Duration
}

// initRedis builds the Redis engine of p and the Spec of every rule.
func (p *Engine) initRedis(cfg *config) error {
	sh := cfg.Shared
	if sh.Opener.Open == nil {
		return errors.New("ratesem: redisrate.Shared: nil client")
	}
	st, err := sh.Opener.Open(sh.Prefix, cfg.Redis.Lease)
	if err != nil {
		return fmt.Errorf("%w (redisrate.Shared)", err)
	}
	scope := p.scope
	if scope == "" {
		scope = sh.Prefix
	}
	if len(scope) > rspec.MaxNameLen {
		return fmt.Errorf("ratesem: redisrate.Shared: Table.Scope of %d bytes: want at most %d", len(scope), rspec.MaxNameLen)
	}
	for _, rs := range p.ruleList {
		if len(rs.Name) > rspec.MaxNameLen {
			return fmt.Errorf("ratesem: redisrate.Shared: rule name %.64q…: want at most %d bytes", rs.Name, rspec.MaxNameLen)
		}
		if rs.spec == nil && rs.unknown {
			rs.spec = unknownSpec // Rule.Learn with no limit given (learn_redis.go)
		}
		if rs.spec == nil { // a One's is set already
			spec, err := specOf(rs.Rule, rs.limit)
			if err != nil {
				return err
			}
			rs.spec = spec
		}
		rs.quiet = 0 // the window lives in Redis: nothing to forget here
	}
	checkError := poolCheckError
	if p.one != nil {
		checkError = p.one.checkError
	}
	var late *remote.DeferredCheck
	if cfg.Redis.DeferChecks {
		if !cfg.Redis.EvictionAllowed {
			late = remote.NewDeferredCheck(func() error { return sh.Opener.Check(cfg.Redis.timeout(), sh.Prefix, scope, nil, true) }, checkError)
		}
	} else {
		// The limiters of the rules' key "" (a rule without keys) must
		// store no other limit; other keys are met later.
		cs := make([]rspec.Charge, 0, len(p.ruleList))
		for _, rs := range p.ruleList {
			if rs.Learn == nil { // a learned limit may be any (learn_redis.go)
				cs = append(cs, rspec.Charge{Rule: rs.Name, Key: redisKey(""), Spec: rs.spec})
			}
		}
		if len(cs) > rspec.MaxCharges {
			cs = cs[:rspec.MaxCharges]
		}
		if err := sh.Opener.Check(cfg.Redis.timeout(), sh.Prefix, scope, cs, !cfg.Redis.EvictionAllowed); err != nil {
			return checkError(err)
		}
	}
	rc := remote.Config{
		Store:          st,
		MaxPause:       backoff.Cap(p.maxPause),
		ErrDeadline:    ratesem.ErrDeadline,
		MaxQueue:       int(p.maxQueue),
		Timeout:        cfg.Redis.Timeout,
		Jitter:         cfg.Redis.Jitter,
		TestAfterAdmit: cfg.Redis.TestAfterAdmit,
	}
	if p.one != nil && p.one.local != nil {
		rc.Fallback = fallback{p.one}
	}
	eng, err := remote.New(rc)
	if err != nil {
		return fmt.Errorf("%w (redisrate.Shared)", err)
	}
	p.rem = &redisMode{eng: eng, scope: scope, calls: make(map[*Ticket]*remote.Call), late: late, timeout: cfg.Redis.timeout()}
	return nil
}

// poolCheckError says what the check of New found and what to do.
func poolCheckError(err error) error {
	switch {
	case errors.Is(err, ratesem.ErrEviction):
		return fmt.Errorf("%w (redisrate.WithEvictionAllowed to use it anyway)", err)
	case errors.Is(err, ratesem.ErrUnavailable):
		return fmt.Errorf("%w (clientpool.New asks Redis once; redisrate.WithDeferredChecks builds the pool before Redis is up)", err)
	}
	return err
}

// lateCheck runs, with WithDeferredRedisChecks, the eviction check
// deferred (remote.DeferredCheck; bounded by a second).
func (m *redisMode) lateCheck() error { return m.late.Err(m.eng) }

// specOf returns the Redis form of r's window under l.
func specOf(r *Rule, l window.Limit) (*rspec.Spec, error) {
	spec, err := rspec.SpecOf(r.newPolicy(l))
	if err != nil {
		return nil, fmt.Errorf("%w (rule %q: its window has no Redis form)", err, r.Name)
	}
	spec.Concurrency = r.MaxUnitsInFlight
	if err := spec.Check(); err != nil {
		return nil, fmt.Errorf("%w (rule %q: its window cannot be kept in Redis)", err, r.Name)
	}
	return &spec, nil
}

// Close releases what the Pool holds outside the process. In process it
// does nothing and returns nil. In Redis mode (redisrate.Shared) it stops the
// Pool's engine: callers in Acquire return ratesem.ErrClosed, and so do later
// calls; releases already queued are sent for at most a second (those left
// then are covered by their leases). It waits for the round trips still
// running, at most two seconds, and never closes the Redis client. Tickets
// may still be released after Close. Calling it again only waits again.
func (p *Engine) Close() error {
	if p.rem == nil {
		return nil
	}
	return p.rem.eng.Close()
}

// acquireRedis is Acquire in Redis mode, for charges already merged.
func (p *Engine) acquireRedis(ctx context.Context, t *Ticket, charges []Charge) error {
	since := time.Now()
	if err := p.rem.lateCheck(); err != nil {
		p.emitFailed(charges, nil, err)
		return err
	}
	hs, rcs, setHere, err := p.startRedis(ctx, charges)
	p.flushEvicted()
	if err != nil {
		p.emitFailed(charges, nil, err)
		return err
	}
	eng, scope := p.rem.eng, p.rem.scope
	call, err := eng.Acquire(ctx, scope, rcs)
	if err != nil && p.relearn(hs, rcs, err) {
		call, err = eng.Acquire(ctx, scope, rcs) // a learned limit never refuses a call (learn_redis.go)
	}
	if err != nil && setHere && errors.Is(err, ratesem.ErrLimitMismatch) {
		// This process changed a rule's limit with SetLimit: it is the
		// limit for every process, so write it to the keys another
		// process still keeps under the old one, and try once more.
		for i, c := range rcs {
			if hs[i].lim.rule.setHere {
				if err = eng.SetLimit(ctx, scope, c); err != nil {
					break
				}
			}
		}
		if err == nil {
			call, err = eng.Acquire(ctx, scope, rcs)
		}
	}
	if err != nil {
		p.unrefAll(hs)
		p.emitFailed(charges, nil, err)
		return err
	}
	t.pool, t.held, t.charges, t.rcall = p, hs, charges, call
	p.mu.Lock()
	for i := range hs {
		h := &hs[i]
		h.lim.inflight += h.n
		h.thrAtAdmit = h.lim.throttles()
	}
	p.rem.calls[t] = call
	p.adoptLocked(hs, call)
	p.mu.Unlock()
	p.emitAdmitted(t, charges, time.Since(since), false)
	return nil
}

// startRedis checks charges, references their limiters in this process
// and returns their Redis charges; setHere reports that one of their
// rules' limits was set by SetLimit in this process.
func (p *Engine) startRedis(ctx context.Context, charges []Charge) (hs []held, rcs []rspec.Charge, setHere bool, err error) {
	if len(charges) > MaxRedisCharges {
		return nil, nil, false, fmt.Errorf("%w: %d, at most %d", ratesem.ErrTooManyCharges, len(charges), MaxRedisCharges)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, nil, false, err
	}
	if err := p.tooHeavyLocked(charges); err != nil {
		return nil, nil, false, err
	}
	now := p.now()
	if p.idle > 0 {
		p.evictLocked(now, evictBudget, false)
	}
	hs = make([]held, len(charges))
	if err := p.refLocked(hs, charges, now); err != nil {
		return nil, nil, false, err
	}
	rcs = make([]rspec.Charge, len(charges))
	for i, c := range charges {
		rs := hs[i].lim.rule
		rcs[i] = redisChargeLocked(&hs[i], c)
		setHere = setHere || rs.setHere
	}
	return hs, rcs, setHere, nil
}

// releaseRedis is Ticket.Release in Redis mode: the local accounting now,
// Redis in the background.
func (t *Ticket) releaseRedis() {
	call := t.releaseLocal()
	call.Release()
}

// releaseLocal does the local accounting of a release in Redis mode and
// returns the call to end in Redis.
func (t *Ticket) releaseLocal() *remote.Call {
	p := t.pool
	p.mu.Lock()
	call := p.rem.calls[t]
	delete(p.rem.calls, t)
	now := p.now()
	for i := range t.held {
		h := &t.held[i]
		l := h.lim
		l.inflight -= h.n
		if fb := l.fb; fb != nil && fb.streak != 0 && fb.throttles == h.thrAtAdmit {
			fb.streak = 0 // a call went through without a throttle
		}
		p.unrefLocked(l, now)
	}
	p.mu.Unlock()
	return call
}

// releaseRedisSettled is releaseRedis for a call whose weights are known
// only after it: actual[i] is the units t.held[i] really cost (−1, or any
// negative: not settled, its weight counts as today; len(actual) must be
// len(t.held)). The local accounting is done now; Redis settles the call in
// the background (remote.Call.ReleaseSettled). It panics when len(actual)
// differs from len(t.held); never waits on Redis.
func (t *Ticket) releaseRedisSettled(actual []int64) {
	if len(actual) != len(t.held) {
		panic(fmt.Sprintf("clientpool: %d settled weights for %d charges", len(actual), len(t.held)))
	}
	as := make([]int64, len(actual))
	for i, a := range actual {
		if a < 0 {
			a = t.held[i].n
		}
		as[i] = a
	}
	t.releaseLocal().ReleaseSettled(as)
}

// observeRedis is Ticket.ObserveHeaders in Redis mode: each count the
// headers give goes to Redis, which counts at least that many units in the
// window from then on.
func (t *Ticket) observeRedis(h http.Header) {
	p := t.pool
	t.learnRedis(h)
	p.mu.Lock()
	// seen: when this response was read, on Redis's clock (estimated from
	// the admission's instant there and this process's clock since).
	var seen time.Time
	call := t.rcall // after Release too: the report is still this call's
	if call != nil {
		if at, back := call.Admitted(); !at.IsZero() {
			seen = at.Add(time.Since(back))
		}
	}
	p.mu.Unlock()
	for i := range t.held {
		hd := &t.held[i]
		rs := hd.lim.rule
		if rs.Usage == nil {
			continue
		}
		used, ok := rs.Usage(h)
		if !ok || used < 0 {
			continue
		}
		c := t.charges[i]
		r := rspec.Read{Seen: seen}
		p.mu.Lock()
		// A call's units are taken off the server's count once: another
		// report of it goes without its mark (rspec.Store.ReconcileAt).
		first := !hd.reported
		hd.reported = true
		p.mu.Unlock()
		if call != nil && first {
			r.Mark, r.Weight = call.Mark(i), c.Weight
		}
		p.reconcileRedis(rs, c.Key, used, r)
	}
}

// reconcileRedis sends a server's count for (rule, key) to Redis, in the
// background, and reports it.
//
// r says when the response that reported used was read, on Redis's clock
// (zero when not known), and the call's mark: a window aligned to the clock
// drops a count read in an earlier window than the one current when it
// reaches Redis, which is that window's count (rspec.Store.ReconcileAt).
func (p *Engine) reconcileRedis(rs *ruleState, key string, used int64, r rspec.Read) {
	p.mu.Lock()
	spec := p.keySpecLocked(rs, key)
	p.mu.Unlock()
	p.rem.eng.ReconcileAtThen(p.rem.scope, rspec.Charge{Rule: rs.Name, Key: redisKey(key), Spec: spec}, used, r, p.reconciledThen(rs.Name, key))
}

// pauseRedis writes the pause of (rule, key) until until to Redis, in the
// background.
func (p *Engine) pauseRedis(rule, key string, until time.Time) {
	rs := p.rules[rule]
	if rs == nil {
		return
	}
	p.mu.Lock()
	spec, d := p.keySpecLocked(rs, key), until.Sub(p.now())
	p.mu.Unlock()
	p.rem.eng.Pause(p.rem.scope, rspec.Charge{Rule: rule, Key: redisKey(key), Spec: spec}, d)
}

// setLimitRedis is SetLimit in Redis mode.
func (p *Engine) setLimitRedis(rs *ruleState, l window.Limit) error {
	spec, err := specOf(rs.Rule, l)
	if err != nil {
		return err
	}
	p.mu.Lock()
	rs.setLimit(l)
	rs.quiet = 0
	rs.spec, rs.setHere = spec, true
	rs.learning, rs.unknown = false, false
	keys := make([]string, 0, len(rs.keys))
	for k, l := range rs.keys {
		keys = append(keys, k)
		l.unknown = false
		if l.fb != nil {
			l.fb.spec = nil // the limit set here, not one learned
		}
	}
	p.mu.Unlock()
	for _, k := range keys {
		if err := p.rem.eng.SetLimit(context.Background(), p.rem.scope, rspec.Charge{Rule: rs.Name, Key: redisKey(k), Spec: spec}); err != nil {
			return fmt.Errorf("%w (SetLimit(%q, %v): key %q)", err, rs.Name, l, k)
		}
	}
	return nil
}

// capRedisPause caps a pause of Redis mode at now + the pool's cap.
func capRedisPause(until, now time.Time, maxPause time.Duration) time.Time {
	if limit := now.Add(backoff.Cap(maxPause)); until.After(limit) {
		return limit
	}
	return until
}

// tryRedis is TryAcquire in Redis mode, for charges already merged.
func (p *Engine) tryRedis(t *Ticket, charges []Charge) (time.Duration, error) {
	if err := p.rem.lateCheck(); err != nil {
		p.emitFailed(charges, nil, err)
		return 0, err
	}
	hs, rcs, _, err := p.startRedis(context.Background(), charges)
	p.flushEvicted()
	if err != nil {
		p.emitFailed(charges, nil, err)
		return 0, err
	}
	call, d, err := p.rem.eng.TryAcquireWait(p.rem.scope, rcs)
	if call == nil && err != nil && p.relearn(hs, rcs, err) {
		call, d, err = p.rem.eng.TryAcquireWait(p.rem.scope, rcs) // (learn_redis.go)
	}
	if call == nil {
		p.unrefAll(hs)
		if err != nil && !errors.Is(err, ratesem.ErrInFlight) {
			p.emitFailed(charges, nil, err)
		}
		return d, err
	}
	t.pool, t.held, t.charges, t.rcall = p, hs, charges, call
	p.mu.Lock()
	for i := range hs {
		h := &hs[i]
		h.lim.inflight += h.n
		h.thrAtAdmit = h.lim.throttles()
	}
	p.rem.calls[t] = call
	p.adoptLocked(hs, call)
	p.mu.Unlock()
	p.emitAdmitted(t, charges, 0, false)
	return 0, nil
}
