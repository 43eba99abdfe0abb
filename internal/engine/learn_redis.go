package engine

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/remote"
	"github.com/ratesem/ratesem/internal/rspec"
	"github.com/ratesem/ratesem/internal/sat"
	"github.com/ratesem/ratesem/window"
)

// Learned limits in Redis mode (Rule.Learn with redisrate.Shared).
//
// A key whose limit nobody has learned is charged under rspec.Unknown:
// one call at a time across the fleet, charged 1 unit and released settled
// at its real weight (held.cut), so that a limit learned meanwhile counts
// it whole. A process that learns a key's limit from a reply (redisMode.learn)
// keeps it as the key's Spec (feedback.spec) and stores it in Redis for
// every process (remote.Engine.SetLimit, one round trip, only when the
// limit changes); the others adopt it at their next admission on the key
// (remote.Call.Adopted, adoptLocked) and charge real weights from then.
// A reply that names the server's window (Learned.Reset) makes the key an
// rspec.Quota: the budget the server announced, shared by the fleet
// (remote.Engine.BudgetThen), and its calls in flight, leased in Redis
// (a window that ends without a reply allows N less them, as in
// process); a reply without one is the server's count
// (remote.Engine.ReconcileAtThen). Pool.Limit reports the limit learned or
// adopted, as in process.

// lateBudget is how much longer than a round trip's bound a first budget
// report is waited for (redisMode.learn).
const lateBudget = 100 * time.Millisecond

// unknownSpec is rspec.Unknown(), shared; never changed.
var unknownSpec = rspec.Unknown()

// redisSpec returns the Spec l's key is charged under in Redis mode: the
// limit it learned or adopted, rspec.Unknown while it knows none, else
// its rule's.
func (l *limiter) redisSpec() *rspec.Spec {
	if fb := l.fb; fb != nil && fb.adFollow {
		return l.rule.spec // following its rule's switch to a quota (adapt_redis.go)
	}
	if fb := l.fb; fb != nil && fb.spec != nil {
		return fb.spec
	}
	if l.unknown {
		return unknownSpec
	}
	if l.ad != nil && l.rule.adQuota != nil {
		return l.rule.adQuota // an adaptive rule counted in the server's windows
	}
	return l.rule.spec
}

// keyCharge returns the Redis charge of (rs, key), of no weight, under
// its Spec in Redis mode, whether or not this process holds a limiter for
// it (an Unknown one adopts whatever Redis stores).
func (p *Engine) keyCharge(rs *ruleState, key string) rspec.Charge {
	p.mu.Lock()
	defer p.mu.Unlock()
	spec := rs.spec
	if l := rs.keys[key]; l != nil {
		spec = l.redisSpec()
	} else if rs.unknown {
		spec = unknownSpec
	} else if rs.adQuota != nil {
		spec = rs.adQuota
	}
	return rspec.Charge{Rule: rs.Name, Key: redisKey(key), Spec: spec}
}

// redisChargesLocked returns the Redis charges of hs, each under its
// key's Spec (learned, adopted, or its rule's as SetLimit left it). Under
// a rule with Learn a key that knows no limit is charged 1 unit, and a
// charge heavier than the key's learned limit that limit (a learned limit
// never refuses a call, learnedFit); either is released settled at its
// real weight (hd.cut). In Redis mode recAtAdmit keeps the units charged
// there and usedAtAdmit is 1 when the charge is leased there (a completion
// window, a concurrency cap, a quota): budget reports read them
// (redisMode.learn).
// p.mu must be held.
func redisChargesLocked(hs []held) []rspec.Charge {
	rcs := make([]rspec.Charge, len(hs))
	for i := range hs {
		hd := &hs[i]
		l := hd.lim
		spec := l.redisSpec()
		w := hd.n
		// an adaptive key knows its level, until its rule counts in the
		// server's windows
		if l.rule.Learn != nil && (l.ad == nil || spec.Kind == rspec.Quota) {
			if l.unknown {
				w = 1
			} else {
				w = min(w, max(spec.Capacity(), 1))
			}
			hd.cut = w != hd.n
		}
		hd.recAtAdmit, hd.usedAtAdmit = w, 0
		hd.specGen = l.state().specGen
		if spec.Kind.NativeInFlightCap() || spec.Concurrency > 0 || spec.Kind == rspec.Quota {
			hd.usedAtAdmit = 1
		}
		rcs[i] = rspec.Charge{Rule: l.rule.Name, Key: redisKey(l.key), Spec: spec, Weight: w}
	}
	return rcs
}

