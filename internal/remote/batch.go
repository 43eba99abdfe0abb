package remote

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/ratesem/ratesem/internal/rspec"
)

// piper is a Store that ends calls (of any scope) and then decides several
// admissions of one scope in one round trip (internal/rstore's
// Store.Pipe: one script call for the scope's ends and admissions, at one
// instant, in strict FIFO per limiter: an admission behind one refused on
// a limiter it names is refused too, with that one's wait). Over a piper,
// Decide's admissions of one scope share round trips (group commit), and
// the releases ride along (see join, releaser).
type piper interface {
	Pipe(ctx context.Context, ends []rspec.End, scope string, calls [][]rspec.Charge, by []time.Time) ([]error, []rspec.Decision, []error, error)
}

const (
	// batchMax is the most admissions one round trip carries.
	batchMax = 64
	// endsMax is the most releases and settlements one round trip carries.
	endsMax = 64
)

// reqState is where a queued admission stands (under Engine.mu).
type reqState uint8

const (
	reqQueued reqState = iota // in its scope's queue, not sent
	reqSent                   // in a round trip under way
	reqDone                   // its message is (or is being) sent, or its caller left
)

// req is one Decide waiting for a round trip of its scope.
type req struct {
	w     *waiter
	ctx   context.Context
	state reqState
	ch    chan reqMsg // one message, sent by whoever moved state to reqDone
}

// reqMsgKind says what a req's message is.
type reqMsgKind uint8

const (
	msgAnswer reqMsgKind = iota // Redis's answer: d, err
	msgAgain                    // decide again (Close, Redis taken as unreachable, the gate, ctx done)
	msgKnown                    // answered by what this process knows: o
	msgFailed                   // the round trip failed (Redis marked unreachable once): err is the cause
)

type reqMsg struct {
	kind reqMsgKind
	o    Outcome
	d    rspec.Decision
	err  error
}

// scopeQ is a scope's queue of admissions: busy while a round trip of the
// scope is under way (or being built).
type scopeQ struct {
	busy bool
	q    []*req
}

// trip is one round trip: a scope's admissions (in arrival order), their
// answer-by instants, and the releases that ride along.
type trip struct {
	scope  string
	q      *scopeQ
	reqs   []*req
	by     []time.Time
	ends   []*Call
	handed bool   // the scope's queue was handed on (under Engine.mu)
	epoch  uint64 // Engine.forgets when it was built, before it was sent (staleLocked)
}

// join sends w's admission in a round trip of its scope shared with the
// other callers' (group commit): a caller that finds no round trip of the
// scope under way starts one, which carries every admission queued so far
// (up to batchMax, in arrival order) and the queued releases; callers that
// arrive meanwhile queue, and go out together in the next round trip,
// started as soon as this one returns or its Timeout passes (so nobody
// waits behind more than one round trip plus its own). The round trip runs
// on a goroutine of its own (one per busy spell of the scope, not one per
// admission), and each caller waits on its own answer, at most until ctx
// is done or Close is called (the round trip's Timeout answers every
// caller it carries): a caller that leaves before its round trip is sent
// is dropped from the queue; one that leaves while it is under way gets
// its admission cancelled when the answer comes, as a caller of ask.
func (e *Engine) join(ctx context.Context, w *waiter) (Outcome, error) {
	r := &req{w: w, ctx: ctx, ch: make(chan reqMsg, 1)}
	e.mu.Lock()
	if e.bq == nil {
		e.bq = map[string]*scopeQ{}
	}
	q := e.bq[w.scope]
	if q == nil {
		q = &scopeQ{}
		e.bq[w.scope] = q
	}
	q.q = append(q.q, r)
	var t *trip
	if !q.busy {
		q.busy = true
		t = e.nextTripLocked(w.scope, q)
	}
	e.mu.Unlock()
	if t != nil {
		e.start(t)
	}
	var m reqMsg
	select {
	case m = <-r.ch:
	case <-ctx.Done():
		if e.leaveReq(r) {
			return Outcome{}, ctx.Err()
		}
		m = <-r.ch
	case <-e.closeCtx.Done():
		if e.leaveReq(r) {
			return Outcome{}, ErrClosed
		}
		m = <-r.ch
	}
	switch m.kind {
	case msgAgain:
		return e.decide(ctx, w)
	case msgKnown:
		return m.o, nil
	case msgFailed:
		return e.local(w, m.err)
	}
	return e.decided(ctx, w, m.d, m.err, nil)
}

