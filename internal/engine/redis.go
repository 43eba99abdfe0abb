package engine

import (
	"cmp"
	"container/heap"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
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

// redisMode is an Engine's bookkeeping in Redis mode (book).
type redisMode struct {
	p     *Engine
	eng   *remote.Engine
	scope string
	// late, with WithDeferredChecks, is the eviction check deferred
	// to the first Acquire that finds Redis answering (nil when there is
	// none).
	late *remote.DeferredCheck
	// sending counts, per limiter, this process's releases on their way
	// to Redis; sentCh is closed (and replaced) when one got there.
	sending map[*limiter]int
	sentCh  chan struct{}
	timeout time.Duration // the Redis timeout
}

// initRedis builds the Redis engine of p and the Spec of every rule.
func (p *Engine) initRedis(cfg *Config) error {
	sh := cfg.Shared
	if sh.Opener.Open == nil {
		return errors.New("ratesem: redisrate.Shared: nil client")
	}
	st, err := sh.Opener.Open(sh.Prefix, cfg.Redis.Lease)
	if err != nil {
		return fmt.Errorf("%w (redisrate.Shared)", err)
	}
	scope := cmp.Or(p.scope, sh.Prefix)
	if len(scope) > rspec.MaxNameLen {
		return fmt.Errorf("ratesem: redisrate.Shared: Table.Scope of %d bytes: want at most %d", len(scope), rspec.MaxNameLen)
	}
	for _, rs := range p.ruleList {
		if len(rs.Name) > rspec.MaxNameLen {
			return fmt.Errorf("ratesem: redisrate.Shared: rule name %.64q…: want at most %d bytes", rs.Name, rspec.MaxNameLen)
		}
		switch {
		case rs.spec != nil: // a One's is set already
		case rs.unknown:
			rs.spec = unknownSpec // Rule.Learn with no limit given (learn_redis.go)
		default:
			if rs.spec, err = specOf(rs.Rule, rs.limit); err != nil {
				return err
			}
		}
		rs.quiet = 0 // the window lives in Redis: nothing to forget here
	}
	if err := p.checkAdaptRedis(st); err != nil {
		return err
	}
	var late *remote.DeferredCheck
	if cfg.Redis.DeferChecks {
		if !cfg.Redis.EvictionAllowed {
			late = remote.NewDeferredCheck(func() error { return sh.Opener.Check(cfg.Redis.timeout(), sh.Prefix, scope, nil, true) }, p.checkError)
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
			return p.checkError(err)
		}
	}
	if lease := cmp.Or(cfg.Redis.Lease, rspec.DefaultLease); cfg.Redis.Blocks > 0 && cfg.Redis.BlockHold > lease {
		return fmt.Errorf("ratesem: redisrate.WithBlocks(%d, %v): the hold exceeds the lease %v", cfg.Redis.Blocks, cfg.Redis.BlockHold, lease)
	}
	rc := remote.Config{
		Blocks:         cfg.Redis.Blocks,
		BlockHold:      cfg.Redis.BlockHold,
		Store:          st,
		MaxPause:       backoff.Cap(p.maxPause),
		Timeout:        cfg.Redis.timeout(),
		Jitter:         cfg.Redis.Jitter,
		TestAfterAdmit: cfg.Redis.TestAfterAdmit,
		OnRoom:         p.onRoom,
	}
	if p.one != nil {
		rc.Fallback = p.one.local
	}
	eng, err := remote.New(rc)
	if err != nil {
		return fmt.Errorf("%w (redisrate.Shared)", err)
	}
	p.book = &redisMode{p: p, eng: eng, scope: scope, late: late,
		sending: make(map[*limiter]int), sentCh: make(chan struct{}), timeout: cfg.Redis.timeout()}
	return nil
}

// checkError says what the check at construction (New, or NewShared for a
// semaphore, whose limit mismatch it names) found and what to do.
func (p *Engine) checkError(err error) error {
	what := "clientpool.New asks Redis once; redisrate.WithDeferredChecks builds the pool"
	if p.one != nil {
		what = "redisrate.NewSemaphore asks Redis once; redisrate.WithDeferredChecks builds the semaphore"
		err = p.one.named(err)
	}
	switch {
	case errors.Is(err, ratesem.ErrEviction):
		return fmt.Errorf("%w (redisrate.WithEvictionAllowed to use it anyway)", err)
	case errors.Is(err, ratesem.ErrUnavailable):
		return fmt.Errorf("%w (%s before Redis is up)", err, what)
	}
	return err
}

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
func (p *Engine) Close() error { return p.book.close() }

func (m *redisMode) close() error {
	p := m.p
	err := m.eng.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for e := p.waiters.Front(); e != nil; {
		next := e.Next()
		if w := e.Value.(*waiter); !w.done {
			p.finishLocked(w, ratesem.ErrClosed)
		}
		e = next
	}
	p.settleLocked(p.now())
	return err
}

// holdRedis makes t the ticket of the call Redis admitted for charges,
// held in hs: its units in flight here too.
func (p *Engine) holdRedis(t *Ticket, hs []held, charges []Charge, call *remote.Call) {
	t.pool, t.held, t.charges, t.rcall = p, hs, charges, call
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range hs {
		h := &hs[i]
		h.lim.inflight += h.n
		h.thrAtAdmit = h.lim.state().throttles
	}
	p.adoptLocked(hs, call) // limits learned elsewhere (learn_redis.go)
}

// askRedis makes the decision for w that its queues wanted: one Decide,
// outside the lock, then applied under it (granted; or refused, w's wake
// set at the instant Redis named, jittered; or woken by a release of this
// process, OnRoom, or after remote.ReleaseRetry). It reports whether w
// started waiting now (its first refusal).
func (m *redisMode) askRedis(ctx context.Context, w *waiter) bool {
	p := m.p
	o, err := m.decide(ctx, w.held, w.rcs, w.setHere)
	p.mu.Lock()
	defer p.mu.Unlock()
	w.asking = false
	if w.free {
		w.free = false
		for i := range w.held {
			w.held[i].lim.asking--
		}
	}
	now := p.now()
	defer p.settleLocked(now)
	first := false // refused for the first time: it waits from now on
	if err == nil && o.Call == nil && w.uncounted && !w.done {
		if err = p.queueFullLocked(w.held); err == nil {
			first = true
			p.countLocked(w)
		}
	}
	switch {
	case w.done: // failed meanwhile (its budget, SetLimit, Close)
		if o.Call != nil {
			o.Call.Release()
		}
	case err != nil && ctx.Err() != nil: // await sees ctx done
	case err != nil:
		p.finishLocked(w, err)
	case o.Call != nil:
		w.rcall, w.granted = o.Call, now
		p.finishLocked(w, nil)
	default:
		w.out, w.refused = &o, true
		p.tryWaiterLocked(w, now)
	}
	askAheadLocked(w.held)
	return first && !w.done
}

// decide asks Redis for a call whose charges rcs are hs's, in order,
// after the eviction check WithDeferredChecks deferred (remote.DeferredCheck,
// bounded by a second: after the checks without a round trip); once more
// as rspec.Unknown charges when Redis stores a learned limit lower than
// this process knew (relearn: a learned limit never refuses a call);
// and when setHere (a rule's limit was set by SetLimit here: it is the
// limit for every process) and Redis keeps another, once more after
// writing it to the keys another process still keeps under the old one.
func (m *redisMode) decide(ctx context.Context, hs []held, rcs []rspec.Charge, setHere bool) (remote.Outcome, error) {
	if err := m.late.Err(m.eng); err != nil {
		return remote.Outcome{}, err
	}
	o, err := m.eng.Decide(ctx, m.scope, rcs)
	if err != nil && m.p.relearn(hs, rcs, err) {
		o, err = m.eng.Decide(ctx, m.scope, rcs)
	}
	if err != nil && errors.Is(err, ratesem.ErrLimitMismatch) && setHere {
		for i, c := range rcs {
			if hs[i].lim.rule.setHere {
				if err = m.eng.SetLimit(ctx, m.scope, c); err != nil {
					break
				}
			}
		}
		if err == nil {
			o, err = m.eng.Decide(ctx, m.scope, rcs)
		}
	}
	return o, err
}

// maxFreeAsks bounds the calls of one limiter that ask Redis at once
// outside its queue: a herd arriving at once costs that many round trips,
// the others queue behind.
const maxFreeAsks = 8

// freeLocked reports whether a call of the limiters of hs may ask Redis
// at once, outside the queues: on each, no call queues but a head asking
// (nobody was refused there), and fewer than maxFreeAsks ask so. Calls
// admitted at once do not wait for one another's round trips.
func freeLocked(hs []held) bool {
	for i := range hs {
		l := hs[i].lim
		if q := l.q; q != nil && q.head != nil && (q.head != q.tail || !q.head.w.asking) {
			return false
		}
		if l.asking >= maxFreeAsks {
			return false
		}
	}
	return true
}

// askFreeLocked makes w, a call that freeLocked let through, ask Redis
// outside the queues; refused, it joins them in its rank's order.
func askFreeLocked(w *waiter) {
	w.free = true
	for i := range w.held {
		w.held[i].lim.asking++
	}
	w.askLocked()
}

// leaveFreeLocked undoes askFreeLocked for w, whose goroutine leaves
// await (its context done, or w failed) without taking the ask: askRedis,
// which undoes it otherwise, will not run. The calls queued behind may ask
// ahead in its place.
func leaveFreeLocked(w *waiter) {
	if !w.free {
		return
	}
	w.free, w.asking = false, false
	for i := range w.held {
		w.held[i].lim.asking--
	}
	askAheadLocked(w.held)
}

// askAheadLocked lets the calls queued on the limiters of hs that Redis
// never refused ask it now, in queue order, while fewer than maxFreeAsks
// calls of each of their limiters ask outside the queues (askFreeLocked):
// a queue that formed because many calls asked at once, not because Redis
// refused one, drains up to maxFreeAsks decisions per round trip (remote
// sends the concurrent decisions of a scope together) instead of one head
// after another. It stops at a call that waits on a refusal (nobody
// queued behind it asks before it) and at one lighter than a call ahead
// of it (clearAheadLocked). Calls asked ahead of equal weights may still
// be decided in another order than their queue's when the limit has room
// for some of them only (their goroutines reach Redis in the order they
// run), as calls that arrive together and ask at once may.
func askAheadLocked(hs []held) {
	for i := range hs {
		l := hs[i].lim
		if l.q == nil {
			continue
		}
		for n := l.q.head; n != nil && l.asking < maxFreeAsks; n = n.next {
			w := n.w
			if w.refused || w.done || w.parked {
				break // asking again or not, nobody behind it asks first
			}
			if w.asking {
				continue
			}
			if !clearAheadLocked(w) {
				break
			}
			askFreeLocked(w)
		}
	}
}

// clearAheadLocked reports whether w, queued, may ask Redis outside its
// queues: on each of its limiters fewer than maxFreeAsks calls ask so and
// every call queued ahead of it asks now (none waits on a refusal) for no
// more units than w: a lighter call could be admitted where the heavier
// one ahead of it is refused, overtaking it, so it waits its turn.
func clearAheadLocked(w *waiter) bool {
	for i := range w.nodes {
		if w.held[i].lim.asking >= maxFreeAsks {
			return false
		}
		for m := w.nodes[i].prev; w.nodes[i].inq && m != nil; m = m.prev {
			if !m.w.asking || m.w.refused || m.held().n > w.held[i].n {
				return false
			}
		}
	}
	return true
}

// askLocked has w's goroutine ask Redis (askRedis), its Redis charges set
// to the limits in force (SetLimit), noting whether one of them was set in
// this process.
func (w *waiter) askLocked() {
	w.rcs = redisChargesLocked(w.held)
	w.setHere = slices.ContainsFunc(w.held, func(h held) bool { return h.lim.rule.setHere })
	w.asking = true
	select {
	case w.ask <- struct{}{}:
	default:
	}
}

// queueFullLocked returns the ratesem.ErrQueueFull error when one of the
// limiters of hs has the WithMaxQueue number of waiting calls, or nil.
func (p *Engine) queueFullLocked(hs []held) error {
	if p.maxQueue <= 0 {
		return nil
	}
	for i := range hs {
		if l := hs[i].lim; l.waiting >= p.maxQueue {
			return fmt.Errorf("%w: %d calls wait%s (WithMaxQueue)", ratesem.ErrQueueFull, l.waiting, l.rule.where(l.key))
		}
	}
	return nil
}

// decideLocked is decideLocked in Redis mode: the decision its
// goroutine brought back (w.out), applied; or, when there is none, w's
// goroutine is asked to make one (askRedis), once at a time.
func (m *redisMode) decideLocked(w *waiter, now time.Time) (at time.Time, needRelease, ok bool) {
	o := w.out // a refusal: askRedis applied an admission itself
	w.out = nil
	for i := range w.nodes {
		w.nodes[i].refused, w.nodes[i].when, w.nodes[i].rel = o == nil, 0, false
	}
	if o == nil {
		if !w.asking {
			w.askLocked()
		}
		return time.Time{}, false, false // asking
	}
	ri := o.Refused
	if ri < 0 || ri >= len(w.nodes) {
		ri = 0
	}
	at = o.At
	if r := now.Add(remote.ReleaseRetry(w.rcs[ri])); o.Release && (at.IsZero() || r.Before(at)) {
		at = r
	}
	if at.Before(now.Add(remote.MinRetry)) {
		// Never sooner than MinRetry: nothing polls Redis in a loop.
		at = now.Add(remote.MinRetry + rand.N(remote.MinRetry))
	} else {
		at = at.Add(m.eng.Jitter(at.Sub(now)))
	}
	n := &w.nodes[ri]
	n.refused, n.when, n.rel = true, max(m.p.mono(at), 1), o.Release
	return at, o.Release, false
}

// newWaiterLocked gives w, a call about to wait, the channel its
// goroutine is asked for a decision on (its Redis charges are set before
// each ask: askLocked).
func (m *redisMode) newWaiterLocked(w *waiter) { w.ask = make(chan struct{}, 1) }

// admitNowLocked is Redis mode's part of start: nothing is admitted
// under the lock; the call asks Redis at once (queue false) unless a
// refused call queues on one of its limiters (freeLocked).
func (m *redisMode) admitNowLocked(_ *Ticket, hs []held, _ time.Time) (queue, ok bool) {
	return !freeLocked(hs), false
}

// policyFor is nil: the windows live in Redis.
func (m *redisMode) policyFor(*ruleState) window.Policy { return nil }

// onRoom is remote.Config.OnRoom: a release of this process (or a usage
// report giving units back, or SetLimit) reached Redis on the limiters of
// cs: the heads refused until a release there ask again.
func (p *Engine) onRoom(scope string, cs []rspec.Charge) {
	p.mu.Lock()
	defer p.mu.Unlock()
	woke := false
	for i := 0; i < len(p.wakes); {
		q := p.wakes[i]
		if n := q.head; n != nil && n.rel && chargesName(cs, q.lim) {
			heap.Remove(&p.wakes, i)
			p.markPending(q)
			woke = true
			continue
		}
		i++
	}
	if woke {
		p.settleLocked(p.now())
	}
}

// chargesName reports whether one of cs is l's.
func chargesName(cs []rspec.Charge, l *limiter) bool {
	return slices.ContainsFunc(cs, func(c rspec.Charge) bool { return c.Rule == l.rule.Name && c.Key == redisKey(l.key) })
}

// sent notes that a release of this process on the limiters of hs
// reached Redis (or failed, or was dropped): a try waiting for it asks
// again. When refund, a charge of hs was settled to less than it held
// (Ticket.Settle, Rule.Settle, Rule.TimeUnit): the room it gives back may
// come before the instant Redis named to the heads of its limiters'
// queues (named while the call counted its estimate), so they ask again
// now, as the heads refused until a release do (onRoom). Without it a
// fan-out settled to a quarter of its estimates ran at 40% of the rate in
// process.
func (m *redisMode) sent(hs []held, refund bool) {
	p := m.p
	p.mu.Lock()
	defer p.mu.Unlock()
	woke := false
	for i := range hs {
		h := &hs[i]
		l := h.lim
		if m.sending[l]--; m.sending[l] <= 0 {
			delete(m.sending, l)
		}
		if q := l.q; refund && h.settled && h.actual < h.n && q != nil && q.head != nil {
			if q.hidx >= 0 {
				heap.Remove(&p.wakes, q.hidx)
			}
			p.markPending(q)
			woke = true
		}
	}
	close(m.sentCh)
	m.sentCh = make(chan struct{})
	if woke {
		p.settleLocked(p.now())
	}
}

// awaitSent waits until no release of this process on the limiters of hs
// is on its way to Redis, at most the Redis timeout. It reports whether
// there was one, or whether a release of this process got to Redis since
// sentCh was before (read before the decision it follows: that release
// may have reached Redis after the decision did).
func (m *redisMode) awaitSent(hs []held, before chan struct{}) bool {
	t := time.NewTimer(m.timeout)
	defer t.Stop()
	waited := false
	for {
		m.p.mu.Lock()
		busy := slices.ContainsFunc(hs, func(h held) bool { return m.sending[h.lim] > 0 })
		ch := m.sentCh
		m.p.mu.Unlock()
		waited = waited || ch != before
		if !busy {
			return waited
		}
		waited = true
		select {
		case <-ch:
		case <-t.C:
			return true
		}
	}
}

// release is Ticket.Release in Redis mode: the local accounting now,
// Redis in the background, the call settled (remote.Call.ReleaseSettled)
// when Settle named a charge's rule or a charge was cut (learn_redis.go:
// charged less in Redis, released at its real weight).
func (m *redisMode) release(t *Ticket) {
	p := t.pool
	p.mu.Lock()
	call := t.rcall // kept: a usage report read after Release still carries its mark
	now := p.now()
	p.timedLocked(t, now)
	hs := t.held
	actual, settle, refund := make([]int64, len(hs)), false, false
	for i := range hs {
		h := &hs[i]
		if actual[i] = h.n; h.settled {
			actual[i] = h.actual
		}
		settle = settle || h.settled || h.cut
		refund = refund || h.settled && h.actual < h.n
		l := h.lim
		m.sending[l]++
		l.inflight -= h.n
		if fb := l.fb; fb != nil && fb.streak != 0 && fb.throttles == h.thrAtAdmit {
			fb.streak = 0 // a call went through without a throttle
		}
		if l.ad != nil && !t.throttled {
			m.adaptReleasedLocked(l, t, actual[i], now) // adapt_redis.go; the level counts units
		}
		p.unrefLocked(l, now)
	}
	call.OnSent(func() { m.sent(hs, refund) })
	p.mu.Unlock()
	if !settle {
		call.Release()
		return
	}
	call.ReleaseSettled(actual)
}

// takeBack ends t at once in Redis, on the safe side.
func (m *redisMode) takeBack(t *Ticket) { t.Release() }

// observe is the Rule.Usage part of Ticket.ObserveHeaders in Redis mode:
// the count used of t's charge i goes to Redis, which counts at least
// that many units in the window from then on.
func (m *redisMode) observe(t *Ticket, i int, used int64) {
	p := t.pool
	hd := &t.held[i]
	var r rspec.Read
	p.mu.Lock()
	// A call's units are taken off the server's count once: another
	// report of it goes without its mark (rspec.Store.ReconcileAt).
	first := !hd.reported
	hd.reported = true
	p.mu.Unlock()
	// set before Acquire returned; after Release too: the report is still this call's
	if call := t.rcall; call != nil {
		// When this response was read, on Redis's clock (estimated from
		// the admission's instant there and this process's clock since).
		if at, back := call.Admitted(); !at.IsZero() {
			r.Seen = at.Add(time.Since(back))
		}
		if first {
			r.Mark, r.Weight = call.Mark(i), t.charges[i].Weight
		}
	}
	m.reconcileAt(hd.lim.rule, t.charges[i].Key, used, r)
}

// reconcile is Reconcile in Redis mode (reconcileAt).
func (m *redisMode) reconcile(rs *ruleState, key string, used int64) error {
	m.reconcileAt(rs, key, used, rspec.Read{})
	return nil
}

// reconcileAt sends a server's count for (rule, key) to Redis, in the
// background, and reports it.
//
// r says when the response that reported used was read, on Redis's clock
// (zero when not known), and the call's mark: a window aligned to the clock
// drops a count read in an earlier window than the one current when it
// reaches Redis, which is that window's count (rspec.Store.ReconcileAt).
func (m *redisMode) reconcileAt(rs *ruleState, key string, used int64, r rspec.Read) {
	m.eng.ReconcileAtThen(m.scope, m.p.keyCharge(rs, key), used, r, m.p.reconciledThen(rs.Name, key))
}

// pauseCap caps a pause of Redis mode at now + the pool's cap
// (WithMaxPause).
func (m *redisMode) pauseCap(until time.Time) time.Time {
	if limit := m.p.now().Add(backoff.Cap(m.p.maxPause)); until.After(limit) {
		return limit
	}
	return until
}

// paused writes the pause of (rule, key) until until to Redis, in the
// background.
func (m *redisMode) paused(rule, key string, until time.Time) {
	p := m.p
	rs := p.rules[rule]
	if rs == nil {
		return
	}
	m.eng.Pause(m.scope, p.keyCharge(rs, key), until.Sub(p.now()))
}

// setLimit is SetLimit in Redis mode.
func (m *redisMode) setLimit(rs *ruleState, l window.Limit) error {
	p := m.p
	if rs.Adapt != nil {
		return m.adaptSetLimit(rs, l) // adapt_redis.go
	}
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
	var stores []*limiter // keys of a rule with Learn: see feedback.specGen
	for k, l := range rs.keys {
		keys = append(keys, k)
		l.unknown = false
		if l.fb != nil {
			l.fb.spec = nil // the limit set here, not one learned
		}
		if rs.Learn != nil {
			fb := l.feedback()
			fb.specGen++ // an admission decided before adopts no older limit
			fb.specStoring++
			stores = append(stores, l)
		}
	}
	p.mu.Unlock()
	var serr error
	for _, k := range keys {
		if e := m.eng.SetLimit(context.Background(), m.scope, rspec.Charge{Rule: rs.Name, Key: redisKey(k), Spec: spec}); e != nil {
			serr = fmt.Errorf("%w (SetLimit(%q, %v): key %q)", e, rs.Name, l, k)
			break
		}
	}
	// The waiters ask again under the new limit (those it can never
	// admit fail).
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range stores {
		l.fb.specGen++ // nor one built while it was stored
		l.fb.specStoring--
	}
	if serr != nil {
		return serr
	}
	p.refitLocked(rs, p.now())
	return nil
}

// keyLimitLocked is KeyState.Limit in Redis mode: the limit of the Spec
// l's key is charged under.
func (m *redisMode) keyLimitLocked(l *limiter) window.Limit {
	if l.ad != nil && l.rule.adQuota == nil { // adaptive: the level Redis last answered (adapt_redis.go)
		return window.Limit{N: l.ad.N(), Per: l.rule.spec.Limit.Per}
	}
	return l.redisSpec().Limit
}

// try is TryAcquire in Redis mode, for charges already merged: it
// never overtakes a waiter of this process (the wait its queues know, or
// ratesem.ErrInFlight), then makes one decision (decide). When Redis says
// only a release can help while releases of this process on those
// limiters are on their way, it waits for them (at most the Redis
// timeout) and decides again: the wait this process's own releases give
// is this process's knowledge.
func (m *redisMode) try(t *Ticket, charges []Charge) (time.Duration, error) {
	p := m.p
	p.mu.Lock()
	hs, err := p.refChargesLocked(charges, p.now())
	if err != nil {
		p.mu.Unlock()
		p.flushEvicted()
		p.emitFailed(charges, nil, err)
		return 0, err
	}
	rcs := redisChargesLocked(hs)
	d, err := p.aheadLocked(hs, p.now())
	before := m.sentCh
	p.mu.Unlock()
	p.flushOr(func() { p.unrefAll(hs) })
	if d == 0 && err == nil {
		var o remote.Outcome
		o, err = m.decide(context.Background(), hs, rcs, false)
		if err == nil && o.Call == nil && o.Release && m.awaitSent(hs, before) {
			o, err = m.eng.Decide(context.Background(), m.scope, rcs)
		}
		switch {
		case err != nil:
		case o.Call != nil:
			t.at = p.mono(p.now()) // the call's start, for a rule with TimeUnit (timedLocked)
			p.holdRedis(t, hs, charges, o.Call)
			p.emitAdmitted(t, charges, 0, false)
			return 0, nil
		case o.Release:
			err = fmt.Errorf("%w: rule %q key %q (Redis: the calls in flight fill the limit)", ratesem.ErrInFlight, charges[o.Refused].Rule, charges[o.Refused].Key)
		default:
			d = o.Wait(time.Now())
		}
	}
	p.unrefAll(hs)
	if err != nil && !errors.Is(err, ratesem.ErrInFlight) {
		p.emitFailed(charges, nil, err)
	}
	return d, err
}

// refChargesLocked checks charges (a weight its rule can never admit:
// tooHeavyLocked), evicts idle keys (a bounded step) and references the
// limiters of charges at now (refLocked), in held charges.
func (p *Engine) refChargesLocked(charges []Charge, now time.Time) ([]held, error) {
	if err := p.tooHeavyLocked(charges); err != nil {
		return nil, err
	}
	if p.idle > 0 {
		p.evictLocked(now, evictBudget, false)
	}
	hs := make([]held, len(charges))
	return hs, p.refLocked(hs, charges, now)
}
