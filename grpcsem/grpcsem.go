package grpcsem

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/internal/hold"
)

// PushbackKey is the trailer in which a gRPC server tells a client how long
// to wait before it tries again, in milliseconds (gRPC proposal A6, "Retry
// Pushback", https://github.com/grpc/proposal/blob/master/A6-client-retries.md).
const PushbackKey = "grpc-retry-pushback-ms"

// DefaultMaxPushback is the longest pause one throttled RPC's pushback can
// cause when WithMaxPushback is not given: 5 minutes, the Pool's own
// default cap (clientpool.WithMaxPause), so that a hostile server cannot
// park the client for longer.
const DefaultMaxPushback = 5 * time.Minute

// maxPushbackBytes is the longest pushback value ParsePushback reads: a
// longer one is not a number a server means (int32 milliseconds, as gRPC's
// proposal A6 has it, is 10 digits) and is rejected on its length.
const maxPushbackBytes = 32

// maxThrottleBody is the most bytes of a status message handed to
// Table.ThrottleTargets as the throttle's Body.
const maxThrottleBody = 512

// Option configures UnaryClientInterceptor and StreamClientInterceptor,
// applied in order when the interceptor is made (a later option of a kind
// wins; a nil Option is ignored).
type Option func(*config)

type config struct {
	throttle    func(*status.Status, metadata.MD) bool
	maxPushback time.Duration
	charges     func(ctx context.Context, method string, msg any) ([]clientpool.Charge, error)
}

// WithThrottle sets the test that decides whether a failed RPC was
// rejected by the server for its rate, and so pauses the keys it charged
// (clientpool.Pool.Throttled). fn gets the RPC's status (never OK) and its
// trailer (nil or empty when there was none, as for an RPC that never
// reached the server); it must be safe for concurrent use and should not
// block: it runs on the RPC's goroutine, after the RPC and before its
// charges are released. A fn that panics does not leak the charges: they
// are released and the panic goes on to the caller of the RPC (Invoke,
// RecvMsg). A nil fn means the default, DefaultThrottle.
func WithThrottle(fn func(st *status.Status, trailer metadata.MD) bool) Option {
	return func(c *config) { c.throttle = fn }
}

// WithMaxPushback caps the pause one throttled RPC's pushback trailer can
// ask for (the Pool caps it too, at clientpool.WithMaxPause, and adds its
// jitter). d ≤ 0 means DefaultMaxPushback.
func WithMaxPushback(d time.Duration) Option {
	return func(c *config) { c.maxPushback = d }
}

// WithCharges replaces the Table's classification (clientpool.Pool.Classify
// of Request) with fn: the charges of an RPC to the full method name method
// ("/pkg.Service/Method") with the caller's context (outgoing metadata
// included) and, for a unary RPC, its request message (nil for a stream).
// fn must be safe for concurrent use; an error it returns fails the RPC
// before it starts, as an error whose gRPC code is Internal that wraps it
// (errors.Is sees it), and a panic goes on to the caller holding nothing.
// It runs on the RPC's goroutine before the RPC waits for the Pool: the
// RPC's context bounds that wait, not fn, which should honour ctx itself
// if it can block (as should a Rule.Key of the Table's). A nil fn means the
// Table's.
func WithCharges(fn func(ctx context.Context, method string, msg any) ([]clientpool.Charge, error)) Option {
	return func(c *config) { c.charges = fn }
}

