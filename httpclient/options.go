package httpclient

import (
	"net/http"
	"time"

	"github.com/ratesem/ratesem"
)

// Option configures a Transport in New, NewSelect or NewPool. Options are
// applied in order; a later one of the same kind wins.
// A nil Option is ignored.
type Option func(*config)

// config is what the options set; a Transport keeps it unchanged after New.
type config struct {
	base          http.RoundTripper // nil: http.DefaultTransport
	maxRetryAfter time.Duration     // ≤ 0: defaultMaxRetryAfter
	clk           ratesem.Clock     // nil: the real clock
	throttledBody func(status int, h http.Header, body []byte) bool
	backoffStart  time.Duration // ≤ 0: 200 ms
	maxRetries    int           // ≤ 0: never retry
	budgetTokens  int           // WithRetryBudget's maxTokens: 0 the default, < 0 off
	budgetRatio   float64       // WithRetryBudget's tokenRatio: ≤ 0 or NaN the default
	observer      func(ratesem.Event)
}

// build returns a Transport of sel set up by opts.
func build(sel Selector, opts []Option) *Transport {
	t := &Transport{sel: sel}
	for _, o := range opts {
		if o != nil {
			o(&t.config)
		}
	}
	if t.maxRetries > 0 {
		t.budget = newRetryBudget(t.budgetTokens, t.budgetRatio)
	}
	return t
}

// WithBase sends the requests through rt. Default (or a nil rt):
// http.DefaultTransport.
func WithBase(rt http.RoundTripper) Option { return func(c *config) { c.base = rt } }

// WithMaxRetryAfter caps the pause one throttled response can cause, its
// Retry-After or the backoff, and so the sleep before a retry. Zero or
// negative means the default, 5 minutes.
func WithMaxRetryAfter(d time.Duration) Option {
	return func(c *config) { c.maxRetryAfter = d }
}

// WithThrottledBody sets the hook that reports whether a response says the
// client called too fast, from its status code, its header and the first
// bytes of its body. nil (the default) means status
// 429 or 418. Transport calls it at most twice per response and never lets
// it read the body: once when the headers arrive, with body nil (a true
// answer pauses at once, before RoundTrip returns), and, when the hook is
// set, once more as the caller reads, with the first 512 bytes the
// caller's reads went through (fewer when the body ended or was closed
// sooner; never nil, empty when the caller read nothing); a true answer
// then pauses too, before the request's units are released. An API that
// signals a throttle in the body (OKX's code 50011 with HTTP 200) plugs in
// its own test here. The hook must be safe for concurrent use and must not
// keep h or body.
func WithThrottledBody(f func(status int, h http.Header, body []byte) bool) Option {
	return func(c *config) { c.throttledBody = f }
}

// WithBackoffStart sets the first pause after a throttle without a usable
// Retry-After; each further throttle in a row doubles it, with jitter, up
// to the cap of WithMaxRetryAfter. Zero or negative means the default,
// 200 ms.
func WithBackoffStart(d time.Duration) Option {
	return func(c *config) { c.backoffStart = d }
}

