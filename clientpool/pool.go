package clientpool

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratesem/ratesem/internal/wake"
	"github.com/ratesem/ratesem/window"
)

// ErrWeightTooLarge is matched (errors.Is) by the error Acquire returns at
// once for a charge heavier than its rule can ever admit (its N, its
// window's burst, or its concurrency cap). It is window.ErrWeightTooLarge.
var ErrWeightTooLarge = window.ErrWeightTooLarge

// Pool is a registry of limiters keyed by rule and key, created lazily on
// first use from a Table's rules, with several limits per call acquired as
// one.
//
// Acquire admits a call only when every rule it falls under admits it at the
// same instant, and takes nothing from any rule until then: no capacity of
// one rule is burned while the call waits on another, and a cancelled call
// leaves no trace in any rule. Waiters are served in arrival order per
// limiter: once a rule has refused a waiting call, later calls on that rule
// and key wait behind it, so it cannot starve; calls on other keys are not
// held up by it. Calls that take overlapping sets of rules, in any order,
// cannot deadlock, since nothing is held while waiting. A waiter sleeps on
// the pool's one timer, set for the earliest instant any waiter could be
// admitted; nothing polls.
//
// A limiter that has been idle for the idle time (WithIdleTimeout), and
// long enough that its window has forgotten every call, is evicted, so a
// million distinct keys over a day do not grow memory without bound; a key
// in use, waited on or paused is never evicted.
//
// The zero Pool is not usable; call New. A Pool is safe for concurrent use by
// multiple goroutines.
type Pool struct {
	table    Table
	rules    map[string]*ruleState
	routes   map[route]routeEntry
	clock    wake.Clock
	idle     time.Duration
	observer func(Event)

	mu        sync.Mutex
	waiters   list.List // of *waiter, in arrival order
	pass      uint64    // generation of notifyLocked passes, for limiter.blocked
	waitLims  int       // limiters with at least one waiter
	live      int       // limiters in the registry
	lastSweep time.Time
	timer     wake.Timer // set for the earliest instant a waiter could start
}

type ruleState struct {
	*Rule
	limit    window.Limit
	capacity int64 // the heaviest charge the window can admit
	cap      int64 // concurrency cap per key; math.MaxInt64 when none
	keys     map[string]*limiter
}

// limiter is the state of one (rule, key).
type limiter struct {
	rule     *ruleState
	key      string
	policy   window.Policy
	inflight int64
	paused   time.Time // no starts before; zero when none
	refs     int       // waiters and tickets holding it: never evicted while > 0
	waiting  int       // waiters holding it
	last     time.Time // latest admission, release or pause
	blocked  uint64    // == pool.pass: an earlier waiter it refused is still waiting
	// reconciled counts the units Reconcile and Ticket.ObserveHeaders made the
	// window count on the server's word.
	reconciled int64
}

type held struct {
	lim     *limiter
	n       int64
	refused bool // this limiter refused the waiter at its latest try; later calls on it queue behind
	// For rules with Usage: the window's count right after this call was
	// admitted, and the limiter's reconciled units then (see Ticket.ObserveHeaders).
	usedAtAdmit, recAtAdmit int64
}

type waiter struct {
	held     []held
	ready    chan struct{} // closed when granted or failed
	err      error
	since    time.Time
	deadline time.Time
	granted  time.Time
	elem     *list.Element
}