// DefaultThrottle is the throttle test of the interceptors (WithThrottle).
// RESOURCE_EXHAUSTED is a throttle: gRPC's code for "out of quota", the 429
// of HTTP (https://grpc.io/docs/guides/status-codes/). UNAVAILABLE is one
// only when something says the rate is the cause:
//
//   - its trailer carries PushbackKey, whatever its value: a server that
//     sheds load and says so;
//   - its trailer carries x-envoy-ratelimited, the header Envoy's rate
//     limit filters set on what they reject, which they send to a gRPC
//     client as UNAVAILABLE unless rate_limited_as_resource_exhausted is
//     set
//     (https://www.envoyproxy.io/docs/envoy/latest/configuration/http/http_filters/rate_limit_filter);
//   - its message is grpc-go's for a plain HTTP 429 from a proxy that does
//     not speak gRPC ("unexpected HTTP status code received from server:
//     429"): gRPC maps HTTP 429 to UNAVAILABLE
//     (https://github.com/grpc/grpc/blob/master/doc/http-grpc-status-mapping.md).
//
// UNAVAILABLE alone is not: it is what a client sees for a connection
// refused or lost, a GOAWAY, a server shutting down, where pausing every key
// the RPC charged would slow the client for no rate of its own; the
// interceptors report it to the Pool as an overload instead
// (clientpool.Pool.Overloaded, what package httpclient does with a 503):
// no pause, and no success that raises an adaptive level (Rule.Adapt).
// No other code is a throttle. It never blocks and is safe for concurrent use.
func DefaultThrottle(st *status.Status, trailer metadata.MD) bool {
	switch st.Code() {
	case codes.ResourceExhausted:
		return true
	case codes.Unavailable:
		return len(trailer.Get(PushbackKey)) > 0 || len(trailer.Get("x-envoy-ratelimited")) > 0 ||
			strings.Contains(st.Message(), http429)
	}
	return false
}

// http429 is how grpc-go's status message for a non-gRPC HTTP response
// starts when its status is 429 (internal/transport, operateHeaders).
const http429 = "unexpected HTTP status code received from server: 429 "

// ParsePushback reads the values of a PushbackKey trailer and returns the
// delay the server asks for and true, or 0 and false when it asks for none
// that can be used. Usable is exactly one value (as grpc-go's own retry
// reads it: several values are ambiguous, and ignored) made of ASCII
// digits only, with surrounding spaces and tabs trimmed, at most 32 bytes:
// a negative value ("-1" means "do not retry" in gRPC's proposal A6), a
// sign, a fraction, text, an empty or a longer value is not. A number too
// large for a time.Duration saturates at the largest one; callers cap it
// (the interceptors at WithMaxPushback). "0" gives 0 and true: no delay.
// Its cost is linear in the length of the one value, at most 32 bytes read,
// and it does not allocate. It is safe for concurrent use.
func ParsePushback(values []string) (time.Duration, bool) {
	if len(values) != 1 {
		return 0, false
	}
	v := values[0]
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	if v == "" || len(v) > maxPushbackBytes {
		return 0, false
	}
	const most = int64(1<<63-1) / int64(time.Millisecond)
	var ms int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if ms <= most {
			ms = ms*10 + int64(c-'0')
		}
	}
	if ms > most {
		return time.Duration(1<<63 - 1), true
	}
	return time.Duration(ms) * time.Millisecond, true
}

// msgKey is the context key of a unary RPC's request message on a Request.
type msgKey struct{}

// Request returns the HTTP request an RPC is classified as by
// clientpool.Pool.Classify: method POST, URL path the full method name
// ("/pkg.Service/Method"), Host and URL.Host target (the ClientConn's
// target, "" when unknown), Header the outgoing metadata of ctx (keys in
// canonical form: metadata "x-account" is Header.Get("X-Account")), no
// body, and the context ctx carrying msg (see Message). The interceptors
// call it; it is exported so that a Table can be tested against the RPCs
// it prices. It never blocks and is safe for concurrent use.
func Request(ctx context.Context, target, method string, msg any) *http.Request {
	md, _ := metadata.FromOutgoingContext(ctx)
	if msg != nil {
		ctx = context.WithValue(ctx, msgKey{}, msg)
	}
	r := &http.Request{
		Method:     http.MethodPost,
		URL:        &url.URL{Scheme: "http", Host: target, Path: method},
		Proto:      "HTTP/2.0",
		ProtoMajor: 2,
		Header:     header(md),
		Host:       target,
	}
	return r.WithContext(ctx)
}

// Message returns the request message of the unary RPC that req (from
// Request) stands for, or nil for a stream, whose messages come later.
// A Weight function reads it to price an RPC by its content; it must treat
// the message as read-only. It never blocks and is safe for concurrent use.
func Message(req *http.Request) any {
	return req.Context().Value(msgKey{})
}

// header returns md as an http.Header, keys in canonical form.
func header(md metadata.MD) http.Header {
	h := make(http.Header, len(md))
	for k, vs := range md {
		k = textproto.CanonicalMIMEHeaderKey(k)
		h[k] = append(h[k], vs...)
	}
	return h
}