// WithMaxRetries sets how many times RoundTrip sends a throttled request
// again, so a request is sent at most n+1 times; 0 or negative means never
// (the default). Retrying goes beyond the RoundTripper contract (net/http
// asks a RoundTripper not to retry), hence off by default.
//
// A response is retried only when its headers show the throttle (the
// WithThrottledBody hook with body nil: by default 429 or 418) and the
// request can be replayed: no body (nil or http.NoBody), GetBody set, or a
// body without GetBody that the Selector read whole (see Transport). A
// throttle only the body shows (OKX's 50011 in a 200) is never retried: the
// caller has the response by then. Neither is a failed Acquire, a base
// error or any other status. Before a retry RoundTrip reads at most 4 KiB
// of the throttled response's body (through the hook, which sees it as it
// would the caller's reads) and closes it, which releases the request's
// units; sleeps, on the Transport's clock (WithClock), for the pause the
// Transport computed for that response (its capped, jittered Retry-After,
// or the backoff of the current streak: never zero, never above the cap;
// for NewPool's limiter, which sets pauses of its own, this
// computation still sets the sleep); then sends a clone of the request with
// a fresh body from GetBody (asked for before the sleep, and closed if the
// retry is not sent; the caller's request is not modified) through the
// Selector and Acquire again. So each attempt is a new request for the
// limiter and the server: it acquires its weight again, waits out any pause
// left on the limiter, and a throttled attempt grows the backoff streak
// like any throttle. A request with no limiter (the Selector returned nil)
// also sleeps before its retry. When the context ends during the sleep,
// RoundTrip returns a nil response and an error matching ctx.Err(); when
// GetBody fails, a nil response and that error. Otherwise the caller sees
// only the last response, which is still the throttled one when the
// retries run out.
//
// Retries are also bounded by a retry budget, on whenever n > 0 (see
// WithRetryBudget; by default 10 tokens and a ratio of 0.1): each throttle
// (the headers' or only the body's) spends a token, each success (a
// response not throttled, status below 400) earns a tenth of one back, and
// a throttled request is sent again only while more than half the tokens
// are left. So a server that throttles every request gets at most 4
// retries in all from a Transport (per rule and key, for NewPool), however
// many requests and goroutines; a retry the budget
// refuses returns the throttled response, as when the retries run out
// (and no Retried event is reported).
func WithMaxRetries(n int) Option { return func(c *config) { c.maxRetries = n } }

// WithRetryBudget sets the retry budget that bounds the retries of
// WithMaxRetries, in the shape of gRPC's retryThrottling (maxTokens,
// tokenRatio; the A6 design,
// https://github.com/grpc/proposal/blob/master/A6-client-retries.md#throttling-retry-attempts-and-hedged-rpcs).
// It has no effect without WithMaxRetries(n), n > 0.
//
// The budget starts full, at maxTokens tokens. Every response whose
// headers show a throttle (WithThrottledBody's hook with body nil; by
// default 429 or 418), a first attempt's or a retry's, takes 1 token (never
// below 0); a throttle only the body shows also takes 1 (it is never
// retried); every success, a response not throttled with a status below
// 400, gives back tokenRatio tokens (never above maxTokens); any other
// response (a 4xx or 5xx that is not a throttle: 503 too) and a base error
// (no response) neither take nor give, as A6 counts only retryable
// failures and successes. With a WithThrottledBody hook the body may still
// show a throttle, so a response of a request under a limiter whose
// headers do not show one counts when its body check runs (512 bytes read,
// io.EOF or Close), as the hook judges what the caller read (one closed
// unread is judged on an empty body); such a response never read nor
// closed takes and gives nothing. (A request the Selector gave no limiter has no body check: it
// counts at its headers.) A throttled response may be
// retried only when, its own token taken, more than maxTokens/2 tokens are
// left. The take and the decision are one step under a lock, so however
// many goroutines share the Transport, a server that throttles every
// request sees at most ceil(maxTokens/2)−1 retries in all from it, and in
// general retries < maxTokens/2 + tokenRatio × (the successes): a bounded
// fraction, tokenRatio, of the successful requests, plus a fixed allowance.
// Only successes earn tokens back, never time (gRPC's budget has no clock
// either): a budget left below half stays there, whatever the time, until
// more than (maxTokens/2+1)/tokenRatio successes (61 with the defaults,
// from empty) earn a retry back.
//
// A Transport of NewPool keeps one budget per (rule, key) of a request's
// charges (clientpool.Charge's Rule and Key) instead: a throttle takes a
// token from the budget of every charge, a success gives back to every
// one, and a retry needs every one above half, so a key
// that keeps failing does not use up another key's retries. A request
// with no charges (not limited) uses the Transport's own budget. Keys may
// be chosen by callers, so memory is bounded: a key's budget back at full
// is dropped, at most 1024 keys below full keep one of their own, and keys
// beyond that share a single overflow budget (a key given room again
// starts from the overflow's tokens, so its failures are never forgiven to
// make room): with every request throttled, at most 1025 ×
// (ceil(maxTokens/2)−1) retries in all for the requests with charges,
// whatever the number of keys (and ceil(maxTokens/2)−1 more from the
// Transport's own budget for those without). A key below full keeps its
// place until its own successes fill it: after 1024 keys were left below
// full and never heard from again, every new key shares the overflow. A
// hash of each rule and key is kept, not the strings, whose length callers
// choose; the work per response is one lock and, for n charges, n hashes
// and O(n log n) to drop duplicates.
//
// The budget lives in the Transport's memory, the same whether its Pool is
// in process or shared over Redis (redisrate.Shared): each replica of a
// fleet keeps its own, so R replicas send at most R times the bound.
//
// maxTokens: 0 means the default, 10 (the A6 design's example); a
// negative maxTokens turns the budget off (retries bounded by
// WithMaxRetries alone, as before budgets); above 1000 (gRPC's cap) it is
// 1000. tokenRatio is kept to 3 decimals (as gRPC does), at least 0.001;
// 0, negative, -Inf or NaN means the default, 0.1; a ratio of maxTokens or
// more (+Inf too) refills the budget with each success. Every value is
// valid: the Option never fails, and neither it nor the budget blocks (one
// short critical section per response). The budget is safe for concurrent
// use; a later WithRetryBudget wins, before or after WithMaxRetries.
func WithRetryBudget(maxTokens int, tokenRatio float64) Option {
	return func(c *config) { c.budgetTokens, c.budgetRatio = maxTokens, tokenRatio }
}

