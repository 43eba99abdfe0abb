package httpclient

import (
	"context"
	"net/http"
	"time"

	"github.com/ratesem/ratesem/clientpool"
)

// NewPool returns a Transport, set up by opts, that routes each request
// through the rules of a clientpool.Pool: the request is classified
// (Pool.Classify: the endpoint table's rules, keys and weights; a rule reads
// a body without GetBody through the clone's GetBody, see Transport), all of its
// charges are acquired as one, the request is sent through the base
// RoundTripper (WithBase), and the charges are released together when the
// response body is closed or read to io.EOF. Every response's usage headers
// are reconciled with the rules that read them (Rule.Usage). A throttled
// response (the WithThrottledBody hook; by default 429
// or 418) pauses the keys of the rules it is about (Pool.Throttled):
// until its Retry-After, capped (WithMaxRetryAfter), or, when it has none,
// for a backoff the pool picks per key. A throttle the headers show pauses
// before RoundTrip returns (with Throttle.Body nil); the first 512
// bytes of its body, as the caller reads them, then go to
// Pool.Throttled again (Throttle.Body set) before the charges are
// released, so that the table's ThrottleTargets can pause the keys the body
// names; a throttle only the body shows (OKX's 50011 with HTTP 200) pauses
// then. RoundTrip never reads the body. A request whose classification
// fails (one that matches no endpoint of a Table without Default is
// ratesem.ErrNoEndpoint) is not sent: RoundTrip closes its body and
// returns the error.
//
// A rule that settles its weight from the reply (clientpool.Rule.Settle,
// the LLM presets' token rules) reads the body as the caller reads it:
// read it to its end (io.EOF) before closing it. A body closed before its
// end whose read part did not settle the call leaves the call charged its
// estimate and is reported to the observers as a ratesem.Unsettled event.
//
// By default each request is sent once; WithMaxRetries sends a request
// again after a throttle its headers show: the retry is classified and
// charged again, and waits out the pauses of its keys. Its retry budget
// (WithRetryBudget) is kept per rule and key of the request's charges, in
// the Transport's memory whether p is in process or shared over Redis.
// NewPool panics if p is nil. It does not block.
func NewPool(p *clientpool.Pool, opts ...Option) *Transport {
	if p == nil {
		panic("ratesem: NewPool with nil Pool")
	}
	return build(func(req *http.Request) (Limiter, int64) {
		charges, err := p.Classify(req)
		return &poolCall{pool: p, charges: charges, err: err}, 1
	}, opts)
}

// poolCall is the Limiter of one request under a Pool: Acquire takes all of
// its charges at once and Release gives them back together.
type poolCall struct {
	pool    *clientpool.Pool
	charges []clientpool.Charge
	err     error // the classification's: Acquire fails with it, the request is not sent
	ticket  *clientpool.Ticket
}

// Acquire takes all of the request's charges at once (the weight argument
// is ignored: the charges carry the weights), blocking like
// clientpool.Pool.Acquire; on failure it holds nothing. A request that
// could not be classified is never admitted: Acquire returns that error.
func (c *poolCall) Acquire(ctx context.Context, _ int64) error {
	if c.err != nil {
		return c.err
	}
	t, err := c.pool.Acquire(ctx, c.charges...)
	c.ticket = t
	return err
}

// Release gives every charge back together; it never blocks.
func (c *poolCall) Release(int64) { c.ticket.Release() }

// PauseFor pauses the request's throttle targets; Transport calls Throttled
// instead, so this serves only callers using poolCall as a plain Limiter.
func (c *poolCall) PauseFor(d time.Duration) {
	c.pool.Throttled(clientpool.Throttle{Status: http.StatusTooManyRequests, RetryAfter: d}, c.charges)
}

// Throttled implements throttleHandler: the keys of the rules the throttle is
// about pause until the Retry-After, or for a backoff of the pool's. It
// reads no body: body is what the caller's reads went through (nil when
// the headers are all there is yet).
func (c *poolCall) Throttled(resp *http.Response, body []byte, retryAfter time.Duration) {
	th := clientpool.Throttle{Status: resp.StatusCode, Header: resp.Header, RetryAfter: retryAfter, Body: body}
	c.pool.ThrottledTicket(th, c.ticket)
}

// ObserveResponse implements responseObserver: usage headers are
// reconciled, and a 503 (an overloaded server: no pause) is a throttle of
// the call for its adaptive rules (clientpool.Pool.Overloaded).
func (c *poolCall) ObserveResponse(resp *http.Response) {
	c.ticket.ObserveHeaders(resp.Header)
	if resp.StatusCode == http.StatusServiceUnavailable {
		c.pool.Overloaded(clientpool.Throttle{Status: resp.StatusCode, Header: resp.Header}, c.ticket)
	}
}

// responseSettler is implemented by a Limiter whose calls settle their
// weight from the response (a poolCall whose rules have Settle): Transport
// keeps up to peek.MaxSettle bytes (1 MiB) of the body as the caller reads
// it and shows them to settleResponse before the units are released,
// telling whether the body was read to its end (complete); settleResponse
// returns true when a body closed before its end left a charge unsettled.
type responseSettler interface {
	wantsBody() bool
	settleResponse(h http.Header, body []byte, complete bool) (unsettled bool)
}

// wantsBody reports whether a rule of the call settles from its response.
func (c *poolCall) wantsBody() bool { return c.ticket.WantsBody() }

// settleResponse settles the call's charges from its response; for a body
// closed before its end, the charges that stay unsettled are reported
// (clientpool.Ticket.BodyUnread).
func (c *poolCall) settleResponse(h http.Header, body []byte, complete bool) bool {
	c.ticket.SettleResponse(h, body)
	return !complete && c.ticket.BodyUnread() > 0
}