// limiter is what an interceptor keeps.
type limiter struct {
	pool *clientpool.Pool
	cfg  config
	lat  *hold.ByKey // per target, shared by every interceptor of pool (poolLatencies)
}

// poolLatencies maps a weak pointer to a Pool to the times to a first
// reply per target (ClientConn.Target) its interceptors share, for the
// hold of RPCs without one, so that a unary RPC's reply teaches the hold
// of a stream to the same target; an entry goes when its Pool is
// collected.
var poolLatencies sync.Map // weak.Pointer[clientpool.Pool] -> *hold.ByKey

// latency returns the times to a first reply of target (hold.ByKey).
func (l *limiter) latency(target string) *hold.Latency { return l.lat.For(target) }

func newLimiter(p *clientpool.Pool, opts []Option) *limiter {
	if p == nil {
		panic("grpcsem: nil *clientpool.Pool")
	}
	l := &limiter{pool: p}
	key := weak.Make(p)
	v, loaded := poolLatencies.LoadOrStore(key, new(hold.ByKey))
	if !loaded {
		runtime.AddCleanup(p, func(k weak.Pointer[clientpool.Pool]) { poolLatencies.Delete(k) }, key)
	}
	l.lat = v.(*hold.ByKey)
	for _, o := range opts {
		if o != nil {
			o(&l.cfg)
		}
	}
	if l.cfg.throttle == nil {
		l.cfg.throttle = DefaultThrottle
	}
	if l.cfg.maxPushback <= 0 {
		l.cfg.maxPushback = DefaultMaxPushback
	}
	return l
}

// acquire classifies an RPC and acquires its charges, returning the
// ticket or an error with the gRPC code that fits (see acquireError).
func (l *limiter) acquire(ctx context.Context, target, method string, msg any) (*clientpool.Ticket, error) {
	var charges []clientpool.Charge
	var err error
	if l.cfg.charges != nil {
		charges, err = l.cfg.charges(ctx, method, msg)
	} else {
		charges, err = l.pool.Classify(Request(ctx, target, method, msg))
	}
	if err != nil {
		return nil, &limitError{err: err, code: codes.Internal}
	}
	t, err := l.pool.Acquire(ctx, charges...)
	if err != nil {
		return nil, acquireError(err)
	}
	return t, nil
}