// leaveReq takes r out of its queue, or out of its round trip (whose
// answer then cancels its admission), and reports true; false when its
// message is in (or on its way).
func (e *Engine) leaveReq(r *req) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch r.state {
	case reqQueued:
		if q := e.bq[r.w.scope]; q != nil {
			q.q = slices.DeleteFunc(q.q, func(x *req) bool { return x == r })
		}
	case reqSent:
		e.stats.RedisAdmits++ // sent: its answer cancels the admission
	default:
		return false
	}
	r.state = reqDone
	return true
}

// nextTripLocked builds the next round trip of scope's queue q from its
// head: up to batchMax admissions (answering at once those this process
// can: a pause, a known refusal; and sending back to decide those that
// must not go to Redis now: Close, Redis taken as unreachable, the gate),
// and the queued releases (up to endsMax). It returns nil, and q is no
// longer busy, when the queue has nothing to send. e.mu must be held.
func (e *Engine) nextTripLocked(scope string, q *scopeQ) *trip {
	now := time.Now()
	t := &trip{scope: scope, q: q, epoch: e.forgets}
	i := 0
	for ; i < len(q.q) && len(t.reqs) < batchMax; i++ {
		r := q.q[i]
		if e.closed || e.down || r.ctx.Err() != nil || (r.w.local == nil && e.gatedLocked(now)) {
			r.state = reqDone
			r.ch <- reqMsg{kind: msgAgain}
			continue
		}
		if until, ri := e.knownLocked(r.w, now); !until.IsZero() {
			r.state = reqDone
			r.ch <- reqMsg{kind: msgKnown, o: Outcome{At: until, Refused: ri}}
			continue
		}
		r.state = reqSent
		r.w.epoch, r.w.trip = t.epoch, t
		by := now.Add(e.cfg.Timeout)
		if dl, ok := r.ctx.Deadline(); ok && dl.Before(by) {
			by = dl
		}
		t.reqs, t.by = append(t.reqs, r), append(t.by, by)
	}
	q.q = q.q[i:]
	if len(t.reqs) == 0 {
		q.busy = false
		if len(q.q) == 0 && e.bq[scope] == q {
			delete(e.bq, scope)
		}
		return nil
	}
	e.flying++
	// The releases ride along: those a worker holds for the next round
	// trip, then those queued (the workers send those left).
	t.ends, e.riders = e.riders, nil
	for len(t.ends) < endsMax {
		select {
		case c, ok := <-e.rel:
			if !ok {
				return t
			}
			t.ends = append(t.ends, c)
			continue
		default:
		}
		break
	}
	return t
}

// start runs t on a goroutine of its own, counted in pending; when
// maxPending round trips are running, t fails at once (errBusy).
func (e *Engine) start(t *trip) {
	e.mu.Lock()
	ok := e.spawnLocked(func() {
		for t != nil {
			t = e.send1(t)
		}
	})
	e.mu.Unlock()
	if !ok {
		e.fail(t, errBusy)
	}
}

// fail ends t, which was not sent, with cause: Redis is marked
// unreachable once, its callers go to the fallback, its releases count as
// failed; the scope's queue is handed on.
func (e *Engine) fail(t *trip, cause error) {
	e.endsDone(t.ends, nil, cause, nil)
	e.mu.Lock()
	out := e.takeSentLocked(t)
	e.mu.Unlock()
	e.markDown(cause, true)
	for _, r := range out {
		r.ch <- reqMsg{kind: msgFailed, err: cause}
	}
	if nt := e.handOn(t); nt != nil {
		e.start(nt)
	}
}

