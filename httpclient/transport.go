package httpclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/backoff"
	"github.com/ratesem/ratesem/internal/hold"
	"github.com/ratesem/ratesem/internal/obs"
	"github.com/ratesem/ratesem/internal/peek"
)

// Limiter is what [Transport] needs from a limiter. Weights n are in the
// limiter's units (usually requests, or an API's request weight).
// *semaphore.RateSemaphore from github.com/ratesem/ratesem/semaphore
// satisfies it. Implementations must be safe for concurrent use.
//
// The limiters NewPool builds also take the throttled response itself
// (to pause only the keys it is about) and read every response's usage
// headers, through two optional methods, Throttled and ObserveResponse,
// that Transport looks for on any Limiter; their contract is in this
// package's source (throttleHandler, responseObserver).
type Limiter interface {
	// Acquire blocks until n units are admitted or ctx is done. On failure
	// it returns an error (ctx.Err() when ctx is done, possibly wrapped) and
	// holds nothing.
	Acquire(ctx context.Context, n int64) error
	// Release gives back n units taken by a successful Acquire. Transport
	// calls it exactly once per successful Acquire, with the same n: on the
	// goroutine of RoundTrip or of the response body's Close or Read, or,
	// for a request that may still be on its way when RoundTrip fails, on
	// a timer's goroutine after a hold (see RoundTrip), where a panic of
	// Release is recovered and dropped.
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

// defaultMaxRetryAfter is the longest pause a Retry-After header can cause
// when [WithMaxRetryAfter] is not given (5 minutes), so that a hostile or
// broken server cannot park the client for hours.
const defaultMaxRetryAfter = backoff.DefaultMaxPause

// Transport is an [http.RoundTripper] that rate-limits requests through a
// [Limiter] chosen per request by a [Selector].
//
// For each request RoundTrip acquires the selected weight on the request's
// context, sends the request through the base RoundTripper ([WithBase]),
// and releases the weight exactly once: when the response body is closed
// or read to io.EOF, or at once if the base fails or the response has no
// body, except after a base error that may have left the request on its
// way to the server (see RoundTrip): then on a timer, after a hold. A throttled response (429 or 418, or what [WithThrottledBody]'s
// hook says) pauses the limiter, bounded and with jitter, whether or not it
// carries a usable Retry-After (see RoundTrip). Transport never reads a
// response body itself, except to drain at most 4 KiB of a throttled
// response it is about to retry; it sends a request again only when
// [WithMaxRetries] asks (never by default); it never follows redirects and
// never modifies the caller's request.
//
// A Selector reads a request body through Request.GetBody, never Body. For
// a request with a body but no GetBody (an io.MultiReader, a pipe, an
// io.NopCloser), Transport classifies and sends a clone whose GetBody reads
// the caller's body on its first call, once, into memory, up to
// 32 MiB (waiting at most until the request's context is
// done): the Selector sees the whole body and the base transport still
// gets the caller's bytes unchanged (the buffered ones, then the rest of
// the caller's body). GetBody fails for a longer body, a body whose read
// failed, or one already sent; a body whose Read panicked panics again in
// GetBody and Read, on their caller's goroutine; a body never asked for is
// streamed as it is, never buffered.
//
// Build one with [New], [NewSelect] or [NewPool]; its configuration cannot
// change afterwards. A Transport is safe for concurrent use by multiple
// goroutines: the state it keeps, the streak of throttles that sets the
// backoff and the retry budget ([WithRetryBudget]), is shared by all of its
// requests and guarded by mutexes; the times to a response it keeps per
// host (see RoundTrip) take no lock. It must
// not be copied after first use. The zero Transport has no Selector:
// RoundTrip returns an error for every request and sends none.
type Transport struct {
	sel Selector
	config

	// streak counts throttles in a row without a usable Retry-After; see
	// noteStreak. Guarded by mu, so a Transport stays safe for concurrent
	// use; the zero value is a fresh streak.
	mu        sync.Mutex
	streak    int       // throttles in a row (a wave counts once)
	lastPause time.Time // when the streak last grew (monotonic clock)

	// budget is the retry budget (WithRetryBudget), nil when retries are
	// off or the budget is; it has a lock of its own.
	budget *retryBudget

	// lats holds, per request host (URL.Host), the last times to a
	// response's headers, for the hold of a request without a response
	// (internal/hold).
	lats hold.ByKey
}

// latency returns the times to a response of req's host (hold.ByKey).
func (t *Transport) latency(req *http.Request) *hold.Latency {
	host := ""
	if req.URL != nil {
		host = req.URL.Host
	}
	return t.lats.For(host)
}

// peekSize is the most bytes of a response body that Transport keeps for
// the [WithThrottledBody] hook and a throttleHandler: the bytes the caller's
// own reads went through, never read ahead of the caller.
const peekSize = peek.Max // 512

// defaultThrottledBody reports whether status is 429 Too Many Requests or
// 418 I'm a Teapot (Binance's IP ban); it ignores h and body. It is the
// hook of a Transport built without [WithThrottledBody].
func defaultThrottledBody(status int, _ http.Header, _ []byte) bool {
	return status == http.StatusTooManyRequests || status == http.StatusTeapot
}

// throttleHandler may be implemented by a Limiter that wants the throttled
// response itself rather than a PauseFor: a limiter of several rules and keys
// pauses only those the response is about. Transport then calls Throttled,
// instead of PauseFor, on every throttled response, with the Retry-After
// delay capped ([WithMaxRetryAfter]), or 0 when the response has none (the
// limiter then backs off on its own). Calls come from the goroutines of
// RoundTrip and of the callers' body reads, concurrently: an implementation
// must be safe for concurrent use.
//
// Throttled is called once when the headers show the throttle (body nil).
// When the Transport looks at bodies (a [WithThrottledBody] hook is set, or the
// headers showed a throttle) it is called again, once the caller's reads
// went through the first peekSize bytes, io.EOF or Close, with those bytes,
// if they show a throttle: for a throttle the headers showed, only when
// the bytes are not empty, so that the limiter can pause more of its keys
// (such a second call must never shorten a pause the first one set); for a
// throttle only the body shows, that is the one call. Every call comes
// before the request's units are released. Throttled must not read
// resp.Body, must not block, and must not keep body.
type throttleHandler interface {
	Throttled(resp *http.Response, body []byte, retryAfter time.Duration)
}

// responseObserver may be implemented by a Limiter that reads every
// response before the caller does, for usage headers such as Binance's
// X-MBX-USED-WEIGHT-1M. Transport calls ObserveResponse once per response
// received, while the request's units are still held, on the goroutine of
// RoundTrip: concurrently for concurrent requests. It must not read
// resp.Body and must not block.
type responseObserver interface {
	ObserveResponse(resp *http.Response)
}

// New returns a Transport that charges every request weight 1 on l, set up
// by opts. A nil l means requests are not limited. New does not block.
func New(l Limiter, opts ...Option) *Transport {
	return build(func(*http.Request) (Limiter, int64) { return l, 1 }, opts)
}

// NewSelect returns a Transport that asks sel for each request's limiter and
// weight, set up by opts. It panics if sel is nil, which is a programming
// error. NewSelect does not block.
func NewSelect(sel Selector, opts ...Option) *Transport {
	if sel == nil {
		panic("ratesem: NewSelect with nil Selector")
	}
	return build(sel, opts)
}

// errNilSelect is returned by RoundTrip on a Transport without a Selector.
var errNilSelect = errors.New("ratesem: Transport has no Selector; build it with New, NewSelect or NewPool")

// RoundTrip implements [http.RoundTripper]. It is safe for concurrent use.
//
// It blocks until the selected limiter admits the request's weight or the
// request's context is done. If the weight is negative, the Transport has
// no Selector (the zero Transport), or Acquire fails, RoundTrip closes
// req.Body, does not send the request and returns a nil response with an
// error (if the Selector panics, req.Body is closed and the panic goes on); when the context ended the wait, errors.Is(err, context.Canceled)
// or errors.Is(err, context.DeadlineExceeded) holds. If the base
// RoundTripper fails, its error is returned as is and the weight is
// released at once, unless the request may still be on its way to the
// server, which would count it after its release: when the request's
// context is done, or the error is a context's error or a timeout from
// below the Transport (a base's own per-attempt context,
// http.Transport.ResponseHeaderTimeout). Then the weight is released on a
// timer (RoundTrip does not wait for it) twice the longest time to a
// response among the Transport's last 64 requests to the request's host
// (URL.Host; past 1024 hosts, a host is held 1 s) after RoundTrip's end
// (not its start: a request is written only once it has a connection,
// whose dial may take several round trips), 1 s before any, 10 s at most. A Limiter's Release that panics on that
// timer is recovered and dropped (there is no caller to give the panic to,
// and it would end the program), where one on any other release goes on
// to the caller.
//
// Otherwise the response is returned with a nil error whatever its status
// code, as soon as the base returns it (RoundTrip never reads the body), and the
// weight stays held until its Body is closed or read to io.EOF. Callers must
// close the body, as with any http.Response; a body that is never closed
// holds its permit forever. A nil or http.NoBody body releases at once (Body
// is then http.NoBody).
//
// A throttled response ([WithThrottledBody]; by default status 429 Too Many
// Requests or 418 I'm a Teapot) pauses the request's limiter before any of
// its units are released: when the headers show it, before RoundTrip
// returns; when only the body does, as the caller's reads reach 512
// bytes, io.EOF or Close. The pause is, when the first Retry-After value
// parses with [ParseRetryAfter] to a positive delay d, backoff.Spread(d,
// the cap of [WithMaxRetryAfter]): at least d (up to the cap) plus a little jitter so that
// clients throttled together do not resume at one instant; otherwise
// (Retry-After absent, 0, negative or invalid) capped exponential backoff
// with jitter: [WithBackoffStart], doubled for each further throttle in a row,
// never above the cap. The streak is per Transport: a throttle of a
// request sent before the streak last grew (the same wave of calls) does
// not grow it again, and a response not throttled, of a request sent after
// that, resets it. NewPool's limiter gets the response instead of PauseFor,
// with the Retry-After capped or 0, and pauses the keys the response is
// about; it also reads every response's usage headers first. Other
// statuses, including 503, cause no pause. The request is sent again only when
// [WithMaxRetries] is above 0, its headers showed the throttle, its body
// can be replayed and the retry budget allows it; see WithMaxRetries and
// [WithRetryBudget].
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	orig := req
	req = withReplayBody(req) // a body without GetBody: readable by the Selector
	for attempt := 0; ; attempt++ {
		resp, wait, retry, err := t.roundTripOnce(req)
		if resp != nil && req != orig && resp.Request == req {
			// The clone withReplayBody or rewind made is ours: the caller
			// sees its own request (and the clone, with a replayed body's
			// buffer, is not kept alive by the response).
			resp.Request = orig
		}
		if err != nil || wait <= 0 || !retry || attempt >= t.maxRetries || !replayable(req) {
			return resp, err
		}
		// Give the throttled response back (its release lets the pause,
		// already set, hold the retry), get the retry's fresh body, tell
		// the observer (it may panic), wait out the pause this response
		// caused, and send again.
		drainClose(resp.Body)
		// The retry's body is asked for first: a retry whose GetBody fails
		// is never sent, so it is not reported as Retried.
		next, err := rewind(req)
		if err != nil {
			return nil, err
		}
		var fresh io.Closer // next's body, ours until it is sent
		if next != req && next.Body != nil {
			fresh = next.Body
		}
		if t.observer != nil {
			t.observeRetried(ratesem.Event{Kind: ratesem.Retried, Attempt: attempt + 1, Wait: wait, Status: resp.StatusCode}, fresh)
		}
		// Sleep on the Transport's clock, or until the context is done.
		after := time.After // its timer is collected once it is unreachable
		if t.clk != nil {
			after = t.clk.After
		}
		select {
		case <-after(wait):
		case <-req.Context().Done():
			if fresh != nil {
				fresh.Close()
			}
			return nil, prefixed("waiting to retry "+describe(req), req.Context().Err())
		}
		req = next
	}
}