// throttled pauses the keys of the ticket t's charges, and cuts the level
// of its adaptive rules (Rule.Adapt), when err, an RPC's error with
// trailer, is a throttle by the configured test; an UNAVAILABLE that is not
// one only cuts (Pool.Overloaded). t is not released yet.
// An acquisition error of a grpcsem interceptor chained below this one (its
// own queue's RESOURCE_EXHAUSTED) never reached a server: never a throttle.
func (l *limiter) throttled(err error, trailer metadata.MD, t *clientpool.Ticket) {
	if le := (*limitError)(nil); errors.As(err, &le) {
		return
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() == codes.OK {
		return
	}
	if !l.cfg.throttle(st, trailer) {
		if st.Code() == codes.Unavailable {
			// gRPC's 503 (and grpc-go's reading of a proxy's HTTP 503):
			// an overloaded or unreachable server, as httpclient takes a
			// 503. It pauses nothing, and it is no success that raises
			// an adaptive level.
			l.pool.Overloaded(clientpool.Throttle{Status: http.StatusServiceUnavailable, Header: header(trailer)}, t)
		}
		return
	}
	th := clientpool.Throttle{Status: http.StatusTooManyRequests, Header: header(trailer), RetryAfter: l.retryAfter(trailer)}
	if m := st.Message(); m != "" {
		th.Body = []byte(m[:min(len(m), maxThrottleBody)])
	}
	l.pool.ThrottledTicket(th, t)
}

// retryAfter returns the delay a throttled RPC's trailer asks for, capped
// at maxPushback: its PushbackKey value when usable (ParsePushback), else
// its first retry-after value (what an HTTP proxy's 429 may carry through
// to a trailers-only response; httpclient.ParseRetryAfter), else 0 (the
// Pool backs off on its own).
func (l *limiter) retryAfter(trailer metadata.MD) time.Duration {
	if d, ok := ParsePushback(trailer.Get(PushbackKey)); ok {
		return min(d, l.cfg.maxPushback)
	}
	if v := trailer.Get("retry-after"); len(v) > 0 {
		if d, err := httpclient.ParseRetryAfter(v[0], time.Now()); err == nil {
			return min(d, l.cfg.maxPushback)
		}
	}
	return 0
}

// UnaryClientInterceptor returns an interceptor that acquires the charges
// of each unary RPC from p before the RPC (blocking until p admits them or
// the RPC's context is done), and releases them when the invoker returns
// (for an RPC cancelled before any reply, after a hold: see the package
// doc, "What an interceptor cannot see"; the caller never waits for it).
// When the RPC fails with a status the throttle test accepts
// (DefaultThrottle, or WithThrottle's) it calls p.Throttled with status 429
// semantics and, as RetryAfter, the PushbackKey trailer's delay
// (ParsePushback), or without a usable one the trailer's retry-after
// (httpclient.ParseRetryAfter), capped by WithMaxPushback; without either
// (or a zero delay) the Pool backs off exponentially. The refusal of a
// grpcsem interceptor chained below it (its own queue's
// RESOURCE_EXHAUSTED) is never a throttle: no server saw it. An
// UNAVAILABLE that is not a throttle goes to p.Overloaded (no pause; a cut
// of adaptive levels). It does so before
// releasing; with the Pool's adaptive limits that call is also what feeds
// them. It adds grpc.Header and grpc.Trailer call options to read the
// header (for the time to a first reply) and the trailer; a caller's own
// still get them. The RPC's context carries its priority and queue-wait
// budget to the Pool (ratesem.WithPriority, ratesem.WithQueueWait).
//
// When the charges cannot be acquired the RPC is not sent and the error
// has a gRPC code (status.Code) and wraps the Pool's error (errors.Is sees
// context.Canceled, context.DeadlineExceeded and ratesem's sentinels, such
// as ratesem.ErrQueueFull): Canceled for a cancelled context;
// DeadlineExceeded for a deadline passed or known to pass before admission
// (ratesem.ErrDeadline); ResourceExhausted for ratesem.ErrQueueFull,
// ratesem.ErrQueueTimeout and ratesem.ErrTooManyKeys; Unavailable for
// ratesem.ErrUnavailable and ratesem.ErrClosed (Redis mode); Internal
// otherwise (an RPC that matches no endpoint, an unknown rule, a weight
// too large). It panics if p is nil. The interceptor is safe for concurrent
// use.
func UnaryClientInterceptor(p *clientpool.Pool, opts ...Option) grpc.UnaryClientInterceptor {
	l := newLimiter(p, opts)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		t, err := l.acquire(ctx, target(cc), method, req)
		if err != nil {
			return err
		}
		start, answered := time.Now(), true // a panicking invoker: released at once
		lat := l.latency(target(cc))
		defer func() { lat.Release(answered, t.Release) }()
		var header, trailer metadata.MD
		all := make([]grpc.CallOption, len(callOpts), len(callOpts)+2)
		copy(all, callOpts)
		err = invoker(ctx, method, req, reply, cc, append(all, grpc.Header(&header), grpc.Trailer(&trailer))...)
		// A time to a first reply is taken from a reply or a header only:
		// an error without one may be grpc-go's own, at once (a connection
		// in TRANSIENT_FAILURE), which would shrink the hold to nothing.
		if answered = !noReply(ctx, err); answered && (err == nil || header != nil) {
			lat.Add(time.Since(start))
		}
		if err != nil {
			l.throttled(err, trailer, t)
		}
		return err
	}
}