// New returns a Pool over the rules and endpoints of t. It returns an error
// for an endpoint listed twice, for a rule without a name, with a duplicate
// name, with a limit that is not
// N > 0 per Per > 0 or a negative concurrency, and for an endpoint cost that
// names an unknown rule or has a negative weight.
func New(t Table, opts ...Option) (*Pool, error) {
	cfg := config{idle: DefaultIdleTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	p := &Pool{
		table: t, rules: make(map[string]*ruleState), routes: make(map[route]routeEntry),
		clock: wake.NewClock(cfg.clk), idle: cfg.idle, observer: cfg.observer,
	}
	for i := range t.Rules {
		r := &t.Rules[i]
		if err := r.check(); err != nil {
			return nil, err
		}
		if _, dup := p.rules[r.Name]; dup {
			return nil, fmt.Errorf("clientpool: two rules named %q", r.Name)
		}
		rs := &ruleState{Rule: r, keys: make(map[string]*limiter)}
		rs.setLimit(r.Limit)
		p.rules[r.Name] = rs
	}
	checkCosts := func(where string, costs []Cost) error {
		for _, c := range costs {
			if _, ok := p.rules[c.Rule]; !ok {
				return fmt.Errorf("%w %q in %s", ErrUnknownRule, c.Rule, where)
			}
			if c.Units < 0 {
				return fmt.Errorf("clientpool: %s: negative weight %d", where, c.Units)
			}
		}
		return nil
	}
	for _, e := range t.Endpoints {
		if err := checkCosts(e.Method+" "+e.Path, e.Costs); err != nil {
			return nil, err
		}
		if _, dup := p.routes[route{e.Method, e.Path}]; dup {
			return nil, fmt.Errorf("clientpool: endpoint %s %s listed twice", e.Method, e.Path)
		}
		p.routes[route{e.Method, e.Path}] = routeEntry{costs: e.Costs, charges: e.Charges}
	}
	if err := checkCosts("the default costs", t.Default); err != nil {
		return nil, err
	}
	return p, nil
}

func (rs *ruleState) setLimit(l window.Limit) {
	rs.limit = l
	rs.capacity = rs.newPolicy(l).Capacity()
	rs.cap = math.MaxInt64
	if rs.Concurrency > 0 {
		rs.cap = rs.Concurrency
	}
}

func (p *Pool) now() time.Time { return p.clock.Now() }

// Classify returns the charges of a request under the Table's endpoints:
// one per rule of the matching endpoint (or of the Table's Default) whose
// Key applies. It returns an error for a negative weight.
func (p *Pool) Classify(req *http.Request) ([]Charge, error) { return p.classify(req) }

// Ticket is an admitted call: it holds its charges until Release.
type Ticket struct {
	pool     *Pool
	held     []held
	charges  []Charge
	released atomic.Bool
}

// Charges returns the charges the ticket holds, merged per (rule, key).
func (t *Ticket) Charges() []Charge { return t.charges }

// Release ends the call: every charge leaves flight at once (for the
// completion window, the call's end is now). It never blocks. It panics if
// called twice.
func (t *Ticket) Release() {
	if t.released.Swap(true) {
		panic("clientpool: Ticket released twice")
	}
	p := t.pool
	p.mu.Lock()
	now := p.now()
	for _, h := range t.held {
		h.lim.inflight -= h.n
		h.lim.policy.Done(now, h.n)
		h.lim.refs--
		h.lim.last = now
	}
	if p.waiters.Len() > 0 {
		p.notifyLocked(now)
	}
	p.mu.Unlock()
}

// Acquire admits a call that costs every charge at once, blocking until all
// of its rules admit it at the same instant or ctx is done. Charges to the
// same rule and key are added up. On success the caller must Release the
// Ticket when the call ends.
//
// On failure it holds nothing and returns ctx.Err() when ctx is done (a
// context done before the call never acquires); an error matching both
// context.DeadlineExceeded and ErrDeadline as soon as the admission is known
// to come after ctx's deadline; an error matching ErrUnknownRule for a charge
// to a rule the pool does not have; an error matching ErrWeightTooLarge at
// once for a charge heavier than its rule can ever admit; or an error for a
// negative weight. A call with no charges is admitted at once.
func (p *Pool) Acquire(ctx context.Context, charges ...Charge) (*Ticket, error) {
	charges, err := p.merge(charges)
	if err != nil {
		return nil, err
	}
	done := ctx.Done()
	p.mu.Lock()
	select {
	case <-done:
		p.mu.Unlock()
		return nil, ctx.Err()
	default:
	}
	if err := p.tooHeavyLocked(charges); err != nil {
		p.mu.Unlock()
		return nil, err
	}
	now := p.now()
	p.sweepLocked(now)
	hs := make([]held, len(charges))
	for i, c := range charges {
		l := p.limiterLocked(p.rules[c.Rule], c.Key, now)
		l.refs++
		hs[i] = held{lim: l, n: c.Weight}
	}
	t := &Ticket{pool: p, held: hs, charges: charges}
	if p.waiters.Len() == 0 {
		if _, ok := p.tryLocked(hs, now); ok {
			p.mu.Unlock()
			p.emitAdmitted(charges, 0)
			return t, nil
		}
	}
	w := &waiter{held: hs, ready: make(chan struct{}), since: now}
	w.deadline, _ = ctx.Deadline()
	w.elem = p.waiters.PushBack(w)
	for _, h := range hs {
		if h.lim.waiting == 0 {
			p.waitLims++
		}
		h.lim.waiting++
	}
	p.notifyLocked(now)
	p.mu.Unlock()

	select {
	case <-done:
		p.mu.Lock()
		select {
		case <-w.ready:
			if w.err == nil {
				p.undoLocked(w) // admitted while ctx became done
			}
		default:
			p.dropLocked(w)
			p.notifyLocked(p.now())
		}
		p.unrefLocked(hs)
		p.mu.Unlock()
		return nil, ctx.Err()
	case <-w.ready:
		if w.err != nil {
			p.mu.Lock()
			p.unrefLocked(hs)
			p.mu.Unlock()
			return nil, w.err
		}
		p.emitAdmitted(charges, max(w.granted.Sub(w.since), 0))
		return t, nil
	}
}

// merge validates charges and adds up those to the same limiter. The rules
// map is fixed after New, so it needs no lock.
func (p *Pool) merge(charges []Charge) ([]Charge, error) {
	out := make([]Charge, 0, len(charges))
	for _, c := range charges {
		if _, ok := p.rules[c.Rule]; !ok {
			return nil, fmt.Errorf("%w %q", ErrUnknownRule, c.Rule)
		}
		if c.Weight < 0 {
			return nil, fmt.Errorf("clientpool: negative weight %d for %s", c.Weight, c)
		}
		if i := slices.IndexFunc(out, func(o Charge) bool { return o.Rule == c.Rule && o.Key == c.Key }); i >= 0 {
			out[i].Weight += c.Weight
		} else {
			out = append(out, c)
		}
	}
	return out, nil
}

// tooHeavyLocked returns the ErrWeightTooLarge error for the first charge
// heavier than its rule can ever admit, or nil.
func (p *Pool) tooHeavyLocked(charges []Charge) error {
	for _, c := range charges {
		rs := p.rules[c.Rule]
		if fit := min(rs.capacity, rs.cap); c.Weight > fit {
			return fmt.Errorf("%w: %s can never start: rule %q admits at most %d (%v)", ErrWeightTooLarge, c, c.Rule, fit, rs.limit)
		}
	}
	return nil
}

// limiterLocked returns the limiter of (rule, key), creating it.
func (p *Pool) limiterLocked(rs *ruleState, key string, now time.Time) *limiter {
	l, ok := rs.keys[key]
	if !ok {
		l = &limiter{rule: rs, key: key, policy: rs.newPolicy(rs.limit), last: now}
		rs.keys[key] = l
		p.live++
	}
	return l
}

func (p *Pool) unrefLocked(hs []held) {
	for _, h := range hs {
		h.lim.refs--
	}
}

// dropLocked removes a waiter that gave up from the queue.
func (p *Pool) dropLocked(w *waiter) {
	p.waiters.Remove(w.elem)
	for _, h := range w.held {
		if h.lim.waiting--; h.lim.waiting == 0 {
			p.waitLims--
		}
	}
}

// undoLocked takes back the admission of a waiter whose caller gave up: the
// units go back without a completion, as if it had never been admitted.
func (p *Pool) undoLocked(w *waiter) {
	for i := len(w.held) - 1; i >= 0; i-- {
		h := w.held[i]
		h.lim.inflight -= h.n
		h.lim.policy.Cancel(w.granted, h.n)
	}
	p.notifyLocked(p.now())
}

// tryLocked admits hs at now if every limiter admits it, or changes nothing
// and returns the instant to try again: the latest instant a refusing
// limiter names, or zero when a Release must come first. Limiters that
// refuse are marked refused in hs.
func (p *Pool) tryLocked(hs []held, now time.Time) (time.Time, bool) {
	at, _, ok := p.tryWakeLocked(hs, now)
	return at, ok
}

// tryWakeLocked is tryLocked that also returns the earliest instant at which
// one of the refusing limiters may change its answer: the waiter itself
// cannot start before at, but calls queued behind it on a limiter that frees
// sooner may (zero when none of the refusals is timed).
func (p *Pool) tryWakeLocked(hs []held, now time.Time) (time.Time, time.Time, bool) {
	var at, soon time.Time
	needRelease, refused := false, false
	for i := range hs {
		hs[i].refused = false
	}
	refuse := func(h *held, when time.Time) {
		h.refused, refused = true, true
		if when.IsZero() {
			needRelease = true
			return
		}
		if when.After(at) {
			at = when
		}
		if soon.IsZero() || when.Before(soon) {
			soon = when
		}
	}
	for i := range hs {
		h := &hs[i]
		switch l := h.lim; {
		case l.inflight+h.n > l.rule.cap:
			refuse(h, time.Time{})
		case now.Before(l.paused):
			refuse(h, l.paused)
		}
	}
	if refused {
		return p.retry(at, needRelease), soon, false
	}
	admitted := 0
	for i := range hs {
		h := &hs[i]
		when, ok := h.lim.policy.Admit(now, h.n)
		if !ok {
			refuse(h, when)
			continue
		}
		if !refused {
			admitted = i + 1
		} else {
			h.lim.policy.Cancel(now, h.n) // admitted after a refusal: undo at once
		}
	}
	if refused {
		// Undo in reverse order, each the latest admission at now: exact.
		for i := admitted - 1; i >= 0; i-- {
			hs[i].lim.policy.Cancel(now, hs[i].n)
		}
		return p.retry(at, needRelease), soon, false
	}
	for i := range hs {
		h := &hs[i]
		h.lim.inflight += h.n
		h.lim.last = now
		if h.lim.rule.Usage != nil {
			if r, ok := h.lim.policy.(window.Reconciler); ok {
				h.usedAtAdmit, h.recAtAdmit = r.Used(now), h.lim.reconciled
			}
		}
	}
	return time.Time{}, time.Time{}, true
}

func (p *Pool) retry(at time.Time, needRelease bool) time.Time {
	if needRelease {
		return time.Time{}
	}
	return at
}

// notifyLocked admits waiters in arrival order. A waiter is skipped (keeps
// waiting) when one of its limiters refuses an earlier waiter that still
// waits: FIFO per limiter. A limiter that has room for an earlier waiter
// held up by another rule is not blocked by it: that waiter takes nothing
// from it while it waits, and later calls may use the room (the shared
// rule would otherwise sit idle behind one instrument's limit). It then sets the timer for the earliest instant a
// waiter that is not held behind another could be admitted.
func (p *Pool) notifyLocked(now time.Time) {
	p.pass++
	blocked := 0
	var earliest time.Time
	for e := p.waiters.Front(); e != nil && blocked < p.waitLims; {
		next := e.Next()
		w := e.Value.(*waiter)
		behind := false
		for _, h := range w.held {
			if h.lim.blocked == p.pass {
				behind = true
				break
			}
		}
		if !behind {
			at, soon, ok := p.tryWakeLocked(w.held, now)
			if !ok && !soon.IsZero() && (earliest.IsZero() || soon.Before(earliest)) {
				earliest = soon // a limiter it blocks may free for the calls behind it
			}
			switch {
			case ok:
				w.granted = now
				p.dropLocked(w)
				close(w.ready)
				e = next
				continue
			case !at.IsZero() && !w.deadline.IsZero() && at.After(w.deadline):
				// Its admission comes after its deadline: fail now rather
				// than when the deadline fires (golang/go#54541).
				p.dropLocked(w)
				w.err = &wake.DeadlineError{Sentinel: ErrDeadline, Wait: at.Sub(now)}
				close(w.ready)
				e = next
				continue
			}
		}
		for _, h := range w.held {
			if h.refused && h.lim.blocked != p.pass {
				h.lim.blocked = p.pass
				blocked++
			}
		}
		e = next
	}
	if earliest.IsZero() {
		p.timer.Stop() // only a Release, a cancellation or SetLimit can help
		return
	}
	p.timer.Arm(p.clock, now, earliest, p.onTimer)
}

func (p *Pool) onTimer() {
	p.mu.Lock()
	p.timer.Fired()
	if p.waiters.Len() > 0 {
		p.notifyLocked(p.now())
	}
	p.mu.Unlock()
}

// Pause holds every new start on the limiter of (rule, key) until the
// instant until: calls that need it wait, calls in flight go on, other keys
// and rules are not affected. Overlapping pauses do not add up; the later
// end wins. It never blocks. It returns an error matching ErrUnknownRule
// for an unknown rule.
func (p *Pool) Pause(rule, key string, until time.Time) error {
	rs, ok := p.rules[rule]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownRule, rule)
	}
	p.mu.Lock()
	now := p.now()
	if !until.After(now) {
		p.mu.Unlock()
		return nil
	}
	l := p.limiterLocked(rs, key, now)
	if until.After(l.paused) {
		l.paused = until
	}
	l.last = now
	if p.waiters.Len() > 0 {
		p.notifyLocked(now)
	}
	p.mu.Unlock()
	p.emit(Event{Kind: Paused, Rule: rule, Key: key, Until: until})
	return nil
}

