package clientpool

import (
	"net/http"
	"time"

	"github.com/ratesem/ratesem/internal/engine"
	"github.com/ratesem/ratesem/window"
)

// Rule is one rate limit of an API, applied separately to each key: "60
// orders per 2 s per (user, instrument)" is one Rule whose Key function
// returns user+instrument.
type Rule struct {
	// Name identifies the rule in a Pool, in Charges and in Events. It
	// must be unique within a Pool and not empty.
	Name string

	// Limit is N units per Per for each key. Per must be > 0.
	Limit window.Limit

	// Window makes the rate window of one key. nil means the completion
	// window (window.NewCompletion), which holds at the server whatever the
	// latency. Pick window.NewFixedWindow for a server that counts fixed
	// windows aligned to the clock (Binance). Each call must return a new
	// Policy.
	Window func(window.Limit) window.Policy

	// MaxUnitsInFlight caps the weight units of the calls in flight for one
	// key (units, not calls: with weights 1 to 5 and a cap of 8, as few as
	// two calls may be in flight); 0 means no cap beyond what the window
	// allows. A cap on calls is a rule whose every endpoint charges weight 1.
	MaxUnitsInFlight int64

	// Key returns the key a request counts against under this rule (an
	// IP, an account, an instrument, or several joined), and false when
	// the rule does not apply to the request. nil means one key, "", for
	// every request. It must treat the request as read-only.
	Key func(req *http.Request) (key string, ok bool)

	// Weight returns the units a request costs under this rule when the
	// endpoint table does not say; nil means 1. math.MaxInt64 refuses the
	// request: no limit admits it, and the error (ratesem.ErrWeightTooLarge)
	// says the rule refuses it.
	Weight func(req *http.Request) int64

	// Usage reads the server's own count for this rule and key from a
	// response's headers (see BinanceUsage and RateLimitUsage), so the pool
	// can shrink the local budget when another client spends from the same
	// limit. nil means no feedback.
	Usage func(h http.Header) (used int64, ok bool)

	// PauseOnThrottle marks the rules a 429 (or 418) response pauses, by
	// key: the rules that the server's throttle is about. A throttled
	// instrument then does not slow unrelated instruments. When no rule of
	// a call is marked, a throttle pauses all of that call's rules.
	PauseOnThrottle bool

	// Learn reads the rule's limit at the server from a response's headers
	// (see LearnRateLimit, for X-RateLimit- and the IETF RateLimit fields,
	// or the presets' own): N, Per when
	// the headers say, what remains and when the server's window ends. It
	// returns false when the headers say nothing. nil means the limit is
	// Limit, fixed. With Learn, Limit.N may be 0: the limit is then unknown
	// until the first response that says it, and until then each key admits
	// one call at a time, of any weight; a Limit.N > 0 is a guess the first
	// response corrects. Limit.Per must be > 0 either way: it is the window
	// when the headers do not give one. In Redis mode (redisrate.Shared)
	// the fleet learns together: a key no process knows the limit of admits
	// one call at a time across the fleet; the limit one process learns is
	// stored in Redis (one round trip, when it changes) and every process
	// adopts it at its next call on the key; a budget the server announces
	// for its window (Learned.Reset) is shared by the fleet, and so are the
	// calls in flight: a window of a key that ends before a reply names
	// the next allows the learned N less every call still in flight on the
	// key (in process, the process's; over Redis, the fleet's), which may
	// arrive in it.
	Learn func(h http.Header, now time.Time) (Learned, bool)

	// Settle marks a rule whose weight is known only after the call (an
	// LLM API's tokens): it reads a call's true weight, in units, from its
	// response's headers and body (its last 1 MiB, the whole of most LLM
	// replies and of a longer one its end, where the usage object is, as
	// the caller read them; nil when the response had none), and returns false
	// when they do not say.
	// Package httpclient's NewPool calls it before releasing the call's
	// charges, which then end with that weight (Ticket.Settle). nil means
	// the charged weight stands.
	//
	// It sees only what the caller read: read the reply's body to its end
	// (io.EOF) before closing it, or at least past the usage it reports. A
	// body closed unread leaves the call charged its estimate, however
	// little the server charged, and is reported as a ratesem.Unsettled
	// event (Ticket.BodyUnread).
	Settle func(h http.Header, body []byte) (units int64, ok bool)

	// Adapt makes the limit adaptive, for an API that publishes no number
	// (see Adaptive); nil means the limit is Limit (or learned). Limit.N is
	// then the level each key starts at (0, or a value outside [Floor,
	// Ceiling]: Floor), and Limit.Per the window the level counts in,
	// whatever Window is: the level is each key's window's N.
	Adapt *Adaptive

	// TimeUnit, when > 0, counts a call's duration in the rule's units: a
	// budget of server time ("90 seconds of CPU time per 60 seconds",
	// GitHub's secondary limit) is a Limit of N units per Per with one
	// unit per TimeUnit of time (N 90 000 per minute, TimeUnit
	// time.Millisecond). A call is admitted for its estimate (Weight, or
	// the endpoint table's cost) and counts that while in flight; when it
	// is released (Ticket.Release) it is settled (Ticket.Settle) to its
	// duration: the wall time from its admission (Acquire returned) to its
	// Release on the pool's clock, in units of TimeUnit rounded up (1 ns
	// more than 2 ms is 3 units of 1 ms; a call of no time is 0 units).
	// Wall time is at least the server's time for the call (its CPU time,
	// which no server reports per call), so the measure is on the safe
	// side. A refund where the call's estimate was more, a debit from the
	// release on where it was less; both count in process and over Redis
	// (redisrate.Shared), where the duration is measured by the process
	// that held the call.
	//
	// The estimate must cover the server's time of a call for as long as
	// it is in flight: a call that runs longer than its estimate counts
	// only its estimate until it ends, and a server that counts time as it
	// passes may then see more than N units in a window; a call that never
	// ends counts its estimate until it is released (in Redis mode, until
	// its lease runs out, when Redis ends it at its estimate). A very long call is debited at
	// its end, at most "full until the window moves" (window.Settler): it
	// holds the key about one Per, not its duration.
	//
	// A weight that Ticket.Settle or Rule.Settle sets for the rule (a
	// server that reports its own time in a header, read in the same
	// units) wins over the measure. A clock that goes back between
	// admission and release (a test clock) measures nothing: the estimate
	// stands; one that jumps ahead debits as above. 0 means the weight is
	// not time; a negative TimeUnit, or one on a Window that is not a
	// window.Settler, is refused by New (ratesem.ErrInvalidLimit).
	TimeUnit time.Duration

	// Source is where the rule comes from (the API documentation page).
	Source string
}

