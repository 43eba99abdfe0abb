package httpclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Limiter is what [Transport] needs from a limiter. Weights n are in the
// limiter's units (usually requests, or an API's request weight).
// *semaphore.RateSemaphore from github.com/ratesem/ratesem/semaphore
// satisfies it. Implementations must be safe for concurrent use.
type Limiter interface {
	// Acquire blocks until n units are admitted or ctx is done. On failure
	// it returns an error (ctx.Err() when ctx is done, possibly wrapped) and
	// holds nothing.
	Acquire(ctx context.Context, n int64) error
	// Release gives back n units taken by a successful Acquire. Transport
	// calls it exactly once per successful Acquire, with the same n.
	Release(n int64)
	// PauseFor stops new starts for d from now; when pauses overlap, the one
	// that ends later wins. Transport calls it only with d > 0.
	PauseFor(d time.Duration)
}

// Selector picks the limiter and the weight (in that limiter's units) for one
// request. A nil Limiter means the request is not limited; a weight of 0 is
// still passed to Acquire and Release; a negative weight is an error that
// RoundTrip returns without sending the request. A Selector must treat the
// request as read-only and must be safe for concurrent use.
type Selector func(req *http.Request) (Limiter, int64)

// DefaultMaxRetryAfter is the longest pause a Retry-After header can cause
// when [Transport.MaxRetryAfter] is not set, so that a hostile or broken
// server cannot park the client for hours.
const DefaultMaxRetryAfter = 5 * time.Minute

// Transport is an [http.RoundTripper] that rate-limits requests through a
// [Limiter] chosen per request by Select.
//
// For each request RoundTrip acquires the selected weight on the request's
// context, calls Base, and releases the weight exactly once: when the
// response body is closed or read to io.EOF, or at once if Base fails or the
// response has no body. A 429 or 418 response carrying Retry-After pauses the
// limiter (see RoundTrip). Transport never retries, never follows redirects
// and never modifies the caller's request.
//
// A Transport is safe for concurrent use by multiple goroutines. Its fields
// must not be changed once it is in use. The zero value is not usable, since
// Select is required; build one with [New] or [NewSelect].
type Transport struct {
	// Base sends the requests. nil means http.DefaultTransport.
	Base http.RoundTripper

	// Select picks the limiter and weight for each request. Required:
	// RoundTrip returns an error if it is nil. New and NewSelect set it.
	Select Selector

	// MaxRetryAfter caps the pause caused by one Retry-After header. Zero or
	// negative means DefaultMaxRetryAfter.
	MaxRetryAfter time.Duration

	// Now is the wall clock used to turn an HTTP-date Retry-After into a
	// delay. nil means time.Now. Tests set it to a fixed time.
	Now func() time.Time

	// Throttled reports whether a response says the client called too fast.
	// nil means DefaultThrottled: status 429 or 418. An API that signals it
	// in the body (OKX's code 50011 with HTTP 200) plugs in its own test; it
	// may read the body only if it leaves it readable for the caller.
	Throttled func(resp *http.Response) bool

	// MaxRetries is how many times a throttled request is sent again, after
	// the pause its response caused; 0 means never. Only requests whose body
	// can be replayed (no body, or GetBody set) are retried; before each
	// retry at most 4 KiB of the throttled response's body is drained and
	// the body closed. Retrying goes beyond the RoundTripper contract
	// (net/http asks a RoundTripper not to retry): it is off by default, and
	// the caller sees only the last response.
	MaxRetries int
}

// DefaultThrottled reports whether resp has status 429 Too Many Requests or
// 418 I'm a Teapot (Binance's IP ban).
func DefaultThrottled(resp *http.Response) bool {
	return resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusTeapot
}

// ThrottleHandler may be implemented by a Limiter that wants the throttled
// response itself rather than a PauseFor: a limiter of several rules and keys
// pauses only those the response is about. Transport then calls Throttled,
// instead of PauseFor, on every throttled response, with the Retry-After
// delay capped at MaxRetryAfter, or 0 when the response has none (the
// limiter picks a pause of its own).
type ThrottleHandler interface {
	Throttled(resp *http.Response, retryAfter time.Duration)
}

