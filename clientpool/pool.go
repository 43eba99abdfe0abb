package clientpool

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/engine"
	"github.com/ratesem/ratesem/window"
)

// Pool is a registry of limiters keyed by rule and key, created lazily on
// first use from a Table's rules, with several limits per call acquired as
// one.
//
// Admission. Acquire admits a call only when every rule it falls under
// admits it at the same instant, and takes nothing from any rule until
// then: no capacity of one rule is burned while the call waits on another,
// and a cancelled call leaves no trace in any rule. Waiters are served in
// order per limiter, by priority class (ratesem.WithPriority) and within a
// class by arrival: once a limiter has refused a waiting call, later calls
// of its class or a lower one on that rule and key queue behind it, and
// at most 16 (see ratesem.Priority) later calls of each higher class pass it,
// so it cannot starve; the order is one total order fixed at arrival, the
// same on every limiter;
// calls on other keys are not held up by it, and a limiter with room is
// not held up by a call waiting on another rule. Calls that take
// overlapping sets of rules, in any order, cannot deadlock, since nothing
// is held while waiting and the oldest waiter is never queued behind a
// younger one.
//
// Cost. Each limiter keeps its own queue of the waiters it refused, and
// the pool keeps a min-heap of the instants at which a queue's head could
// be admitted, with one timer set for the earliest. Acquire, Release and a
// timer firing touch only the limiters of the call concerned and the top
// of the heap: a call on one key costs the same whether 0 or 100 000 calls
// wait on other keys (BenchmarkAcquireReleaseOtherKeysWaiting). Nothing
// polls.
//
// Throttles and pauses. Pause holds a key until an instant. Throttled
// pauses the keys a server's rejection is about: for the
// server's Retry-After, spread by a random amount so that clients do not
// all resume at one instant; without a usable Retry-After, with capped
// exponential backoff and jitter per key (a first throttle pauses about
// 200 ms, each further throttle in a row doubles it, a call on the key
// that ends without a throttle since its admission resets it). No pause a
// throttle causes exceeds the cap (WithMaxPause, default 5 minutes), and a
// throttle without Retry-After that names rules of several windows (Binance
// −1015 names its 10-second and its daily order counts) pauses only the
// shortest window that can explain it.
//
// Memory. A limiter that has had no waiter, call or pause for the idle
// time (WithIdleTimeout) and whose window has forgotten every call is
// evicted, a bounded number per Acquire (never a sweep of every key), so
// a million distinct keys over a day do not grow memory without bound; a
// key in use, waited on, paused or whose window still counts calls is
// never evicted. WithMaxKeys caps the live limiters: when a call needs a
// new one and the pool is full, the oldest idle limiters whose windows
// have forgotten every call are evicted (idle time or not); if none can
// be, Acquire fails at once with an error matching ratesem.ErrTooManyKeys. Keys
// are never merged and no key that still counts calls is forgotten.
//
// Arithmetic. Weights are checked: a negative weight is an error matching
// ratesem.ErrNegativeWeight, and charges merged per (rule, key) saturate
// instead of wrapping, so an absurd sum fails with ratesem.ErrWeightTooLarge. A
// server's usage report can only tighten a key's window, by at most the
// rule's limit at a time ("full until the window moves"), whatever number
// it sends.
//
// The zero Pool is not usable; call New. A Pool is safe for concurrent use by
// multiple goroutines.
type Pool struct {
	e      *engine.Engine
	table  Table
	rules  map[string]*Rule
	routes *http.ServeMux // newRouter
}