// takeSentLocked marks done the requests of t still waiting for its
// answer, and returns them (each then gets one message). e.mu must be
// held.
func (e *Engine) takeSentLocked(t *trip) []*req {
	var out []*req
	for _, r := range t.reqs {
		if r.state == reqSent {
			r.state = reqDone
			out = append(out, r)
		}
	}
	e.stats.RedisAdmits += uint64(len(out))
	return out
}

// handOn hands t's scope queue on, once (at t's answer or its Timeout,
// whichever comes first): it returns the next round trip to send, nil
// when there is none.
func (e *Engine) handOn(t *trip) *trip {
	e.mu.Lock()
	defer e.mu.Unlock()
	if t.handed {
		return nil
	}
	t.handed = true
	e.flying--
	nt := e.nextTripLocked(t.scope, t.q)
	if e.landed != nil { // the workers holding releases for a round trip
		close(e.landed)
		e.landed = nil
	}
	return nt
}

// ride holds cs, releases a worker took from the queue, for the next
// admission round trip of this process when one is under way (the next
// to leave takes them: see nextTripLocked), and returns those still there
// once a round trip is back (or at once when none is under way, or after
// Close): the worker sends them. A release so waits at most for one round
// trip under way (bounded by Timeout) before it is sent.
func (e *Engine) ride(cs []*Call) []*Call {
	e.mu.Lock()
	if e.flying == 0 || e.closed {
		e.mu.Unlock()
		return cs
	}
	e.riders = append(e.riders, cs...)
	if e.landed == nil {
		e.landed = make(chan struct{})
	}
	landed := e.landed
	e.mu.Unlock()
	select {
	case <-landed:
	case <-e.closeCtx.Done():
	}
	e.mu.Lock()
	cs, e.riders = e.riders, nil
	e.mu.Unlock()
	return cs
}

// send1 sends t, one round trip bounded by Timeout (then its callers are
// answered as Redis not answering, and the queue goes on; the round trip
// itself may take lateGrace more, its admissions then cancelled), ends
// its releases, answers its callers, cancels the admissions of those who
// left, and returns the next round trip of the scope when it is the one
// to hand the queue on.
func (e *Engine) send1(t *trip) *trip {
	p := e.st.(piper)
	timer := time.AfterFunc(e.cfg.Timeout, func() { e.expire(t) })
	ends := make([]rspec.End, len(t.ends))
	for i, c := range t.ends {
		ends[i] = rspec.End{Scope: c.scope, Charges: c.cs, Token: c.token, Actual: c.actual}
	}
	calls := make([][]rspec.Charge, len(t.reqs))
	for i, r := range t.reqs {
		calls[i] = r.w.cs
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.Timeout+lateGrace)
	eerrs, ds, errs, err := p.Pipe(ctx, ends, t.scope, calls, t.by)
	cancel()
	timer.Stop()
	// The releases first: what they freed is forgotten before the
	// refusals of the admissions are learned.
	e.endsDone(t.ends, eerrs, err, t)
	if err == nil && len(t.ends) > 0 {
		// As a release's answer (the admissions' answers mark it up as
		// their callers take them: a late one, refused in Redis, does
		// not).
		e.markUp()
	}
	e.mu.Lock()
	if err == nil {
		// The refusals are learned before the queue is handed on: the
		// callers queued behind them are answered without a round trip
		// (their own callers learn them again, to the same effect).
		now := time.Now()
		for i, r := range t.reqs {
			if errs[i] == nil {
				e.learnLocked(r.w, ds[i], now)
			}
		}
	}
	var (
		out  []*req
		gone []int
	)
	for i, r := range t.reqs {
		if r.state == reqSent {
			r.state = reqDone
			out = append(out, r)
			if err == nil {
				r.ch <- reqMsg{kind: msgAnswer, d: ds[i], err: errs[i]}
			}
		} else if err == nil && errs[i] == nil && ds[i].OK {
			gone = append(gone, i)
		}
	}
	if err != nil {
		e.stats.RedisAdmits += uint64(len(out))
	}
	e.mu.Unlock()
	if err != nil && len(out) > 0 {
		e.markDown(err, true)
		for _, r := range out {
			r.ch <- reqMsg{kind: msgFailed, err: err}
		}
	}
	// The callers who left: nobody will use these admissions.
	for _, i := range gone {
		e.cancel(t.scope, calls[i], ds[i].Token, true)
	}
	return e.handOn(t)
}