// observeRetried reports a Retried event; fresh (nil: none), the body of the
// retry not sent yet, is closed when the observer panics.
func (t *Transport) observeRetried(e ratesem.Event, fresh io.Closer) {
	done := false
	defer func() {
		if !done && fresh != nil {
			fresh.Close()
		}
	}()
	t.observer(e)
	done = true
}

// drainClose reads at most 4 KiB of a throttled response RoundTrip is
// about to retry and closes it, even when a hook that sees the body as it
// is read (WithThrottledBody, a Table's ThrottleTargets) panics: the
// response is RoundTrip's own, no caller could close it, and its close
// releases the request's units.
func drainClose(b io.ReadCloser) {
	defer b.Close()
	_, _ = io.CopyN(io.Discard, b, 4096)
}

// throttled reports whether a response is throttled, by the hook of
// WithThrottledBody or defaultThrottledBody.
func (t *Transport) throttled(status int, h http.Header, body []byte) bool {
	if t.throttledBody != nil {
		return t.throttledBody(status, h, body)
	}
	return defaultThrottledBody(status, h, body)
}

// replayable reports whether req can be sent again: no body, or GetBody
// (for a body without one, read whole by the Selector: withReplayBody).
func replayable(req *http.Request) bool {
	if b, ok := req.Body.(*replayBody); ok {
		return b.whole()
	}
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
		return nil, prefixed("replaying the body of "+describe(req), err)
	}
	r := req.Clone(req.Context())
	r.Body, r.Trailer = body, req.Trailer // the caller's map (withReplayBody)
	return r, nil
}