// New returns a Pool over the rules and endpoints of t, set up by opts. It
// returns an error for an endpoint listed twice, for an endpoint whose Path
// is not a net/http.ServeMux path pattern, for two endpoints that match a
// request in common with neither more specific (see Endpoint.Path), for a
// rule without a name
// or with a duplicate name, for a limit that is not N > 0 per Per > 0 (N
// may be 0 for a rule with Learn or Adapt), a
// negative MaxUnitsInFlight or TimeUnit, a TimeUnit on a window that
// cannot settle, or an Adapt whose Floor is not in [1, 2^40], whose
// Ceiling is neither 0 nor in [Floor, 2^40], or whose Per is under 1 µs
// (matching ratesem.ErrInvalidLimit), for an
// endpoint cost that names an unknown rule, and for a negative cost
// (matching ratesem.ErrNegativeWeight); with redisrate.Shared, also for a
// rule whose window has no Redis form and for a bad prefix or scope (see
// redisrate.Shared, and for an adaptive rule there until the fleet shares
// the law). It does not block and makes no round trip to Redis.
func New(t Table, opts ...Option) (*Pool, error) {
	p := &Pool{table: t, rules: make(map[string]*Rule, len(t.Rules))}
	rules := make([]engine.Rule, len(t.Rules))
	for i := range t.Rules {
		r := &t.Rules[i]
		p.rules[r.Name] = r
		rules[i] = engine.Rule{Name: r.Name, Limit: r.Limit, Window: r.Window, MaxUnitsInFlight: r.MaxUnitsInFlight,
			Usage: r.Usage, Settle: r.Settle, PauseOnThrottle: r.PauseOnThrottle, TimeUnit: r.TimeUnit}
		if r.Adapt != nil {
			a := engine.Adaptive(*r.Adapt) // a copy: the caller's struct may change
			rules[i].Adapt = &a
		}
		if learn := r.Learn; learn != nil {
			rules[i].Learn = func(h http.Header, now time.Time) (engine.Learned, bool) {
				in, ok := learn(h, now)
				return engine.Learned(in), ok
			}
		}
	}
	e, err := engine.New(rules, t.Scope, opts...)
	if err != nil {
		return nil, err
	}
	p.e = e
	// Every cost of the endpoints, then of Default, names a rule, with
	// Units ≥ 0.
	for i := 0; i <= len(t.Endpoints); i++ {
		where, costs := "the default costs", t.Default
		if i < len(t.Endpoints) {
			where, costs = t.Endpoints[i].Method+" "+t.Endpoints[i].Path, t.Endpoints[i].Costs
		}
		for _, c := range costs {
			if !e.HasRule(c.Rule) {
				return nil, fmt.Errorf("%w %q in %s", ratesem.ErrUnknownRule, c.Rule, where)
			}
			if c.Units < 0 {
				return nil, fmt.Errorf("%w %d in %s", ratesem.ErrNegativeWeight, c.Units, where)
			}
		}
	}
	if p.routes, err = newRouter(t.Endpoints); err != nil {
		return nil, err
	}
	return p, nil
}

// Ticket is an admitted call: it holds its charges until Release. Tickets
// come from Pool.Acquire only (the zero Ticket is not one). Its methods are
// safe for concurrent use.
type Ticket struct{ t engine.Ticket }

// Charges returns the charges the ticket holds, merged per (rule, key).
func (t *Ticket) Charges() []Charge { return t.t.Charges() }

// Release ends the call: every charge leaves flight at once (for the
// completion window, the call's end is now), and a key that saw no
// throttle since the call was admitted ends its backoff streak. A charge
// under a rule with TimeUnit that no Settle named ends settled to the
// call's duration since its admission (Rule.TimeUnit). It never
// blocks (in Redis mode the release reaches Redis in the background). It
// panics if called twice.
func (t *Ticket) Release() { t.t.Release() }

// Settle sets the true weight, in units, of the ticket's charges under rule
// (each of them: a call charges one key per rule in the presets): when the
// ticket is released they end with units instead of the weight they were
// charged (window.Settler: a refund where the window still counts the call,
// a debit from then on). The last Settle before Release wins. It returns an
// error matching ratesem.ErrNegativeWeight for a negative units, one matching
// ratesem.ErrUnknownRule when the ticket holds no charge under rule, and an
// error after Release. In Redis mode the settled weight reaches Redis with
// the release (redisrate.Shared). It never blocks and is safe for concurrent
// use.
func (t *Ticket) Settle(rule string, units int64) error { return t.t.Settle(rule, units) }

// WantsBody reports whether a rule of the ticket's charges reads the call's
// true weight from its response (Rule.Settle): a transport should then keep
// the response body's last 1 MiB for SettleResponse. It never
// blocks.
func (t *Ticket) WantsBody() bool { return t.t.WantsBody() }

// SettleResponse settles each of the ticket's charges whose rule has a
// Settle function with the weight that function reads from the call's
// response headers and body (nil when there was none); a function that
// returns false, or a negative weight, leaves the charge as it was. Package
// httpclient calls it before Release. It never blocks and is safe for
// concurrent use.
func (t *Ticket) SettleResponse(h http.Header, body []byte) { t.t.SettleResponse(h, body) }