// StreamClientInterceptor returns an interceptor that acquires the charges
// of each streaming RPC from p before the stream is created (blocking as
// UnaryClientInterceptor does, with its errors), and releases them exactly
// once when the stream ends, whichever way (see the package doc, "When an
// RPC ends"; one that ends without any reply is released after a hold, on
// a timer, as a unary RPC is): its permit is held for the stream's whole life. A stream
// that ends with a status the throttle test accepts pauses its keys as a
// unary RPC does, reading the trailer (ClientStream.Trailer) once RecvMsg
// has returned the error. The RPC runs under a context derived from the
// caller's, cancelled when the stream ends or is dropped unreleased. It
// panics if p is nil. A streamer that returns neither a stream nor an error
// (a bug of an interceptor chained below) fails the RPC with Internal,
// holding nothing. The interceptor is safe for concurrent use; the
// stream it returns is used as grpc-go's is (one goroutine may send and
// one receive at a time).
func StreamClientInterceptor(p *clientpool.Pool, opts ...Option) grpc.StreamClientInterceptor {
	l := newLimiter(p, opts)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
		t, err := l.acquire(ctx, target(cc), method, nil)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithCancel(ctx)
		c := &call{l: l, lat: l.latency(target(cc)), ticket: t, ctx: ctx, cancel: cancel, start: time.Now(), oneReply: desc != nil && !desc.ServerStreams}
		cs, err := func() (cs grpc.ClientStream, err error) {
			defer func() {
				if cs == nil || err != nil {
					// err, or a panic in streamer: no stream, no charges.
					// The error is the client's (no server has answered
					// yet): not a throttle. Released at once: grpc-go
					// sent nothing of an RPC it returned no stream for.
					c.answered.Store(true)
					c.end(nil, nil, true)
				}
			}()
			all := make([]grpc.CallOption, len(callOpts), len(callOpts)+1)
			copy(all, callOpts)
			return streamer(ctx, desc, cc, method, append(all, grpc.OnFinish(c.finish))...)
		}()
		if err != nil {
			return nil, err
		}
		if cs == nil {
			// A streamer below (another interceptor's bug) gave neither a
			// stream nor an error: fail the RPC rather than hand the caller
			// a stream that panics on first use. Released above.
			return nil, status.Error(codes.Internal, "grpcsem: the streamer returned neither a stream nor an error")
		}
		c.stop = context.AfterFunc(ctx, func() { c.end(nil, nil, false) })
		if c.returned.Store(true); c.closedEarly.Load() {
			c.end(nil, nil, false) // the ClientConn closed while the stream was made
		}
		s := &stream{ClientStream: cs, c: c}
		runtime.AddCleanup(s, func(cancel context.CancelFunc) { cancel() }, cancel)
		return s, nil
	}
}

// target returns cc's target, or "" for a nil cc (a test calling an
// interceptor directly).
func target(cc *grpc.ClientConn) string {
	if cc == nil {
		return ""
	}
	return cc.Target()
}

// call is one stream's hold on its charges.
type call struct {
	l        *limiter
	lat      *hold.Latency // the times to a first reply of the RPC's target
	ticket   *clientpool.Ticket
	ctx      context.Context // the RPC's: done when the caller cancelled it (or dropped the stream)
	cancel   context.CancelFunc
	start    time.Time   // when the charges were acquired
	stop     func() bool // stops the context watcher; set before the stream is returned
	oneReply bool        // the server sends one message: RecvMsg's nil ends the RPC
	done     atomic.Bool
	answered atomic.Bool // the server has sent something: it read the RPC
	// returned: streamer returned a stream; closedEarly: finish saw the
	// ClientConn closing before that (a failed streamer is released by
	// the interceptor itself, at once: nothing was sent).
	returned, closedEarly atomic.Bool
}

// answer notes that the server has sent something (a message, a header
// or a status), once, adding the time it took to the interceptor's
// latencies.
func (c *call) answer() {
	if c.answered.CompareAndSwap(false, true) {
		c.lat.Add(time.Since(c.start))
	}
}

// connClosing is the message of grpc-go's status for the RPCs of a
// ClientConn that is being closed (grpc.ErrClientConnClosing, deprecated
// for users in favour of its code, Canceled, which alone does not tell it
// from a cancel). TestGrevConnCloseReleases guards it.
const connClosing = "grpc: the client connection is closing"

// finish is the stream's grpc.OnFinish: grpc-go finished a stream of the
// call, whichever way, on the caller's goroutine or on its own. When the
// ClientConn is being closed (the RPC is over, and no server's status is
// to come) it releases the charges. Other finishes are left to the
// stream's own methods and its context: an interceptor chained below may
// open several streams for one RPC (one that retries, and whose Header
// or Context are those of its current attempt), and only what reaches
// the caller ends it.
func (c *call) finish(err error) {
	if st, ok := status.FromError(err); ok && st.Code() == codes.Canceled && st.Message() == connClosing {
		if !c.returned.Load() {
			// Inside streamer: the interceptor ends the call when it
			// returns (at once when it fails, as nothing was sent).
			if c.closedEarly.Store(true); !c.returned.Load() {
				return
			}
		}
		c.end(nil, nil, false)
	}
}