// WithObserver has the Transport tell obs what happens to each request, as
// a ratesem.Event (Rule and Key empty): Admitted (Weight, and Wait, the time
// Acquire took), Refused or Cancelled when Acquire fails (Err), for every
// request with a limiter; Throttled for every throttled response (Status;
// Pause, the pause set, or for NewPool's limiter
// the pause a retry waits, the limiter reporting its own; Source:
// ratesem.SourceRetryAfter, ratesem.SourceBackoff, or ratesem.SourceBody
// when only the body showed the throttle); Retried for each retry, once
// its fresh body is in hand and before its sleep (Attempt from 1, Wait the
// pause it sleeps, Status of the throttled response; none for a retry the
// budget of WithRetryBudget refuses or whose GetBody fails; a retry whose
// context ends during the sleep, or whose Acquire then fails, was reported
// but is never sent);
// Unsettled (Weight) for a response whose call settles from its body (see
// NewPool) closed before the body's end without being settled.
// obs runs synchronously on the goroutine of RoundTrip (or of the caller's
// body reads, for a throttle the body shows), holding no lock; it must be
// safe for concurrent use and should not block: a blocked obs stalls its
// own request, which keeps its units meanwhile, and no other. An obs that
// panics does not leak units: the panic goes on to the caller of RoundTrip
// (or of Read or Close) once the request's units are released (Admitted:
// the request is not sent; Retried: the throttled response was closed) or
// still owned by the response's body, as they are for the other callbacks a
// request meets (a Selector, a Rule's Key, Weight, Learn, Usage and Settle,
// a Table's ThrottleTargets, the WithThrottledBody hook). nil (the default) means no
// observer and costs one nil check per event. A limiter with an observer of
// its own (semaphore.WithObserver, clientpool.WithObserver) reports its
// queueing too; ratesem.Metrics.Observe counts either.
func WithObserver(obs func(ratesem.Event)) Option { return func(c *config) { c.observer = obs } }

// WithClock makes the Transport read the wall clock through clk, to turn an
// HTTP-date Retry-After into a delay, and sleep on clk.After before a retry
// (WithMaxRetries). Default (or a nil clk): the real clock, which
// testing/synctest fakes. The limiter keeps its own clock; the order of
// requests and throttles that sets the backoff streak, the Wait of an
// Admitted event, and the hold of a request without a response (its times
// to a response and its timer: see RoundTrip) stay on the real monotonic
// clock.
func WithClock(clk ratesem.Clock) Option { return func(c *config) { c.clk = clk } }