// adoptLocked takes in the limits Redis decided call's charges under
// instead of those sent (learned by another process, or stored by
// SetLimit): a key of a rule with Learn keeps it as its own from now on.
// hs are the call's charges, in the order sent. p.mu must be held.
func (p *Engine) adoptLocked(hs []held, call *remote.Call) {
	idx, specs := call.Adopted()
	for j, i := range idx {
		if i < 0 || i >= len(hs) || j >= len(specs) {
			continue
		}
		l, s := hs[i].lim, specs[j]
		if l.ad != nil && l.rule.Learn != nil {
			p.adaptAdoptLocked(l, s) // adapt_redis.go
			continue
		}
		if l.rule.Learn == nil || l.ad != nil || s == *unknownSpec || !l.unknown && s == *l.redisSpec() {
			continue
		}
		if fb := l.state(); fb.specStoring > 0 || fb.specGen != hs[i].specGen {
			// decided under a limit stored before the one this process
			// learned since (or is storing): the older answer is not
			// taken in; the next admission adopts what Redis then keeps
			continue
		}
		p.setKeySpecLocked(l, s)
	}
	for i := range hs {
		// a key following its adaptive rule's switch to a quota that
		// Redis admitted under the level it keeps (adapt_redis.go)
		if l := hs[i].lim; l.fb != nil && l.fb.adFollow && !slices.Contains(idx, i) {
			p.adaptAdoptLocked(l, *l.rule.spec)
		}
	}
}

// setKeySpecLocked gives l's key the limit s (learned here or adopted):
// the key is charged under it from now on, and the rule's limit becomes
// s's (the one Pool.Limit reports), as in process (setKeyLimitLocked).
// p.mu must be held.
func (p *Engine) setKeySpecLocked(l *limiter, s rspec.Spec) {
	l.feedback().spec = &s
	l.unknown = false
	rs := l.rule
	if rs.learning || s.Limit != rs.limit {
		rs.learning = false
		rs.setLimit(s.Limit)
		rs.quiet = 0 // the window lives in Redis
	}
}

// learnedSpec returns the Spec a reply's report in gives a key of rs
// whose Spec is cur: an rspec.Quota when the report names the server's
// window (or the key counts in them already), else the rule's window at
// the reported limit; false when the report has no limit or Redis cannot
// keep it.
func learnedSpec(rs *ruleState, cur *rspec.Spec, in Learned) (rspec.Spec, bool) {
	if in.Limit.N <= 0 {
		return rspec.Spec{}, false
	}
	lim := window.Limit{N: min(in.Limit.N, MaxLearnedN, rspec.MaxN), Per: in.Limit.Per}
	if lim.Per <= 0 || lim.Per > min(maxLearnedPer, rspec.MaxPer) {
		lim.Per = rs.limit.Per
	}
	lim.Per = lim.Per.Truncate(time.Microsecond)
	if lim.Per <= 0 {
		return rspec.Spec{}, false
	}
	if !in.Reset.IsZero() || cur.Kind == rspec.Quota {
		s := rspec.Spec{Kind: rspec.Quota, Limit: lim, Concurrency: rs.MaxUnitsInFlight}
		return s, s.Check() == nil
	}
	s, err := specOf(rs.Rule, lim)
	if err != nil {
		return rspec.Spec{}, false
	}
	return *s, true
}

