// Package grpcsem limits a gRPC client with a clientpool.Pool: its
// interceptors acquire an RPC's charges before the RPC starts and release
// them when it ends, and turn a server's RESOURCE_EXHAUSTED (with its
// grpc-retry-pushback-ms trailer) into a pause of the keys the RPC
// charged, as package httpclient does with an HTTP 429 and Retry-After.
//
//	pool, _ := clientpool.New(table)
//	conn, _ := grpc.NewClient(target, grpc.WithTransportCredentials(creds),
//		grpc.WithUnaryInterceptor(grpcsem.UnaryClientInterceptor(pool)),
//		grpc.WithStreamInterceptor(grpcsem.StreamClientInterceptor(pool)))
//
// # Charges per method
//
// An RPC is classified by the Pool's Table (Pool.Classify) as an HTTP/2
// request, which is what it is on the wire: method POST, path the full
// method name ("/pkg.Service/Method"), host the ClientConn's target, and
// the outgoing metadata as the header (Rule.Key functions read an account
// or a tenant from it). So a clientpool.Endpoint with Path
// "/pkg.Service/Method" prices one method, one with Path "/pkg.Service/"
// every method of a service, and Table.Default every RPC no endpoint
// lists. A unary RPC's request message is on the request's context
// (Message), for weights that depend on it (a batch's size).
// WithCharges replaces the Table's classification by a function of the
// caller's own. The RPC's context goes to clientpool.Pool.Acquire, so
// ratesem.WithPriority and ratesem.WithQueueWait on it apply.
//
// # When an RPC ends
//
// A unary RPC ends when the invoker returns. A stream ends, and releases its
// charges exactly once, at the first of: RecvMsg returns an error (io.EOF
// after the server's OK status, or the RPC's error); RecvMsg returns nil on
// a stream whose server sends one message (client streaming: the RPC is
// over); SendMsg returns an error other than io.EOF (the client ended the RPC);
// the stream's context is done (the caller cancelled it, or its deadline
// passed); grpc-go finishes the stream on its own (the ClientConn is
// closed: its streams end, read or not, and release then, which matters
// when the Pool serves other connections); or the caller drops the stream
// without doing any of these, when the garbage collector finds it unreachable (then the
// interceptor cancels the RPC's context, as grpc-go asks of a caller that
// stops using a stream, and releases). That last case comes at a time the
// program does not choose: cancel the context of a stream you abandon.
// Header does not end a stream, even one it finds over (grpc-go then
// returns no header and no error, and keeps the status for RecvMsg, which
// ends it): behind an interceptor chained below that retries, that may be
// one failed attempt of the RPC.
//
// # What an interceptor cannot see
//
//   - grpc-go's retries (a service config's retryPolicy, and its hedging)
//     and transparent retries (an RPC the server never read, sent again on
//     another connection) run below client interceptors: one RPC of the
//     interceptor may reach the server several times while holding one
//     permit, and only the last attempt's status and trailer are seen. For
//     an exact limit, leave RESOURCE_EXHAUSTED out of retryableStatusCodes
//     or turn retries off (grpc.WithDisableRetry); grpc-go's own retry
//     throttling (retryThrottling) then has nothing to do.
//   - A service config's timeout for a method (its methodConfig's
//     timeout) is applied by grpc-go below client interceptors, to the
//     RPC once it is sent: the time an RPC waits in the Pool's queue does
//     not count against it. Only the caller's context deadline bounds the
//     wait (and ratesem.WithQueueWait, the queue alone).
//   - A stream holds its permit (and, under a concurrency cap, its slot)
//     for its whole life, however long and however many messages it
//     carries: the limit counts RPCs, not messages. A rule whose window
//     counts completions (the default) starts its clock at the stream's
//     end.
//   - Messages are not charged one by one; a server that limits messages
//     per stream is beyond a client interceptor.
//   - An RPC the client cancels (its context, its deadline, or the
//     ClientConn's Close) ends, for the limit, at the cancel: the server
//     learns of it a little later (a stream reset on its way), so a
//     server's own count of calls in flight may briefly hold it still.
//   - When an RPC ends without any reply (a message, a header or a status
//     from the server; a Header that grpc-go returns empty for a failed
//     stream is none), cancelled, or ended by a Canceled or
//     DeadlineExceeded of an interceptor chained below (a per-attempt
//     timeout), while its request was still queued in
//     grpc-go's writer or on the wire, the server may count its arrival
//     after the RPC's end, which the completion window's guarantee (each
//     arrival between its call's start and end) does not cover. So the
//     interceptors hold the release of such an RPC until its end plus
//     twice the longest time to a first reply among their last 64 RPCs
//     to its target that got one (a request reaches the server before
//     its reply leaves it), 1 s before any did, 10 s at most. The hold
//     counts from the end, not the start, as grpc-go writes the request
//     only once it has a transport, whose dial may take several round
//     trips. Targets are ClientConn.Target; the interceptors of one Pool
//     (unary and stream) share these times, for 1024 targets, and hold an
//     RPC to a target past them 1 s. This covers a request delayed up to
//     twice what the interceptors have seen, not an unbounded one: against
//     a strict server, a program that cancels RPCs in flight can also give
//     the rule a sliding log with a margin (Rule.Window,
//     window.NewSlidingLog).
//   - A plain HTTP reply from a proxy that does not speak gRPC reaches the
//     interceptor as grpc-go's status, without its headers: a 429's
//     Retry-After is lost, and the Pool backs off on its own.
//   - A RESOURCE_EXHAUSTED that grpc-go makes itself (a unary RPC's
//     request over the send limit, a reply over the receive limit,
//     grpc.MaxCallRecvMsgSize) looks like a server's: the default throttle
//     test (DefaultThrottle) cannot tell them apart when there is no
//     pushback trailer, so a client that may hit size limits should pass
//     its own (WithThrottle). A stream's SendMsg error is never taken for
//     a throttle: it is the client's own.
//
// The interceptors are safe for concurrent use; each RPC costs what a
// Pool.Acquire and a Ticket.Release cost, plus, for a stream, a derived
// context with a watcher (context.AfterFunc), a cleanup (runtime.AddCleanup)
// and a grpc.OnFinish call option, through which grpc-go tells the
// interceptor that it finished the stream (an API grpc-go marks
// experimental; an interceptor chained below that drops call options hides
// from it only the ClientConn's close, and the other ways still end the
// stream).
package grpcsem