// Adaptive makes a rule's limit adaptive: each key's window N is a level
// that starts at the rule's Limit.N (or Floor), rises while the key's calls
// succeed and is cut when the server throttles them, within [Floor,
// Ceiling]. It is for APIs that throttle (429, 503, gRPC's
// RESOURCE_EXHAUSTED) but publish no limit: internal services, partner
// APIs, the Kubernetes API server's API Priority and Fairness
// (https://kubernetes.io/docs/concepts/cluster-administration/flow-control/).
//
// The signals, per key: a call released without a throttle is a success
// started at its admission; Pool.ThrottledTicket (httpclient's NewPool
// calls it on 429, 418 and 503) is a throttle of that call. The law
// (internal/adapt, "HL") ignores throttles of calls admitted before its
// latest cut (they were admitted under an older level); proves a level by
// one clean cycle (a Per passed and as many calls as the level, admitted
// at it, succeeded); climbs fast while no throttle is known (+1, +2, +4 …,
// at most 35% a step), then halves the gap to the lowest level that drew a
// throttle each cycle and probes that level +1 only every max(2, ⌈100/N⌉)
// cycles; once that level passes a clean cycle (the limit rose) it is
// forgotten and the climb starts again at N/16 a step, the steps growing
// ×4 a cycle (at most 35%); a throttle of a probe goes back to the last
// good level, a throttle at the good level cuts it to min(90%, 95% of
// what the last Per accepted). Against a server whose limit halves and
// then triples (100 > 50 > 150 per second, calls of 20 to 80 ms,
// completion window) it keeps rejections under 2% of calls and throughput
// above 85% of the limit within 10 windows of each step, for every seed
// (TestAdaptiveUnknownServer).
// A semaphore.RateSemaphore has no adaptive option (its Release(n) names
// no call, so no start instant): use a Pool of one rule.
//
// Weights count in the level's units; a charge heavier than Floor can hold
// is refused (ratesem.ErrWeightTooLarge), since a key's level may fall to
// Floor. With Rule.Learn, a limit the key learns from a reply is its
// ceiling; a reply that reports its window (Learned.Reset with a
// Remaining ≥ 0) makes the rule count in the server's windows, every key
// of it from then on: a key's budget is what the server said remains
// until its reset (plus ResetMargin), which then governs, not the level
// (which no longer moves); a window of a key that ends before a reply
// names the next allows the limit the key learned, or for a key that
// learned none the rule's starting level (Limit.N, or Floor when Limit.N
// is outside [Floor, Ceiling]; SetLimit lowers it to its N, at least
// Floor); a reply
// without its window then changes no budget. SetLimit on an
// adaptive rule sets the ceiling of every key (N, at most 2^40) and the window (Per).
// A key evicted when idle (WithIdleTimeout) starts over at Limit.N.
// In Redis mode (redisrate.Shared) the fleet shares one level per key,
// kept in Redis (the same law, in Lua) and stored as the key's limit there,
// which every process's next admission is held to: each process reports
// its successes (at most one round trip per key per Per/8) and its
// throttles (one round trip each, with the call's admission on Redis's
// clock, so three processes reporting one overload cut once). The
// ceilings are the fleet's, kept in Redis with each key's level: SetLimit
// on an adaptive rule sets the ceiling (N) of every key the calling
// process holds, for every process (the level comes down to it at once;
// the latest SetLimit of the fleet wins; a key the process meets later is
// capped by its reports, unless another SetLimit set that key's), and
// returns an error matching ratesem.ErrInvalidLimit for a Per other than
// the rule's (the window is the fleet's); with Rule.Learn, a limit a key
// learns from a reply is that key's ceiling for every process, and a
// reply's remaining count without its window is reconciled into the key's
// window in Redis; a reply that names its window makes the rule count in
// the server's windows as in process, for the fleet: the process that
// reads it stores the reply's key as a quota in Redis (one round trip, on
// the goroutine of Ticket.ObserveHeaders) with the budget the reply gives,
// shared by every process; another process adopts it at its next
// admission on the key, and counts its own keys of the rule in the
// server's windows from then on; every other key follows at its next
// admission (it adopts the quota stored for it, or stores one), so that
// no process stores over the limit another learned for a key, and a key's
// first window counts what its window counted at the switch, in both
// modes; SetLimit then sets the N of the windows of the keys the calling
// process holds that learned no limit, for every process.
// Token buckets, leaky buckets and GCRA adapt their N (the rate) and keep
// the burst they were made with, as in process, their state carried to
// each new level; Redis mode refuses at construction an adaptive token
// bucket made with burst 0 (its burst follows N). The exchange presets never set it: their
// bans escalate (Binance's 418 grows from 2 minutes to 3 days,
// https://developers.binance.com/docs/binance-spot-api-docs/rest-api/limits).
type Adaptive struct {
	// Floor is the lowest level, in units per the rule's Limit.Per (1 to 2^40;
	// New refuses others with ratesem.ErrInvalidLimit):
	// a key is never held below it, however the server throttles.
	Floor int64
	// Ceiling is the highest level (≥ Floor), or 0 for none (up to
	// 2^40): the published limit, when one is known.
	Ceiling int64
}