// ObserveHeaders reads, for each charge of the ticket whose rule has a Usage
// function, the server's count from the headers of the call's response, and
// makes the local window count what it did not know of (units spent by
// another process on the same IP or account). For each charge whose rule has
// a Learn function it takes in the limit, what remains and the window's end
// (Learned), reading an epoch reset against the response's Date header (see
// ResetMargin); a report whose window contradicts the key's is counted and
// reported as a ratesem.Distrusted event, and taken in on the safe side only.
//
// For a fixed completion window (the Binance preset's) each report bounds
// the units the server counted from elsewhere: its count includes this
// call, this pool's calls that had ended by this call's admission, and
// every call of this pool whose report was taken in before at a count no
// higher (the server's count only grows within a window). Spending from
// elsewhere only grows within a window too, so the bound read at the
// highest count seen holds for every earlier count: the window counts its
// own calls plus that bound, and a later report that tightens it gives back
// what an earlier, looser one took (waiting calls are then tried again at
// once). Calls still on their way are never taken for room. The bound: the
// window counts more than the server's units from elsewhere by at most the
// units of this pool's calls that the server counted before the highest
// count but whose own reports were not taken in yet (and had not ended
// when the reporting call was admitted); it shrinks as their reports come
// in. A response to a call admitted in an earlier window is ignored: its
// count may be that window's. A second report of one call is read as
// Reconcile reads a count. For the other windows the count is compared
// with the window's count when the call was admitted (this call and the
// ones admitted before it), less what was taken in since.
//
// Feedback never makes the local accounting count less than the server's
// reports show, and the arithmetic saturates: a count of up to
// math.MaxInt64 makes the window take in at most the rule's limit ("full
// until the window moves"); a negative count is ignored. (Comparing with
// the window's count now instead, as Reconcile does, would take the units
// of calls still on their way for room; use Reconcile when no Ticket is at
// hand.) It never blocks, but in Redis mode (redisrate.Shared) a limit
// new to a key (Rule.Learn) is stored in Redis for the fleet, with the
// budget the reply gives, before it returns: at most two round trips, each
// bounded by the Redis timeout, while the call still counts there (under
// an adaptive rule, Rule.Adapt, three, and one more for each other key of
// the rule the process holds when a reply first names the server's
// window); other reports go to Redis in the background. It is safe for concurrent use.
func (t *Ticket) ObserveHeaders(h http.Header) { t.t.ObserveHeaders(h) }

// BodyUnread tells the ticket that its call's reply was closed before its
// body was read to the end (io.EOF), so the rules that settle from the
// body (Rule.Settle) may not have seen the weight it reports. It returns
// the number of the ticket's charges under such a rule that no Settle has
// settled: they keep the weight they were admitted for (their estimate)
// when the ticket is released. Each is reported to the pool's observer as
// a ratesem.Unsettled event (Rule, Key, Weight), once: a later call returns
// the same count and emits no event again. Package httpclient calls
// it, after SettleResponse and before Release, for a body closed unread.
// It never blocks and is safe for concurrent use; after Release it reports
// nothing and returns 0.
func (t *Ticket) BodyUnread() int { return t.t.BodyUnread() }

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
func (p *Pool) Acquire(ctx context.Context, charges ...Charge) (*Ticket, error) {
	t := new(Ticket)
	if err := p.e.Acquire(ctx, &t.t, charges); err != nil {
		return nil, err
	}
	return t, nil
}

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
func (p *Pool) SetLimit(rule string, l window.Limit) error { return p.e.SetLimit(rule, l) }

// Limit returns a rule's current limit (N units per Per), and false for an
// unknown rule; N is 0 while a rule with Learn has not learned its limit
// yet. It does not block. In Redis mode it is the limit this
// process set or, for a rule with Learn, learned or adopted from another
// process (the latest of them), not one another process stored by SetLimit.
// For an adaptive rule (Rule.Adapt) it is the level new keys start at; a
// key's own level is its KeyState.Limit (Snapshot).
func (p *Pool) Limit(rule string) (window.Limit, bool) { return p.e.Limit(rule) }

