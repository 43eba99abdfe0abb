package ratesem

import (
	"fmt"
	"time"
)

// EventKind says what happened to a call or a limiter.
type EventKind uint8

// The kinds of Event. Every Acquire of a limiter with an observer ends in
// exactly one Admitted, Refused or Cancelled event (a TryAcquire reports
// only its admissions); a call that could not be admitted at once reports
// Queued first.
const (
	// Admitted: a call of Weight units was admitted after waiting Wait
	// (0 when admitted at once). Queued tells whether it had queued.
	Admitted EventKind = iota + 1
	// Queued: a call of Weight units could not be admitted at once and
	// joined the queue; its Admitted, Refused or Cancelled event follows.
	Queued
	// Refused: a call failed fast without its context ending: weight too
	// large, queue full, admission after its deadline (ErrDeadline),
	// too many keys, Redis unavailable … Err says which; Wait is how long
	// it had waited.
	Refused
	// Cancelled: the call's context ended (Err is ctx.Err()) before it was
	// admitted; Wait is how long it had waited.
	Cancelled
	// Throttled: the server rejected a call for its rate: Status is the
	// HTTP status (429, 418, or what a body check said, OKX's 50011 with
	// 200), Pause the pause it caused (0 when the limiter reports the
	// pause apart, as a clientpool.Pool does with Paused events) and Source
	// what set that pause.
	Throttled
	// Paused: (Rule, Key) holds new starts until Until, a pause of Pause
	// from the event; Source says what set it.
	Paused
	// Retried: a throttled request (Status) is to be sent again once it
	// has slept Wait, the pause its throttle set, as its retries and retry
	// budget allow (httpclient.WithMaxRetries); Attempt numbers the retry
	// (1 for the first). Reported before the sleep: a retry whose context
	// ends during the sleep, or whose Acquire then fails, is reported but
	// never sent.
	Retried
	// Evicted: the idle limiter of (Rule, Key) was dropped; its window had
	// forgotten every call.
	Evicted
	// Reconciled: a server's usage header counted Weight units more than
	// the local window of (Rule, Key), which now counts them too.
	Reconciled
	// Distrusted: a server's report about (Rule, Key) was not taken at its
	// word, and Err says which: a call of Weight units heavier than the
	// limit the key learned from the server (Err matches
	// ErrWeightTooLarge) was admitted alone, charged as a full window, so
	// that its reply can correct the limit; or a reply's window contradicted
	// the one the key keeps (a host clock ahead of the server's) and was
	// taken in on the safe side only.
	Distrusted
	// Unsettled: a call under a rule that settles its weight from the
	// reply's body (clientpool.Rule.Settle) ended with the body closed
	// before it was read to its end, and what was read did not settle it:
	// it keeps the Weight it was admitted for (its estimate) under (Rule,
	// Key), however little the server charged. Read the body to io.EOF
	// before closing it to settle.
	Unsettled
)

var kindNames = [...]string{
	Admitted: "admitted", Queued: "queued", Refused: "refused", Cancelled: "cancelled",
	Throttled: "throttled", Paused: "paused", Retried: "retried", Evicted: "evicted",
	Reconciled: "reconciled", Distrusted: "distrusted", Unsettled: "unsettled",
}

// String returns the kind's name in lower case ("admitted", …), suited to a
// log attribute or a metric label.
func (k EventKind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// The sources of a pause, the values of Event.Source: what set the length
// of a pause. Each is its own name in lower case, suited to a log
// attribute or a metric label; "" means no pause.
const (
	// SourceRetryAfter: the response's Retry-After header (capped, with
	// jitter).
	SourceRetryAfter = "retry-after"
	// SourceBackoff: a throttle without a usable Retry-After; the client's
	// own exponential backoff.
	SourceBackoff = "backoff"
	// SourceBody: a throttle only the response body showed (a code such as
	// OKX's 50011); the pause is as long as the Retry-After or the
	// backoff would make it.
	SourceBody = "body"
	// SourceCaller: a direct call to Pause or PauseFor.
	SourceCaller = "caller"
)

// Event is what an observer is told (semaphore.WithObserver,
// clientpool.WithObserver, httpclient.WithObserver). Fields that do
// not apply to the Kind are zero. An Event is a plain value: an observer
// may keep it.
//
// Observers run synchronously on the goroutine of the call that caused the
// event (the caller of Acquire, RoundTrip, Release, Pause …), never with a
// limiter's lock held, so an observer may call the limiter. They must be
// safe for concurrent use and should not block: the call waits for them
// (and keeps its place or its units meanwhile; other callers go on). An
// observer that panics cannot corrupt the accounting: the limiter puts the
// call right first (a waiter leaves the queue, an admission is given back)
// and the panic goes on to the caller; each WithObserver says how.
// With no observer set, a limiter builds no Event at all.
type Event struct {
	// Kind says what happened; it decides which other fields apply.
	Kind EventKind
	// Rule and Key name the limiter: a clientpool rule and key; for a
	// RateSemaphore built with redisrate.NewSemaphore, Key is its name; empty
	// for an in-process RateSemaphore.
	Rule, Key string
	// Weight is the call's units (Admitted, Queued, Refused, Cancelled,
	// Throttled) or the units reconciled (Reconciled).
	Weight int64
	// Wait is how long the call waited in the limiter (Admitted, Refused,
	// Cancelled; 0 when it did not queue), or will sleep before a retry
	// (Retried).
	Wait time.Duration
	// Queued tells, for Admitted, Refused and Cancelled, whether the call
	// had reported Queued (it counted in the queue depth).
	Queued bool
	// Pause is the length of the pause set (Throttled, Paused); Until its
	// end on the limiter's clock (Paused); Source what set its length (one
	// of SourceRetryAfter, SourceBackoff, SourceBody and SourceCaller; ""
	// when no pause applies).
	Pause  time.Duration
	Until  time.Time
	Source string
	// Status is the HTTP status of the response (Throttled, Retried).
	Status int
	// Attempt numbers the retries of one request (Retried): 1, 2, …
	Attempt int
	// Err is why the call failed (Refused, Cancelled): it matches a
	// sentinel of this package or the context's error; for Distrusted,
	// what was not trusted.
	Err error
}