// roundTripOnce sends req once. When the headers show a throttle it returns
// the pause that throttle calls for (> 0), which a retry waits out, and
// whether the retry budget allows that retry (retry is true otherwise).
func (t *Transport) roundTripOnce(req *http.Request) (_ *http.Response, _ time.Duration, retry bool, _ error) {
	// Until req goes to the base, every way out (no Selector, a negative
	// weight, a failed Acquire, a panic of the Selector or of an observer)
	// closes req.Body: the RoundTripper contract has RoundTrip close it, and
	// a replayed body's read in flight (withReplayBody) ends only with
	// Close. While units are held and the body wrapper does not own their
	// release yet, every way out (a base error, no body, or a panic in the
	// base, the clock, a hook, an observer or PauseFor) releases them;
	// otherwise a recovered panic would shrink the limiter for good.
	var l Limiter
	var n int64
	var start time.Time
	toBase, held, answered := false, false, true
	defer func() {
		if !toBase && req.Body != nil {
			req.Body.Close()
		}
		if held {
			if answered {
				l.Release(n)
			} else {
				// No response, and the caller's context is done: the
				// request may still be on its way to the server, which
				// would count it after its end (internal/hold).
				t.latency(req).Release(false, func() { l.Release(n) })
			}
		}
	}()
	if t.sel == nil {
		return nil, 0, false, errNilSelect
	}
	if l, n = t.sel(req); n < 0 {
		err := fmt.Errorf("%w %d from the Selector for %s", ratesem.ErrNegativeWeight, n, describe(req))
		t.observeFailed(n, time.Time{}, err)
		return nil, 0, false, err
	}
	if l != nil { // nil: the request is not limited
		var since time.Time
		if t.observer != nil {
			since = time.Now()
		}
		if err := l.Acquire(req.Context(), n); err != nil {
			t.observeFailed(n, since, err)
			return nil, 0, false, prefixed(describe(req)+" not sent", err)
		}
		held, start = true, time.Now()
		if t.observer != nil {
			t.observer(ratesem.Event{Kind: ratesem.Admitted, Weight: n, Wait: time.Since(since)})
		}
	}

	toBase = true
	sent := time.Now()
	resp, err := send(t.baseRT(), req)
	if err != nil {
		answered = !mayBeOnItsWay(req, err)
		return nil, 0, false, err
	}
	if held {
		t.latency(req).Add(time.Since(start))
	}
	headerThrottled := t.throttled(resp.StatusCode, resp.Header, nil)
	_, handler := l.(throttleHandler)
	// The body is looked at only when it can change something: a hook that
	// reads it, or a handler that refines which keys a throttle is about;
	// and only under a limiter, whose units it holds.
	watch := l != nil && (t.throttledBody != nil || (headerThrottled && handler))
	// The budget first: the observer of the usage headers (a Rule's
	// Usage), the limiter's handler and the Transport's observer run
	// next and may panic, and the response counts whatever they do.
	retry = true
	if headerThrottled {
		retry = t.budgetNote(l, resp.StatusCode, true)
	} else if !watch {
		t.budgetNote(l, resp.StatusCode, false)
	}
	if o, ok := l.(responseObserver); ok {
		o.ObserveResponse(resp)
	}
	// Pause before anything is released: the slot we hold keeps the next
	// request from starting between the 429 and the pause.
	var wait time.Duration
	if headerThrottled {
		wait = t.pause(l, resp, nil, sent)
	} else if !watch {
		t.noteStreak(sent, false)
	}
	if l == nil {
		return resp, wait, retry, nil
	}
	var settle func([]byte, bool)
	if s, ok := l.(responseSettler); ok && s.wantsBody() {
		// Settling needs the body read to its end (the usage of an LLM
		// reply comes last): a body closed before io.EOF is reported as
		// Unsettled when what was read did not settle it. A 101's body (an
		// io.Writer: the connection) counts as read.
		_, rw := resp.Body.(io.Writer)
		settle = func(body []byte, eof bool) {
			if s.settleResponse(resp.Header, body, eof || rw) && t.observer != nil {
				t.observer(ratesem.Event{Kind: ratesem.Unsettled, Weight: n})
			}
		}
	}
	var check func([]byte)
	if watch {
		check = func(prefix []byte) { t.bodySeen(l, resp, prefix, headerThrottled, sent) }
	}
	body := wrapBody(resp.Body, l, n, check, settle)
	held = false // the body wrapper releases
	if resp.Body == http.NoBody {
		// Read at once to its io.EOF: the check, the settlement and the
		// release happen now, and the caller gets http.NoBody.
		_, _ = body.Read(nil)
	} else {
		resp.Body = body
	}
	return resp, wait, retry, nil
}