// KeyState is a snapshot of one limiter (Pool.Snapshot); a plain value.
type KeyState struct {
	// Rule and Key name the limiter: a rule of the Table and a key its
	// Key function returned.
	Rule, Key string
	// InFlight is the units of admitted calls not yet released.
	InFlight int64
	// Used is the units the window counts at the snapshot's instant, for
	// windows that implement window.Reconciler; -1 for the others and in
	// Redis mode.
	Used int64
	// PausedUntil is when the key's pause ends; zero when none was set.
	PausedUntil time.Time
	// Distrusted counts the server's reports about the key that were not
	// taken at their word (ratesem.Distrusted events): calls heavier than
	// its learned limit sent alone, replies whose window contradicted the
	// key's (wrapping).
	Distrusted uint32
	// Limit is the limit the key is held to: its rule's, or the one it
	// learned from a reply or, in Redis mode, adopted from another process
	// (Rule.Learn); N is 0 while the key knows none.
	Limit window.Limit
}

// Snapshot returns the state of every live limiter, sorted by rule and key.
// It walks every key under the pool's lock and makes no round trip to
// Redis: in Redis mode it tells what this process knows.
func (p *Pool) Snapshot() []KeyState {
	ks := p.e.Snapshot()
	out := make([]KeyState, len(ks))
	for i, k := range ks {
		out[i] = KeyState(k)
	}
	return out
}

// Len returns the number of live limiters (rule, key pairs) in this
// process. It does not block.
func (p *Pool) Len() int { return p.e.Len() }

// Pause holds every new start on the limiter of (rule, key) until the
// instant until: calls that need it wait, calls in flight go on, other keys
// and rules are not affected. Overlapping pauses do not add up; the later
// end wins. In process it is not capped (the cap of WithMaxPause applies to
// the pauses throttles cause); in Redis mode (redisrate.Shared), where it
// pauses every process, it is capped by WithMaxPause too and sent to Redis
// in the background. It never blocks. It returns an error matching
// ratesem.ErrUnknownRule for an unknown rule, and one matching
// ratesem.ErrTooManyKeys when the key is new and the pool is full
// (WithMaxKeys).
func (p *Pool) Pause(rule, key string, until time.Time) error { return p.e.Pause(rule, key, until) }

// Throttled reports that the server rejected a call for its rate (HTTP 429,
// or 418 for Binance's IP ban), as th describes the response, and pauses
// the limiters of the charges it is about: those the Table's
// ThrottleTargets picks, when set and it picks some; else those whose rule
// is marked PauseOnThrottle, or all of them when none is marked. th.Header
// and th.Body may be nil (a caller that knows only the status and the
// Retry-After passes Throttle{Status: 429, RetryAfter: d}). With a
// server-given th.RetryAfter > 0 each pauses for about th.RetryAfter
// (lengthened by a random spread so that clients resume at different
// instants, never beyond the pool's cap, WithMaxPause). With RetryAfter ≤ 0
// (absent, zero, negative or unparsable) each pauses with exponential
// backoff: a random pause in [d/2, d] with d = 200 ms · 2^k for the k-th
// throttle in a row on that key, capped; a throttle that comes while the
// key is already paused belongs to the same episode (a call admitted before
// the pause) and adds nothing; and when the targets span rules of different
// windows, only those with the shortest Limit.Per are paused (the shortest
// window that can explain the rejection, not a daily one). A Release of a
// call on the key admitted after its latest throttle resets k. For a key of
// an adaptive rule (Rule.Adapt) among the targets it is also a throttle of
// a call started one Per ago (so such reports cut its level at most once
// per window): ThrottledTicket, which knows the call, is the exact signal.
// It never blocks and reads no body.
func (p *Pool) Throttled(th Throttle, charges []Charge) {
	var targets []Charge
	if p.table.ThrottleTargets != nil {
		targets = p.table.ThrottleTargets(th, charges)
	}
	p.e.ThrottledTargets(charges, targets, th.Status, th.RetryAfter)
}

// ThrottledTicket reports that the server rejected the call t (a Ticket
// of this Pool, not yet released) for its rate, as th describes the
// response. It pauses what Throttled(th, t.Charges()) pauses, and is the
// exact signal of adaptive limits (Rule.Adapt): the keys of adaptive rules
// among the throttle's targets cut their level as for a throttle of a call
// started when t was admitted (throttles of calls admitted before the
// latest cut are ignored), and t's Release then counts no success. A
// second report of t (the body after the headers) cuts nothing more; a
// report after Release only pauses. Package httpclient's NewPool calls it
// for every throttled response (429 and 418 by default, or what its
// WithThrottledBody hook says). It never blocks and reads no body. It
// panics if t is nil or not a Ticket of this Pool (a caller's bug).
func (p *Pool) ThrottledTicket(th Throttle, t *Ticket) {
	if t == nil {
		panic("ratesem: ThrottledTicket with a nil Ticket")
	}
	p.e.ThrottledTicket(&t.t, p.targets(th, t), th.Status, th.RetryAfter)
}

