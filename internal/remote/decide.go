package remote

import (
	"cmp"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/ratesem/ratesem/internal/rspec"
)

// Outcome is the answer of Decide: one admission decision for a call's
// charges, which never waited for room.
type Outcome struct {
	// Call is the admitted call (Release it exactly once); nil when the
	// call was refused.
	Call *Call
	// At, when refused, is the earliest instant, on this process's clock,
	// at which the call could be admitted if nothing else changes (a
	// window moving on, a pause ending), never before the decision plus
	// MinRetry when Redis decided it: ask again then. With Release it is
	// the bound the leases give (capped by Config.MaxPause): a release
	// may bring it much sooner.
	At time.Time
	// Release, when refused, reports that time alone cannot make room:
	// only calls in flight ending can (a release of this process, which
	// Config.OnRoom reports, or elsewhere, which nobody reports: ask again
	// within a quarter of the rule's Per, ReleaseRetry). It is the
	// ratesem.ErrInFlight of window.Limiter.TryN.
	Release bool
	// Refused is the index of a charge that refused, when refused (0 when
	// the fallback refused: it does not say which).
	Refused int
	// Local reports that the fallback decided (Redis was taken as
	// unreachable, or did not answer this round trip): a Call it admitted
	// reports Local too. A refusal of the fallback knows no instant: At is
	// the next probe of Redis or ReleaseRetry from now, whichever is
	// sooner.
	Local bool
}

// Wait returns how long from now until o.At (at least 1 ns when refused;
// 0 when admitted).
func (o Outcome) Wait(now time.Time) time.Duration {
	if o.Call != nil {
		return 0
	}
	return max(o.At.Sub(now), 1)
}

// ReleaseRetry is the longest a caller refused because calls in flight
// fill a limit (Outcome.Release) should wait before asking Redis again
// when no release of this process comes first: a quarter of the Per of
// the refusing charge's rule (10 ms for a rule without Per). See the
// package doc (# Asking again).
func ReleaseRetry(c rspec.Charge) time.Duration {
	if c.Spec == nil || c.Spec.Limit.Per <= 0 {
		return zeroPerCap
	}
	return c.Spec.Limit.Per / 4
}

// Result is one decision of ask (of DecideAll, in the package's tests):
// its Outcome, or the error Decide would have returned.
type Result struct {
	Outcome
	Err error
}

// batcher is a Store that decides several calls of one scope in one round
// trip (internal/rstore's Store.AdmitAll), for ask with several waiters
// (DecideAll, in the package's tests); Decide batches through join (a
// piper) instead.
type batcher interface {
	AdmitAll(ctx context.Context, scope string, calls [][]rspec.Charge) ([]rspec.Decision, []error, error)
}