// bodySeen runs the body check of a response once its first bytes (up to
// peekSize) went through the caller's reads, before the units are released:
// a throttle the body shows pauses l (a throttleHandler is told again even
// when the headers already showed it, so that it can pause more keys).
func (t *Transport) bodySeen(l Limiter, resp *http.Response, prefix []byte, headerThrottled bool, sent time.Time) {
	if !t.throttled(resp.StatusCode, resp.Header, prefix) {
		if !headerThrottled {
			t.noteStreak(sent, false)
			t.budgetNote(l, resp.StatusCode, false)
		}
		return
	}
	if headerThrottled {
		// The pause is set; only a handler can learn more from the body
		// (which of its keys the throttle is about). The streak moved at
		// the headers already. An empty prefix (the body closed unread, or
		// empty) says nothing new, so the handler is not told twice.
		if h, ok := l.(throttleHandler); ok && len(prefix) > 0 {
			h.Throttled(resp, prefix, t.retryAfter(resp))
		}
		return
	}
	t.budgetNote(l, resp.StatusCode, true) // no retry follows, but the throttle spends (before the pause's callbacks, which may panic)
	t.pause(l, resp, prefix, sent)
}

// pause pauses l (nil: none) after a throttled response, reports it to the
// observer (Source: the body, for a throttle only the body showed, when
// body is not nil; else the Retry-After or the backoff), and returns the
// pause it set (for a throttleHandler: the pause a retry should wait).
// 503 also may carry Retry-After, but it signals an overloaded or down
// server rather than a client over its quota, so it does not pause the limit.
func (t *Transport) pause(l Limiter, resp *http.Response, body []byte, sent time.Time) time.Duration {
	ra, d := t.delays(resp, sent)
	if h, ok := l.(throttleHandler); ok {
		h.Throttled(resp, body, ra)
	} else if l != nil {
		l.PauseFor(d)
	}
	if t.observer != nil {
		src := ratesem.SourceBackoff
		switch {
		case body != nil: // a throttle only the body showed
			src = ratesem.SourceBody
		case ra > 0:
			src = ratesem.SourceRetryAfter
		}
		t.observer(ratesem.Event{Kind: ratesem.Throttled, Status: resp.StatusCode, Pause: d, Source: src})
	}
	return d
}

