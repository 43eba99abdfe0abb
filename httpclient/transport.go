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
// If the status is 429 Too Many Requests or 418 I'm a Teapot and the first
// Retry-After value parses with [ParseRetryAfter] to a positive delay,
// RoundTrip calls PauseFor on the request's limiter with that delay, capped
// at MaxRetryAfter, before returning. Invalid values cause no pause. Other
// statuses, including 503, cause no pause. The request is not retried.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.Select == nil {
		closeRequestBody(req)
		return nil, errNilSelect
	}
	l, n := t.Select(req)
	if n < 0 {
		closeRequestBody(req)
		return nil, fmt.Errorf("httpclient: Selector returned negative weight %d for %s", n, describe(req))
	}
	if l == nil {
		return send(t.base(), req)
	}
	if err := l.Acquire(req.Context(), n); err != nil {
		// Base was never called, so the RoundTripper contract leaves closing
		// the body to us.
		closeRequestBody(req)
		return nil, fmt.Errorf("httpclient: waiting for limiter: %w", err)
	}
	return t.roundTripHeld(l, n, req)
}

// roundTripHeld sends req while n units of l are held and arranges their
// release.
func (t *Transport) roundTripHeld(l Limiter, n int64, req *http.Request) (*http.Response, error) {
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
		return nil, err
	}
	// Pause before anything is released: the slot we hold keeps the next
	// request from starting between the 429 and the pause.
	t.pauseOn(l, resp)
	if resp.Body == http.NoBody {
		return resp, nil
	}
	resp.Body = wrapBody(resp.Body, l, n)
	handedOff = true
	return resp, nil
}

// pauseOn pauses l if resp is a 429 or 418 with a usable Retry-After.
// 503 also may carry Retry-After, but it signals an overloaded or down
// server rather than a client over its quota, so it does not pause the limit.
func (t *Transport) pauseOn(l Limiter, resp *http.Response) {
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusTeapot {
		return
	}
	v := resp.Header.Get("Retry-After") // first value; nil Header is fine
	if v == "" {
		return
	}
	now := time.Now
	if t.Now != nil {
		now = t.Now
	}
	d, err := ParseRetryAfter(v, now())
	if err != nil || d <= 0 {
		return
	}
	maxDelay := t.MaxRetryAfter
	if maxDelay <= 0 {
		maxDelay = DefaultMaxRetryAfter
	}
	l.PauseFor(min(d, maxDelay))
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