// end releases the call's charges, once: the first call wins and later ones
// do nothing. With err, the status the server ended the RPC with, and a
// trailer function, it first pauses the keys when err is a throttle.
// caller says end runs on the stream's user's goroutine (not the context
// watcher's, nor grpc-go's in finish), which stops the watcher.
func (c *call) end(err error, trailer func() metadata.MD, caller bool) {
	if !c.done.CompareAndSwap(false, true) {
		return
	}
	if caller && c.stop != nil {
		c.stop()
	}
	defer c.cancel() // after the release: the RPC is over, free its context
	defer func() { c.lat.Release(c.answered.Load(), c.ticket.Release) }()
	if err != nil && err != io.EOF {
		var md metadata.MD
		if trailer != nil {
			md = trailer()
		}
		c.l.throttled(err, md, c.ticket)
	}
}

// stream is a grpc.ClientStream that ends its call when the RPC ends.
type stream struct {
	grpc.ClientStream
	c *call
}

// SendMsg is grpc.ClientStream's; an error other than io.EOF ends the RPC
// (grpc-go finishes the stream then) and releases its charges. Such an
// error is the client's own (a message over the size limit, a codec's), so
// it is never taken for a throttle, even as RESOURCE_EXHAUSTED.
func (s *stream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if err != nil && err != io.EOF {
		s.c.end(nil, nil, true) // the client's own error, not a throttle
	}
	return err
}

// RecvMsg is grpc.ClientStream's; an error (io.EOF included) ends the RPC
// and releases its charges, pausing its keys first for a throttle, and so
// does a message on a stream whose server sends only one.
func (s *stream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if !noReply(s.c.ctx, err) {
		s.c.answer() // a message, or the server's status
	}
	switch {
	case err != nil:
		s.c.end(err, s.ClientStream.Trailer, true)
	case s.c.oneReply:
		s.c.end(nil, nil, true)
	}
	return err
}

// Header is grpc.ClientStream's; the server's header, when it comes, shows
// that the server read the RPC. grpc-go's returns (nil, nil) for a stream
// that failed, a cancelled one included, which is no header.
func (s *stream) Header() (metadata.MD, error) {
	md, err := s.ClientStream.Header()
	if err == nil && (md != nil || s.c.ctx.Err() == nil) {
		s.c.answer()
	}
	return md, err
}

// noReply reports whether err, with which an RPC under ctx ended (nil: a
// reply came), may have come before the server read the RPC: ctx is done
// (a cancel, a deadline), or err's code is Canceled or DeadlineExceeded
// while ctx is live (an interceptor chained below with a per-attempt
// context of its own), except grpc-go's status for a ClientConn being
// closed (connClosing: taken, as before, for an RPC that never left).
// Other errors with ctx live are the server's status, or a connection's
// error of an RPC that never left.
func noReply(ctx context.Context, err error) bool {
	if err == nil {
		return false
	}
	if ctx.Err() != nil {
		return true
	}
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.Canceled:
		return st.Message() != connClosing
	case codes.DeadlineExceeded:
		return true
	}
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// limitError is an acquisition's error with a gRPC status: status.Code
// reads its code, errors.Is and errors.As see the Pool's error.
type limitError struct {
	err  error
	code codes.Code
}

// Error returns the Pool's error's message.
func (e *limitError) Error() string { return e.err.Error() }

// Unwrap returns the Pool's error, for errors.Is and errors.As.
func (e *limitError) Unwrap() error { return e.err }

// GRPCStatus returns the error's status, for status.FromError and
// status.Code.
func (e *limitError) GRPCStatus() *status.Status { return status.New(e.code, e.err.Error()) }

// acquireError returns err, an error of clientpool.Pool.Acquire, with the
// gRPC code that fits it (UnaryClientInterceptor lists them).
func acquireError(err error) error {
	code := codes.Internal
	switch {
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, ratesem.ErrDeadline):
		code = codes.DeadlineExceeded
	case errors.Is(err, ratesem.ErrQueueFull), errors.Is(err, ratesem.ErrQueueTimeout), errors.Is(err, ratesem.ErrTooManyKeys):
		code = codes.ResourceExhausted
	case errors.Is(err, ratesem.ErrUnavailable), errors.Is(err, ratesem.ErrClosed):
		code = codes.Unavailable
	}
	return &limitError{err: err, code: code}
}