// Throttled reports that the server rejected a call for its rate (HTTP 429,
// or 418 for Binance's IP ban) and pauses the limiters of charges whose rule
// is marked PauseOnThrottle, or all of them when none is marked: for
// retryAfter (the response's Retry-After, already capped by the caller) from
// now on the pool's clock, or, when retryAfter is 0 or less, for each rule's
// own window (its Limit.Per). It never blocks.
func (p *Pool) Throttled(charges []Charge, status int, retryAfter time.Duration) {
	p.throttle(charges, p.marked(charges), status, retryAfter)
}

// ThrottledResponse is Throttled for a throttled HTTP response, described by
// th: the Table's ThrottleTargets, when set, picks the charges the response
// is about. It never blocks and reads no body.
func (p *Pool) ThrottledResponse(th Throttle, charges []Charge) {
	var targets []Charge
	if p.table.ThrottleTargets != nil {
		targets = p.table.ThrottleTargets(th, charges)
	}
	if targets == nil {
		targets = p.marked(charges)
	}
	p.throttle(charges, targets, th.Status, th.RetryAfter)
}

// marked returns the charges whose rule is marked PauseOnThrottle, or all of
// them when none is.
func (p *Pool) marked(charges []Charge) []Charge {
	targets := slices.DeleteFunc(slices.Clone(charges), func(c Charge) bool {
		rs := p.rules[c.Rule]
		return rs == nil || !rs.PauseOnThrottle
	})
	if len(targets) == 0 {
		return charges
	}
	return targets
}