// expire answers t's callers still waiting when its Timeout passed: Redis
// did not answer (marked unreachable once); the scope's queue goes on.
func (e *Engine) expire(t *trip) {
	e.mu.Lock()
	out := e.takeSentLocked(t)
	e.mu.Unlock()
	if len(out) > 0 {
		e.markDown(context.DeadlineExceeded, true)
		for _, r := range out {
			r.ch <- reqMsg{kind: msgFailed, err: context.DeadlineExceeded}
		}
	}
	if nt := e.handOn(t); nt != nil {
		e.start(nt)
	}
}

// endsDone records the outcome of the releases cs sent in one round trip:
// errs[i] is cs[i]'s (nil when the round trip failed with err, or cs were
// dropped: err is then errDropped). It calls each one's sent callback and,
// when its units left Redis, Config.OnRoom. t is the round trip of
// admissions they rode with (their forgets leave its refusals learnable:
// forgetByLocked), nil when none.
func (e *Engine) endsDone(cs []*Call, errs []error, err error, t *trip) {
	if len(cs) == 0 {
		return
	}
	e.mu.Lock()
	oks := make([]bool, len(cs))
	for i, c := range cs {
		ce := err
		if ce == nil && errs != nil {
			ce = errs[i]
		}
		lost := errors.Is(ce, rspec.ErrNotInFlight)
		switch {
		case err == errDropped:
			e.stats.ReleasesDropped++
		case lost:
			e.stats.ReleasesLost++
		case ce != nil:
			e.stats.ReleasesFailed++
		default:
			// A refusal remembered while this call was in flight may
			// have named a later instant than the room its end (a
			// refund, a settlement to less) makes: ask Redis again.
			for _, ch := range c.cs {
				e.forgetByLocked(c.scope, ch, t)
			}
		}
		oks[i] = err == nil && (ce == nil || lost)
	}
	e.mu.Unlock()
	for i, c := range cs {
		if c.sent != nil {
			c.sent()
		}
		if e.cfg.OnRoom != nil && oks[i] {
			e.cfg.OnRoom(c.scope, c.cs)
		}
	}
}

// errDropped marks releases never sent: Close gave up on the queue.
var errDropped = errors.New("release dropped")

// sendEnds sends cs, releases taken from the queue, in one round trip
// over a piper (one per release otherwise), bounded by Timeout +
// lateGrace and cut short when Close gives up on the queue.
func (e *Engine) sendEnds(cs []*Call) {
	if e.flushCtx.Err() != nil { // Close gave up on the queue
		e.endsDone(cs, nil, errDropped, nil)
		return
	}
	// Nobody waits for it: a release late by up to lateGrace still frees
	// the units sooner than the lease (Close cuts it short).
	ctx, cancel := context.WithTimeout(e.flushCtx, e.cfg.Timeout+lateGrace)
	defer cancel()
	p, ok := e.st.(piper)
	if !ok {
		for _, c := range cs {
			var err error
			if c.actual != nil {
				err = e.st.Settle(ctx, c.scope, c.cs, c.token, c.actual)
			} else {
				err = e.st.Release(ctx, c.scope, c.cs, c.token)
			}
			e.roundTrip(err)
			e.endsDone([]*Call{c}, []error{err}, nil, nil)
		}
		return
	}
	ends := make([]rspec.End, len(cs))
	for i, c := range cs {
		ends[i] = rspec.End{Scope: c.scope, Charges: c.cs, Token: c.token, Actual: c.actual}
	}
	errs, _, _, err := p.Pipe(ctx, ends, "", nil, nil)
	bad := err
	for _, ce := range errs {
		if ce != nil && !errors.Is(ce, rspec.ErrNotInFlight) && !callerError(ce) {
			bad = cmp.Or(bad, ce)
		}
	}
	e.roundTrip(bad)
	e.endsDone(cs, errs, err, nil)
}