// TimeUnits returns a duration d in units of unit (Rule.TimeUnit), rounded
// up: one unit per unit of time or part of one (2 ms and 1 ns are 3 units
// of 1 ms); 0 for d ≤ 0. It is how a call under a rule with TimeUnit is
// settled, and how to write an estimate of a duration as a Weight. unit
// must be > 0 (it panics otherwise, with a clear message). It never overflows.
func TimeUnits(d, unit time.Duration) int64 { return engine.TimeUnits(d, unit) }

// Learned is what a response's headers say about one rule's limit at the
// server (Rule.Learn).
type Learned struct {
	// Limit is the server's limit: N units per Per. N 0 means the headers
	// do not say; Per 0 means the rule's Per holds.
	Limit window.Limit
	// Remaining is the units left at the server when it answered, counting
	// the call it answered; < 0 when the headers do not say; more than the
	// key's limit (a hostile or broken header) is taken as the limit, in
	// both modes. Within one of
	// the server's windows (Reset), the report with the lowest Remaining
	// is the latest the server counted: the key's budget is that, less the
	// key's calls whose responses have not reported yet; a report with
	// more gives its own call's units back (it was counted), unless its
	// call started after the lowest report came in.
	Remaining int64
	// Reset is when the server's current window ends, for a server that
	// counts in windows of its own (GitHub's x-ratelimit-reset); zero for a
	// token bucket, whose reset headers say when it is full again, not when
	// a window ends. A Reset later than the one learned before (by more
	// than a second and half the rule's Per: one window's end read from
	// replies of different latencies moves) announces a new window, whose
	// budget may be higher than the old one's. The pool adds ResetMargin
	// to it.
	Reset time.Time
	// Epoch reports that Reset is an instant on the server's clock (an
	// epoch value such as GitHub's Unix seconds), not a delay from now read
	// on the host's. The pool then reads it against the response's Date
	// header: the window ends Reset − Date after the response arrived
	// (see ResetMargin), so a host clock ahead of the server's never starts
	// the next window early.
	Epoch bool
}

// ResetMargin is added to every window end a response reports
// (Learned.Reset): 1 s, for a reset rounded down to whole seconds.
//
// An epoch reset (Learned.Epoch) is read against the response's Date
// header: the pool takes the host clock to be ahead of the server's by
// skew = (the instant the response arrived, on the host's clock) − Date,
// at least 0, and the window to end at Reset +
// skew + ResetMargin on the host's clock. Since Date is the server's clock
// when it answered, truncated to the second, skew overestimates the host's
// lead by the response's latency and up to a second: never early. The
// rule keeps the largest skew measured within a Per (a lower one replaces
// it once it is a Per old), for every reply of the rule: one without a
// usable Date (absent, malformed) uses it too, 0 before any reply had one.
// A window
// never ends more than the rule's Per + 2 s after the response, whatever
// Reset and Date say (a Date in the far past): one said to end later
// ends then, in process and over Redis alike; a Date in the future makes
// the skew 0 (the host's reading of the reset).
// A host clock behind the server's is never corrected for: its windows
// end late, on the safe side.
const ResetMargin = engine.ResetMargin

// Charge is what one call costs under one rule: Weight units of the limiter
// of (Rule, Key). Rule names a rule of the Table; Key is the rule's key (""
// for a rule without a Key function); Weight is the units the call costs,
// in the rule's units (≥ 0). String formats it as "rule[key]×weight". It is
// the waiting engine's own type, so that a call's charges reach it without
// a copy.
type Charge = engine.Charge