// observeFailed reports an Acquire of n units begun at since (zero: never
// begun) that failed with err.
func (t *Transport) observeFailed(n int64, since time.Time, err error) {
	if t.observer == nil {
		return
	}
	e := ratesem.Event{Kind: obs.FailKind(err), Weight: n, Err: err}
	if !since.IsZero() {
		e.Wait = time.Since(since)
	}
	t.observer(e)
}

// delays returns, for a throttled response of a request sent at sent, the
// server's usable Retry-After capped at maxRetryAfter (0 when it has none)
// and the pause to take: backoff.Spread of that delay, or, without one,
// backoff.Exp of the Transport's streak. Both are within the cap and the
// pause is positive.
func (t *Transport) delays(resp *http.Response, sent time.Time) (retryAfter, pause time.Duration) {
	maxDelay := backoff.Cap(t.maxRetryAfter)
	if ra := t.retryAfter(resp); ra > 0 {
		return ra, max(backoff.Spread(ra, maxDelay), 1)
	}
	return 0, max(backoff.Exp(t.noteStreak(sent, true), t.backoffStart, maxDelay), 1)
}

// retryAfter returns the response's first Retry-After value as a delay
// capped at maxRetryAfter, or 0 when it is absent, not positive or does not
// parse.
func (t *Transport) retryAfter(resp *http.Response) time.Duration {
	v := resp.Header.Get("Retry-After") // first value; nil Header is fine
	if v == "" {
		return 0
	}
	now := time.Now()
	if t.clk != nil {
		now = t.clk.Now()
	}
	if d, err := ParseRetryAfter(v, now); err == nil && d > 0 {
		return min(d, backoff.Cap(t.maxRetryAfter))
	}
	return 0
}