// ResponseObserver may be implemented by a Limiter that reads every
// response before the caller does, for usage headers such as Binance's
// X-MBX-USED-WEIGHT-1M. Transport calls ObserveResponse once per response
// received, while the request's units are still held.
type ResponseObserver interface {
	ObserveResponse(resp *http.Response)
}

// New returns a Transport that charges every request weight 1 on l and sends
// it through base (nil means http.DefaultTransport). A nil l means requests
// are not limited. New does not block.
func New(l Limiter, base http.RoundTripper) *Transport {
	return &Transport{
		Base: base,
		Select: func(*http.Request) (Limiter, int64) {
			return l, 1
		},
	}
}

// NewSelect returns a Transport that asks sel for each request's limiter and
// weight and sends requests through base (nil means http.DefaultTransport).
// It panics if sel is nil, which is a programming error.
func NewSelect(sel Selector, base http.RoundTripper) *Transport {
	if sel == nil {
		panic("httpclient: NewSelect with nil Selector")
	}
	return &Transport{Base: base, Select: sel}
}

// errNilSelect is returned by RoundTrip on a Transport without a Selector.
var errNilSelect = errors.New("httpclient: Transport.Select is nil; use New or NewSelect")

// RoundTrip implements [http.RoundTripper]. It is safe for concurrent use.
//
// It blocks until the selected limiter admits the request's weight or the
// request's context is done. If the weight is negative, Select is nil, or
// Acquire fails, RoundTrip closes req.Body, does not send the request and
// returns a nil response with an error; when the context ended the wait,
// errors.Is(err, context.Canceled) or errors.Is(err,
// context.DeadlineExceeded) holds. If Base fails, the weight is released at
// once and Base's error is returned as is.
//
// Otherwise the response is returned with a nil error whatever its status
// code, and the weight stays held until its Body is closed or read to io.EOF.
// Callers must close the body, as with any http.Response; a body that is
// never closed holds its permit forever. A nil or http.NoBody body releases
// at once (Body is then http.NoBody).
//
// If the response is throttled (Throttled; by default status 429 Too Many
// Requests or 418 I'm a Teapot) and the first Retry-After value parses with
// [ParseRetryAfter] to a positive delay, RoundTrip calls PauseFor on the
// request's limiter with that delay, capped at MaxRetryAfter, before
// returning (a [ThrottleHandler] gets the response instead, also without a
// Retry-After). Invalid values cause no pause. Other statuses, including
// 503, cause no pause. A [ResponseObserver] limiter sees every response
// first. The request is retried only when MaxRetries allows it.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		resp, throttled, err := t.roundTripOnce(req)
		if err != nil || attempt >= t.MaxRetries || !throttled || !replayable(req) {
			return resp, err
		}
		// Give the throttled response back (its release lets the pause,
		// already set, hold the retry) and send again with a fresh body.
		_, _ = io.CopyN(io.Discard, resp.Body, 4096)
		resp.Body.Close()
		if req, err = rewind(req); err != nil {
			return nil, err
		}
	}
}

func (t *Transport) throttled(resp *http.Response) bool {
	if t.Throttled != nil {
		return t.Throttled(resp)
	}
	return DefaultThrottled(resp)
}

// replayable reports whether req can be sent again: no body, or GetBody.
func replayable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// rewind returns a copy of req with a fresh body from GetBody; the caller's
// request is not modified.
func rewind(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, fmt.Errorf("httpclient: replaying the body of %s: %w", describe(req), err)
	}
	r := req.Clone(req.Context())
	r.Body = body
	return r, nil
}