func (p *Pool) throttle(charges, targets []Charge, status int, retryAfter time.Duration) {
	for _, c := range charges {
		p.emit(Event{Kind: Throttled, Rule: c.Rule, Key: c.Key, Weight: c.Weight, Status: status})
	}
	p.mu.Lock()
	now := p.now()
	until := make([]time.Time, len(targets))
	for i, c := range targets {
		d := retryAfter
		if rs := p.rules[c.Rule]; d <= 0 && rs != nil {
			d = rs.limit.Per
		}
		until[i] = now.Add(d)
	}
	p.mu.Unlock()
	for i, c := range targets {
		_ = p.Pause(c.Rule, c.Key, until[i])
	}
}

// Reconcile takes in the server's own count for (rule, key): used units in
// its current window. When the server counts more than the local window
// does (another process spends from the same limit), the local window counts
// the difference as spent now, so the local budget shrinks for the rest of
// that window; a server count at or below the local one changes nothing, so
// feedback never loosens the local accounting. Windows that do not
// implement window.Reconciler ignore it. It never blocks; it returns an
// error matching ErrUnknownRule for an unknown rule.
func (p *Pool) Reconcile(rule, key string, used int64) error {
	rs, ok := p.rules[rule]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownRule, rule)
	}
	p.mu.Lock()
	now := p.now()
	l := p.limiterLocked(rs, key, now)
	r, ok := l.policy.(window.Reconciler)
	var extra int64
	if ok {
		if local := r.Used(now); used > local {
			extra = used - local
			r.Consume(now, extra)
			l.reconciled += extra
			l.last = now
		}
	}
	p.mu.Unlock()
	if extra > 0 {
		p.emit(Event{Kind: Reconciled, Rule: rule, Key: key, Weight: extra})
	}
	return nil
}