// learn is the Rule.Learn part of ObserveHeaders in Redis mode: t's
// charge hd takes in its report in; date is the reply's Date (zero when
// none). A limit new to the key becomes its Spec and is stored
// in Redis for every process first (one round trip, bounded by the Redis
// timeout; on failure the key's next call sends it, which replaces an
// rspec.Unknown stored there). Then what remains goes to Redis: a quota
// key's budget until the reply's reset (plus ResetMargin; waited for when
// the quota was just stored), or the server's count (limit − remaining)
// for the others, in the background.
func (m *redisMode) learn(t *Ticket, hd *held, in Learned, date time.Time) {
	if hd.lim.ad != nil {
		m.adaptLearn(t, hd, in, date) // adapt_redis.go
		return
	}
	p := m.p
	p.mu.Lock()
	l, rs := hd.lim, hd.lim.rule
	now := p.now()
	var share bool
	if s, ok := learnedSpec(rs, l.redisSpec(), in); ok && (l.unknown || s != *l.redisSpec()) {
		p.setKeySpecLocked(l, s)
		share = true
		fb := l.feedback()
		fb.specGen++
		fb.specStoring++
	}
	spec, unknown, key := l.redisSpec(), l.unknown, l.key
	resetIn, own, tok := reportLocked(rs, t, hd, in, date, now)
	p.mu.Unlock()
	c := rspec.Charge{Rule: rs.Name, Key: redisKey(key), Spec: spec}
	stored := false
	if share {
		stored = m.eng.SetLimit(context.Background(), m.scope, c) == nil
		p.mu.Lock()
		fb := l.feedback()
		fb.specGen++ // the admissions built while it was stored are older too
		fb.specStoring--
		p.mu.Unlock()
	}
	if unknown || in.Remaining < 0 {
		return
	}
	if spec.Kind == rspec.Quota {
		if in.Reset.IsZero() || resetIn <= 0 {
			return // a report without its window, under a rule counted by windows
		}
		if !stored {
			m.eng.BudgetThen(m.scope, c, in.Remaining, resetIn, own, tok, nil)
			return
		}
		// The quota was just stored: its window starts with N less the
		// calls leased (this one among them). Wait (one round trip) for
		// the server's budget before this call can end, so that no
		// admission of the fleet reads a budget the server never gave.
		ctx, cancel := context.WithTimeout(context.Background(), m.timeout+lateBudget)
		defer cancel()
		m.eng.BudgetThen(m.scope, c, in.Remaining, resetIn, own, tok, func(int64, error) { cancel() })
		<-ctx.Done() // the budget stored; or not sent (Redis taken as down, Close), or slow: the next report tightens it
		return
	}
	m.reconcileAt(rs, key, usedOf(spec.Limit.N, in.Remaining), rspec.Read{})
}

// reconciledThen returns the callback of a reconcile sent to Redis for
// (rule, key): the units Redis took in, when any, are reported as a
// ratesem.Reconciled event, as in process. The callback runs on a
// goroutine of the Redis engine: the event is kept (noteLocked) and
// reported on the next caller's goroutine (flushEvicted). Nil without an
// observer.
func (p *Engine) reconciledThen(rule, key string) func(int64, error) {
	if p.observer == nil {
		return nil
	}
	return func(added int64, err error) {
		if err != nil || added <= 0 {
			return
		}
		p.mu.Lock()
		p.noteLocked(p.named(ratesem.Event{Kind: ratesem.Reconciled, Rule: rule, Key: key, Weight: added}))
		p.mu.Unlock()
	}
}

// relearn turns the charges of rules with Learn among rcs (hs's, in
// order) into rspec.Unknown charges of 1 unit, each released settled at
// its real weight, when err says a charge is heavier than a limit stored
// in Redis that this process did not know (another process learned a
// lower one): sent again, they adopt the stored limits (adoptLocked), as
// a call heavier than its key's learned limit goes in process (learnedFit).
// It reports whether it changed a charge (then send rcs again, once).
func (p *Engine) relearn(hs []held, rcs []rspec.Charge, err error) bool {
	if !errors.Is(err, ratesem.ErrWeightTooLarge) {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	changed := false
	for i := range hs {
		hd := &hs[i]
		// (an adaptive key only once its rule counts in the server's
		// windows: its level is its own)
		if hd.lim.rule.Learn == nil || hd.lim.ad != nil && hd.lim.rule.adQuota == nil || rcs[i].Spec == unknownSpec {
			continue
		}
		rcs[i].Spec, rcs[i].Weight = unknownSpec, 1
		hd.cut = hd.n != 1
		hd.recAtAdmit, hd.usedAtAdmit = 1, 1
		changed = true
	}
	return changed
}

// reportLocked returns what a budget report of in, read from the reply of
// call t (hd its charge on the rule rs), sends to Redis: the time until the
// server's window ends plus ResetMargin (0: the reply names no end; a reset
// on the server's clock, in.Epoch, read against the reply's Date), and the
// reporting call's units and token while its lease is still held in Redis
// (0 and "" otherwise). p.mu must be held.
func reportLocked(rs *ruleState, t *Ticket, hd *held, in Learned, date, now time.Time) (resetIn time.Duration, own int64, tok string) {
	if !in.Reset.IsZero() {
		reset := in.Reset
		if in.Epoch {
			reset = reset.Add(rs.skewLocked(date, now))
		}
		// saturating: a reset too far away for a Duration (Sub's maximum)
		// is not one already past (budgetLocked clamps it to Per)
		resetIn = time.Duration(sat.Add(int64(reset.Sub(now)), int64(ResetMargin)))
	}
	if !t.released.Load() && hd.usedAtAdmit == 1 && t.rcall != nil {
		own, tok = hd.recAtAdmit, t.rcall.Token()
	}
	return resetIn, own, tok
}