// roundTripOnce sends req once and reports whether its response was
// throttled (decided once, before the body is handed to the caller).
func (t *Transport) roundTripOnce(req *http.Request) (*http.Response, bool, error) {
	if t.Select == nil {
		closeRequestBody(req)
		return nil, false, errNilSelect
	}
	l, n := t.Select(req)
	if n < 0 {
		closeRequestBody(req)
		return nil, false, fmt.Errorf("httpclient: Selector returned negative weight %d for %s", n, describe(req))
	}
	if l == nil {
		resp, err := send(t.base(), req)
		return resp, err == nil && t.throttled(resp), err
	}
	if err := l.Acquire(req.Context(), n); err != nil {
		// Base was never called, so the RoundTripper contract leaves closing
		// the body to us.
		closeRequestBody(req)
		return nil, false, fmt.Errorf("httpclient: waiting for limiter: %w", err)
	}
	return t.roundTripHeld(l, n, req)
}

// roundTripHeld sends req while n units of l are held and arranges their
// release.
func (t *Transport) roundTripHeld(l Limiter, n int64, req *http.Request) (*http.Response, bool, error) {
	// Until the body wrapper owns the release, every way out (Base error, no
	// body, or a panic in Base, Now or PauseFor) releases here; otherwise a
	// recovered panic would shrink the limiter for good.
	handedOff := false
	defer func() {
		if !handedOff {
			l.Release(n)
		}
	}()

	resp, err := send(t.base(), req)
	if err != nil {
		return nil, false, err
	}
	if o, ok := l.(ResponseObserver); ok {
		o.ObserveResponse(resp)
	}
	// Pause before anything is released: the slot we hold keeps the next
	// request from starting between the 429 and the pause.
	throttled := t.throttled(resp)
	if throttled {
		t.pause(l, resp)
	}
	if resp.Body == http.NoBody {
		return resp, throttled, nil
	}
	resp.Body = wrapBody(resp.Body, l, n)
	handedOff = true
	return resp, throttled, nil
}

// pause pauses l after a throttled response: until its Retry-After when it
// has a usable one (a ThrottleHandler is told either way).
// 503 also may carry Retry-After, but it signals an overloaded or down
// server rather than a client over its quota, so it does not pause the limit.
func (t *Transport) pause(l Limiter, resp *http.Response) {
	var d time.Duration
	if v := resp.Header.Get("Retry-After"); v != "" { // first value; nil Header is fine
		now := time.Now
		if t.Now != nil {
			now = t.Now
		}
		if parsed, err := ParseRetryAfter(v, now()); err == nil && parsed > 0 {
			maxDelay := t.MaxRetryAfter
			if maxDelay <= 0 {
				maxDelay = DefaultMaxRetryAfter
			}
			d = min(parsed, maxDelay)
		}
	}
	if h, ok := l.(ThrottleHandler); ok {
		h.Throttled(resp, d)
		return
	}
	if d > 0 {
		l.PauseFor(d)
	}
}

// CloseIdleConnections calls CloseIdleConnections on Base (http.DefaultTransport
// if Base is nil) if it has that method, so http.Client.CloseIdleConnections
// still reaches the connection pool. It does not touch the limiters. It is
// safe for concurrent use.
func (t *Transport) CloseIdleConnections() {
	type closeIdler interface{ CloseIdleConnections() }
	if ci, ok := t.base().(closeIdler); ok {
		ci.CloseIdleConnections()
	}
}

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

// send calls base and enforces the RoundTripper contract on its result, so
// callers of Transport never see a response with an error, nil with nil, or
// a nil Body, even from a faulty base.
func send(base http.RoundTripper, req *http.Request) (*http.Response, error) {
	resp, err := base.RoundTrip(req)
	if err != nil {
		if resp != nil && resp.Body != nil {
			resp.Body.Close()
		}
		return nil, err
	}
	if resp == nil {
		return nil, fmt.Errorf("httpclient: base RoundTripper returned nil response and nil error for %s", describe(req))
	}
	if resp.Body == nil {
		resp.Body = http.NoBody
	}
	return resp, nil
}

func closeRequestBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// describe names a request in error messages without leaking URL passwords.
func describe(req *http.Request) string {
	if req.URL == nil {
		return req.Method + " request"
	}
	return req.Method + " " + req.URL.Redacted()
}

var _ http.RoundTripper = (*Transport)(nil)
var _ io.ReadWriteCloser = readWriteBody{}