// ObserveHeaders reads, for each charge of the ticket whose rule has a Usage
// function, the server's count from the headers of the call's response, and
// makes the local window count what it did not know of: the server counted
// used units when this call arrived, the local window counted usedAtAdmit
// when it admitted it (this call and the ones admitted before it, which
// reach the server before it), so used − usedAtAdmit units come from
// elsewhere (another process on the same IP or account). Units already taken
// in from later responses are not counted twice. Feedback never loosens the
// local accounting. (Comparing with the window's count now instead, as
// Reconcile does, would take the units of calls still on their way for
// room; use Reconcile when no Ticket is at hand.)
func (t *Ticket) ObserveHeaders(h http.Header) {
	p := t.pool
	for _, hd := range t.held {
		rs := hd.lim.rule
		if rs.Usage == nil {
			continue
		}
		used, ok := rs.Usage(h)
		if !ok {
			continue
		}
		p.mu.Lock()
		r, ok := hd.lim.policy.(window.Reconciler)
		var extra int64
		if ok {
			known := hd.lim.reconciled - hd.recAtAdmit // taken in since this call was admitted
			if extra = used - hd.usedAtAdmit - known; extra > 0 {
				now := p.now()
				r.Consume(now, extra)
				hd.lim.reconciled += extra
				hd.lim.last = now
			}
		}
		p.mu.Unlock()
		if extra > 0 {
			p.emit(Event{Kind: Reconciled, Rule: rs.Name, Key: hd.lim.key, Weight: extra})
		}
	}
}