// ask sends the admissions of ws (one or more), all of scope, in one
// round trip (b's AdmitAll, or Store.Admit for one waiter when b is nil)
// and takes Redis's answers (decided). The round trip is bounded
// (bounded): it waits until timeout passes, ctx is done or Close is
// called, and the admissions Redis granted after the caller left are
// cancelled when the answer comes; Redis refuses those it runs after the
// caller stopped waiting (rspec.WithAnswerBy). A round trip that fails
// marks Redis unreachable once: the waiters after the first go to the
// fallback (one failure, one step of the probe schedule).
func (e *Engine) ask(ctx context.Context, b batcher, scope string, ws []*waiter, timeout time.Duration) []Result {
	type result struct {
		ds   []rspec.Decision
		errs []error
		err  error
	}
	rs := make([]Result, len(ws))
	calls := make([][]rspec.Charge, len(ws))
	for i, w := range ws {
		calls[i] = w.cs
	}
	// Nobody waits for the answer after by: Redis refuses the admission
	// if it runs later (a Redis frozen meanwhile runs it when it wakes,
	// and nobody would read its answer to cancel it).
	by := time.Now().Add(timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(by) {
		by = dl
	}
	e.mu.Lock()
	for _, w := range ws {
		w.epoch, w.trip = e.forgets, nil // before Redis runs it (staleLocked)
	}
	e.mu.Unlock()
	a, left := bounded(e, ctx, timeout, e.closeCtx.Done(), func(octx context.Context) (r result) {
		actx := rspec.WithAnswerBy(octx, by)
		if b != nil {
			r.ds, r.errs, r.err = b.AdmitAll(actx, scope, calls)
		} else {
			d, err := e.st.Admit(actx, scope, calls[0])
			r.ds, r.errs = []rspec.Decision{d}, []error{err}
		}
		return r
	}, func(r result) { // the caller left: nobody will use these admissions
		for i, d := range r.ds {
			if r.errs[i] == nil && d.OK {
				e.cancel(scope, calls[i], d.Token, true)
			}
		}
	})
	var cause error
	for k, w := range ws {
		r := &rs[k]
		switch {
		case cause != nil:
			r.Outcome, r.Err = e.local(w, cause)
		case a.err != nil || left != nil:
			r.Outcome, r.Err = e.decided(ctx, w, rspec.Decision{}, a.err, left)
			if left == nil || (left != ErrClosed && ctx.Err() == nil) {
				cause = cmp.Or(a.err, left)
			}
		default:
			r.Outcome, r.Err = e.decided(ctx, w, a.ds[k], a.errs[k], nil)
		}
	}
	return rs
}

// Decide makes ONE admission decision for the call's charges and never
// waits for room: one round trip to Redis (bounded by Config.Timeout and
// ctx), or none when this process already knows the answer (a pause, or a
// refusal whose instant has not come: Outcome.At says it), or the
// fallback's TryAcquire while Redis is taken as unreachable. The caller's
// own queues order its calls; it follows the engine's other rules: the fallback's calls are carried into
// Redis before any admission there; while the fallback's window drains
// the call needs room in the fallback too (the gate); a round trip that
// fails marks Redis unreachable (then Decide asks the fallback, and asks
// Redis again at the probe schedule: 100 ms after the failure, doubling up
// to a second); the first answer after marks it reachable. An admission
// Redis grants after ctx is done, or after Timeout, is cancelled there.
//
// It returns the admitted call in Outcome.Call, or a refusal (Outcome.At,
// Release); an error for what is not a refusal: those of the
// checks (ratesem.ErrNegativeWeight, ErrWeightTooLarge, a nil Spec) at
// once, an error matching rspec.ErrLimitMismatch, one matching
// ErrUnavailable when Redis cannot be reached and there is no Fallback,
// ctx.Err() when ctx ends first, ErrClosed after Close. A call of no
// charges is admitted without a round trip. It reports no events (the
// caller's engine reports its own). It is safe for concurrent use.
func (e *Engine) Decide(ctx context.Context, scope string, cs []rspec.Charge) (Outcome, error) {
	w, o, err := e.begin(ctx, scope, cs)
	if w == nil {
		return o, err
	}
	defer e.leave(w)
	if e.cfg.Blocks > 0 {
		if o, ok, err := e.viaBlock(ctx, w); ok {
			return o, err
		}
	}
	return e.decide(ctx, w)
}

// begin checks a call's charges and returns its waiter, counted among the
// decisions in progress until leave; or, with no waiter, the call's
// outcome when it is decided at once: an error of the checks, ctx.Err(),
// ErrClosed, or a call of no charges admitted (no round trip).
func (e *Engine) begin(ctx context.Context, scope string, cs []rspec.Charge) (*waiter, Outcome, error) {
	if err := checkCharges(cs); err != nil {
		return nil, Outcome{}, err
	}
	if err := ctx.Err(); err != nil {
		return nil, Outcome{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.closed:
		return nil, Outcome{}, ErrClosed
	case len(cs) == 0:
		e.stats.InFlight++
		e.stats.Admitted++
		return nil, Outcome{Call: &Call{e: e, scope: scope}}, nil
	}
	e.active++
	return &waiter{scope: scope, cs: slices.Clone(cs)}, Outcome{}, nil
}

// leave ends w's decision: the fallback's units the gate holds for it, if
// any (not passed on to a Call), are given back.
func (e *Engine) leave(w *waiter) {
	if w.local != nil {
		w.local()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.active--
	e.checkDrainedLocked()
}

// knownLocked returns the latest instant after now before which w is known
// not to be admitted (a pause, a refusal's instant) and the index of that
// charge; zero when none. e.mu must be held.
func (e *Engine) knownLocked(w *waiter, now time.Time) (until time.Time, ri int) {
	for i, c := range w.cs {
		if l := e.lims[limKey{w.scope, c.Rule, c.Key}]; l != nil {
			at := l.paused
			if c.Weight >= l.notBeforeN && l.notBefore.After(at) {
				at = l.notBefore
			}
			if now.Before(at) && at.After(until) {
				until, ri = at, i
			}
		}
	}
	return until, ri
}

// decide takes one decision for w: what this process knows (a pause, a
// refusal's instant), or the fallback while Redis is taken as
// unreachable, or one round trip to Redis (after the gate and the carry of
// the fallback's calls). The fallback and the gate only try. The gate's
// units (w.local) pass to the Call admitted; leave gives them back
// otherwise.
func (e *Engine) decide(ctx context.Context, w *waiter) (Outcome, error) {
	now := time.Now()
	e.mu.Lock()
	closed := e.closed
	down, probe, downErr := e.down, !now.Before(e.nextProbe), e.downErr
	gated := w.local == nil && e.gatedLocked(now)
	until, ri := e.knownLocked(w, now)
	e.mu.Unlock()
	switch {
	case closed:
		return Outcome{}, ErrClosed
	case ctx.Err() != nil:
		return Outcome{}, ctx.Err()
	case !until.IsZero():
		return Outcome{At: until, Refused: ri}, nil
	case down && !probe:
		return e.local(w, downErr)
	}
	if gated && w.block {
		return Outcome{Local: true}, nil // no block from the fallback
	}
	if gated {
		// The gate: while the fallback's own calls still count, a call
		// takes the fallback's units as well as Redis's (gatedLocked). A
		// call heavier than the fallback's share is refused until the
		// window drains, and asks again.
		rel, err := e.fbTry(w)
		if err != nil {
			return e.localRefusal(w), nil
		}
		w.local = rel
	}
	timeout := e.cfg.Timeout
	if down {
		timeout = min(timeout, probeTimeout)
	}
	// The fallback's calls go to Redis before any call of this process
	// does (the first round trip after an outage carries them).
	if _, err := e.carry(ctx, timeout); err != nil {
		switch {
		case err == ErrClosed:
			return Outcome{}, ErrClosed
		case ctx.Err() != nil:
			return Outcome{}, ctx.Err()
		}
		return e.failed(w, err)
	}
	if _, ok := e.st.(piper); ok && !down {
		return e.join(ctx, w)
	}
	r := e.ask(ctx, nil, w.scope, []*waiter{w}, timeout)[0]
	return r.Outcome, r.Err
}

// decided takes Redis's answer to w's admission (d, or the round trip's
// err, or left: the caller left before the answer, see admit): the
// Call admitted, the refusal recorded, the round trip's failure handed to
// the fallback.
func (e *Engine) decided(ctx context.Context, w *waiter, d rspec.Decision, err, left error) (Outcome, error) {
	e.mu.Lock()
	e.stats.RedisAdmits++
	if d.Lost {
		e.stats.StateLost++
		e.stopScopeBlocksLocked(w.scope) // Redis lost them
	}
	if errors.Is(err, rspec.ErrLimitMismatch) {
		e.stats.LimitMismatches++
	}
	e.mu.Unlock()
	switch {
	case left == ErrClosed:
		return Outcome{}, ErrClosed
	case left != nil && ctx.Err() != nil:
		return Outcome{}, ctx.Err()
	case left != nil:
		return e.failed(w, left) // no answer within the timeout
	case err != nil && !callerError(err):
		return e.failed(w, err)
	}
	e.markUp()
	if err != nil {
		return Outcome{}, err
	}
	if d.OK {
		if e.cfg.TestAfterAdmit != nil {
			e.cfg.TestAfterAdmit()
		}
		c := &Call{e: e, scope: w.scope, cs: w.cs, token: d.Token, d: d, seen: time.Now(), local: w.local, isBlock: w.block}
		if err = ctx.Err(); err == nil {
			err = e.hold(c)
		}
		if err != nil { // the caller left, or Close came: nobody will use it
			e.cancel(w.scope, w.cs, d.Token, false)
			return Outcome{}, err
		}
		w.local = nil // the Call releases them
		return Outcome{Call: c}, nil
	}
	now := time.Now()
	if d.Late {
		// Redis ran it after its deadline though its caller still waited:
		// this process's reading of Redis's clock was off (the store took
		// a new one from this reply). Ask again soon, not at once.
		return Outcome{At: now.Add(MinRetry + rand.N(MinRetry))}, nil
	}
	return e.refused(w, d, now), nil
}

// refused records what Redis's refusal d of w at now teaches (the
// limiter's pause, or the instant before which no call of that weight or
// more is admitted), capped by MaxPause: a hostile or broken server cannot
// park a limiter for longer, and asking again then costs one round trip.
// It returns its Outcome.
func (e *Engine) refused(w *waiter, d rspec.Decision, now time.Time) Outcome {
	ri := d.Refused
	if ri < 0 || ri >= len(w.cs) {
		ri = 0
	}
	wait := min(max(d.Wait, 0), e.cfg.MaxPause)
	o := Outcome{At: now.Add(max(wait, MinRetry)), Release: d.Release, Refused: ri}
	if d.Release {
		o.At = now.Add(max(min(wait, ReleaseRetry(w.cs[ri])), MinRetry))
		return o
	}
	e.mu.Lock()
	e.learnLocked(w, d, now)
	e.mu.Unlock()
	return o
}

// learnLocked records what Redis's refusal d of w at now teaches (see
// refused); a refusal that only a release can lift teaches nothing. e.mu
// must be held.
func (e *Engine) learnLocked(w *waiter, d rspec.Decision, now time.Time) {
	if d.OK || d.Late || d.Release {
		return
	}
	ri := d.Refused
	if ri < 0 || ri >= len(w.cs) {
		ri = 0
	}
	rec := now.Add(min(max(d.Wait, 0), e.cfg.MaxPause))
	l := e.limLocked(limKey{w.scope, w.cs[ri].Rule, w.cs[ri].Key}, now)
	if e.staleLocked(w, l) {
		return // Redis may have made it before a forget answered since
	}
	if d.Paused {
		if rec.After(l.paused) {
			l.paused = rec
		}
	} else {
		l.notBefore, l.notBeforeN = rec, w.cs[ri].Weight
	}
}

// failed handles a round trip of w's decision that failed with cause
// (Redis did not answer): Redis is marked down, and the fallback decides.
func (e *Engine) failed(w *waiter, cause error) (Outcome, error) {
	e.markDown(cause, true)
	return e.local(w, cause)
}

// local decides w in the fallback, at once (a refusal of the fallback
// knows no instant: localRefusal; the caller asks again by the next probe,
// when Decide asks Redis itself), or fails with ErrUnavailable wrapping
// cause when there is none. Units the gate already holds for w are the
// admission.
func (e *Engine) local(w *waiter, cause error) (Outcome, error) {
	if w.block {
		return Outcome{Local: true}, nil // no block from the fallback
	}
	if e.cfg.Fallback == nil {
		return Outcome{}, e.unavailable(cause)
	}
	if w.local == nil {
		rel, err := e.fbTry(w)
		switch {
		case err == errTry:
			return e.localRefusal(w), nil
		case err != nil:
			return Outcome{}, err
		}
		w.local = rel
	}
	c := &Call{e: e, scope: w.scope, cs: w.cs, local: w.local, fb: true}
	if err := e.hold(c); err != nil {
		return Outcome{}, err // leave gives the units back
	}
	w.local = nil // the Call releases them
	return Outcome{Call: c, Local: true}, nil
}

// localRefusal is the Outcome of a refusal of the fallback: it knows no
// instant; ask again at the next probe of Redis or after ReleaseRetry,
// whichever is sooner.
func (e *Engine) localRefusal(w *waiter) Outcome {
	now := time.Now()
	at := now.Add(ReleaseRetry(w.cs[0]))
	e.mu.Lock()
	if e.down && e.nextProbe.After(now) && e.nextProbe.Before(at) {
		at = e.nextProbe
	}
	e.mu.Unlock()
	return Outcome{At: at, Local: true}
}