// Overloaded reports that the server answered the call t (a Ticket of
// this Pool, not yet released) with an overload rather than a throttle of
// its quota (HTTP 503 Service Unavailable, as th describes it): it pauses
// nothing, as ratesem never pauses a limit for a 503, and for adaptive
// rules (Rule.Adapt) it is a throttle of t, as in ThrottledTicket. Package
// httpclient's NewPool calls it for every 503 (and then ThrottledTicket
// too when its WithThrottledBody hook counts a 503 as a throttle: that
// pauses, and cuts nothing more). After t's Release, or a first report
// of t, it does nothing for the adaptive rules. It calls the Table's
// ThrottleTargets, when set, as Throttled does. It never blocks, reads no
// body and is safe for concurrent use (with t's Release too). It
// panics if t is nil or not a Ticket of this Pool (a caller's bug).
func (p *Pool) Overloaded(th Throttle, t *Ticket) {
	if t == nil {
		panic("ratesem: Overloaded with a nil Ticket")
	}
	p.e.OverloadedTicket(&t.t, p.targets(th, t))
}

// targets is the Table's ThrottleTargets for th and t's charges, or nil.
func (p *Pool) targets(th Throttle, t *Ticket) []Charge {
	if p.table.ThrottleTargets == nil {
		return nil
	}
	return p.table.ThrottleTargets(th, t.Charges())
}

// Reconcile takes in the server's own count for (rule, key): used units in its
// current window. When the server counts more than the local window does
// (another process spends from the same limit), the local window counts the
// difference as spent now, so the local budget shrinks for the rest of that
// window; a server count at or below the local one changes nothing, so feedback
// never loosens the local accounting. The difference taken in is at most the
// rule's limit (N, or the window's capacity when larger): a count beyond it, up
// to math.MaxInt64, means "full until the window moves", never a wrap. A
// negative used is ignored. Windows that do not implement window.Reconciler
// ignore it. It never blocks; it returns an error matching
// ratesem.ErrUnknownRule for an unknown rule, and one matching
// ratesem.ErrTooManyKeys when the key is new and the pool is full
// (WithMaxKeys).
func (p *Pool) Reconcile(rule, key string, used int64) error { return p.e.Reconcile(rule, key, used) }

// Close releases what the Pool holds outside the process. In process it
// does nothing and returns nil. In Redis mode (redisrate.Shared) it stops the
// Pool's engine: callers in Acquire return ratesem.ErrClosed, and so do later
// calls; releases already queued are sent for at most a second (those left
// then are covered by their leases). It waits for the round trips still
// running, at most two seconds, and never closes the Redis client. Tickets
// may still be released after Close. Calling it again only waits again.
func (p *Pool) Close() error { return p.e.Close() }

// TryAcquire is Acquire without waiting, with window.Limiter.TryN's
// contract: when every rule admits the charges now and no earlier caller
// waits on one of their limiters, it returns the Ticket (release it when
// the call ends), 0 and nil. Refused by time alone, it changes nothing and
// returns a nil Ticket and how long from now the call could start if
// nothing else changed (> 0; with callers waiting, the latest wait of the
// first of them on each limiter, behind whom it would queue); an error
// matching ratesem.ErrInFlight when only calls in flight ending (or a
// larger limit) can make room, or callers wait whose admission time is not
// known. It returns Acquire's errors for the charges themselves (an
// unknown rule, a negative or too large weight, ratesem.ErrTooManyKeys)
// and reads nothing from a context. It never blocks in process. In Redis
// mode (redisrate.Shared) it makes one round trip, and a refusal by Redis
// is reported as ratesem.ErrInFlight: the wait Redis names is not known to
// this process yet.
func (p *Pool) TryAcquire(charges ...Charge) (*Ticket, time.Duration, error) {
	t := new(Ticket)
	d, err := p.e.TryAcquire(&t.t, charges)
	if err != nil || d > 0 {
		return nil, d, err
	}
	return t, 0, nil
}