// SetLimit changes a rule's limit at run time, for every key, keeping the
// accounting: what each key's window counted still counts against the new
// limit. Waiters heavier than the new limit fail with ErrWeightTooLarge.
// It returns an error for an unknown rule or a limit that is not N > 0 per
// Per > 0.
func (p *Pool) SetLimit(rule string, l window.Limit) error {
	rs, ok := p.rules[rule]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownRule, rule)
	}
	if l.N <= 0 || l.Per <= 0 {
		return fmt.Errorf("clientpool: SetLimit(%q, %v): want N > 0 per Per > 0", rule, l)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	rs.setLimit(l)
	for _, lim := range rs.keys {
		lim.policy.SetLimit(now, l)
	}
	fit := min(rs.capacity, rs.cap)
	for e := p.waiters.Front(); e != nil; {
		next := e.Next()
		w := e.Value.(*waiter)
		for _, h := range w.held {
			if h.lim.rule == rs && h.n > fit {
				p.dropLocked(w)
				w.err = fmt.Errorf("%w: weight %d under rule %q, now %v", ErrWeightTooLarge, h.n, rule, l)
				close(w.ready)
				break
			}
		}
		e = next
	}
	p.notifyLocked(now)
	return nil
}

// Limit returns a rule's current limit, and false for an unknown rule.
func (p *Pool) Limit(rule string) (window.Limit, bool) {
	rs, ok := p.rules[rule]
	if !ok {
		return window.Limit{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return rs.limit, true
}

// KeyState is a snapshot of one limiter.
type KeyState struct {
	Rule, Key string
	// InFlight is the units of admitted calls not yet released.
	InFlight int64
	// Used is the units the window counts at the snapshot's instant, for
	// windows that implement window.Reconciler; -1 for the others.
	Used int64
	// PausedUntil is when the key's pause ends; zero when none was set.
	PausedUntil time.Time
}

// Snapshot returns the state of every live limiter, sorted by rule and key.
func (p *Pool) Snapshot() []KeyState {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	var out []KeyState
	for _, rs := range p.rules {
		for _, l := range rs.keys {
			ks := KeyState{Rule: rs.Name, Key: l.key, InFlight: l.inflight, Used: -1, PausedUntil: l.paused}
			if r, ok := l.policy.(window.Reconciler); ok {
				ks.Used = r.Used(now)
			}
			out = append(out, ks)
		}
	}
	slices.SortFunc(out, func(a, b KeyState) int {
		if a.Rule != b.Rule {
			if a.Rule < b.Rule {
				return -1
			}
			return 1
		}
		if a.Key < b.Key {
			return -1
		} else if a.Key > b.Key {
			return 1
		}
		return 0
	})
	return out
}

// Len returns the number of live limiters (rule, key pairs).
func (p *Pool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.live
}

// sweepLocked evicts idle limiters, at most once every half idle time.
func (p *Pool) sweepLocked(now time.Time) {
	if p.idle <= 0 || now.Sub(p.lastSweep) < p.idle/2 {
		return
	}
	p.lastSweep = now
	for _, rs := range p.rules {
		wait := max(p.idle, quiet(rs.limit, rs.capacity))
		for key, l := range rs.keys {
			if l.refs == 0 && l.inflight == 0 && !now.Before(l.paused) && now.Sub(l.last) >= wait {
				delete(rs.keys, key)
				p.live--
			}
		}
	}
}

// ErrDeadline is matched (errors.Is) by the error Acquire returns when it
// fails early because the admission would come after ctx's deadline. That
// error also matches context.DeadlineExceeded.
var ErrDeadline = errors.New("clientpool: admission would come after the context deadline")