// noteStreak notes a response of a request sent at sent, throttled (without
// a usable Retry-After) or not, and returns the throttle's place in the
// streak (0 for the first). A request sent before the streak last grew
// belongs to the wave that grew it and changes nothing, so the calls in
// flight when a server starts rejecting count once, not once each; a
// throttle of a later request grows the streak, and a response not
// throttled of a later request ends it.
func (t *Transport) noteStreak(sent time.Time, throttled bool) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if wave := t.streak > 0 && sent.Before(t.lastPause); !wave && throttled {
		t.streak++
		t.lastPause = time.Now()
	} else if !wave {
		t.streak = 0
	}
	return max(t.streak-1, 0)
}

// CloseIdleConnections calls CloseIdleConnections on the base RoundTripper
// ([WithBase]; http.DefaultTransport by default) if it has that method, so
// http.Client.CloseIdleConnections still reaches the connection pool. It does
// not touch the limiters. It is safe for concurrent use.
func (t *Transport) CloseIdleConnections() {
	type closeIdler interface{ CloseIdleConnections() }
	if ci, ok := t.baseRT().(closeIdler); ok {
		ci.CloseIdleConnections()
	}
}

func (t *Transport) baseRT() http.RoundTripper {
	if t.base != nil {
		return t.base
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
		return nil, fmt.Errorf("ratesem: base RoundTripper returned nil response and nil error for %s", describe(req))
	}
	if resp.Body == nil {
		resp.Body = http.NoBody
	}
	return resp, nil
}

// mayBeOnItsWay reports whether the base's err, which came without a
// response, may have left req on its way to the server, to arrive after
// the request's end (internal/hold): the request's context is done (a
// cancel, a deadline, http.Client.Timeout), or err is a timeout or a
// context's error from below the Transport (a base's own per-attempt
// context, http.Transport.ResponseHeaderTimeout) while the caller's
// context is live. Other errors (a refused or reset connection, a body
// whose Read failed, a base's own error) are taken as the end of a
// request the server read or never got. http.Client.Timeout, with a
// Transport it does not know (this one), both sets a context deadline and
// closes the deprecated Request.Cancel at that deadline, and the base may
// see the close first: a closed Cancel, or a deadline passed, counts too.
func mayBeOnItsWay(req *http.Request, err error) bool {
	if req.Context().Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if d, ok := req.Context().Deadline(); ok && !time.Now().Before(d) {
		return true
	}
	// Request.Cancel is deprecated, but http.Client closes it for its Timeout.
	if req.Cancel != nil {
		select {
		case <-req.Cancel:
			return true
		default:
		}
	}
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

// describe names a request in error messages without leaking URL passwords.
func describe(req *http.Request) string {
	if req.URL == nil {
		return req.Method + " request"
	}
	return req.Method + " " + req.URL.Redacted()
}

// notSentError is an error of RoundTrip that wraps another (the limiter's
// that did not admit a request, a GetBody's, a context's), told what
// failed, with one "ratesem: " prefix whether or not the wrapped message
// has its own.
type notSentError struct {
	msg string
	err error
}

// Error returns the message: what was not sent, and why.
func (e *notSentError) Error() string { return e.msg }

// Unwrap returns the cause, for errors.Is and errors.As.
func (e *notSentError) Unwrap() error { return e.err }

// prefixed returns "ratesem: what: " and err's message, with err's own
// "ratesem: " dropped (a user's GetBody or limiter may return one of this
// module's errors); it matches err (errors.Is, errors.As).
func prefixed(what string, err error) error {
	return &notSentError{"ratesem: " + what + ": " + strings.TrimPrefix(err.Error(), "ratesem: "), err}
}

var _ http.RoundTripper = (*Transport)(nil)
var _ io.ReadWriteCloser = readWriteBody{}
