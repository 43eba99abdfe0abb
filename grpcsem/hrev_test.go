package grpcsem_test

import (
	"context"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratesem/ratesem/grpcsem"
	"github.com/ratesem/ratesem/internal/memnet"
)

// hrevHeldAtArrival waits for the server's first arrival and returns the
// units the pool held then (polled every millisecond).
func hrevHeldAtArrival(t *testing.T, srv *server, pool func() int64) int64 {
	for end := time.Now().Add(2 * time.Second); len(srv.log()) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the RPC never reached the server")
		}
	}
	return pool()
}

// TestHrevHeaderAfterCancelIsNoReply: grpc-go's ClientStream.Header
// returns (nil, nil) for a stream that failed, a cancelled one included
// ("the user should get it by calling Recv"). A stream cancelled before any
// reply, whose Header the caller then asks for, got no reply: its charges
// must be held (its request is on a 50 ms link still), not released at
// once as if the server had sent its header.
func TestHrevHeaderAfterCancelIsNoReply(t *testing.T) {
	before := goleak.IgnoreCurrent()
	srv := newServer(1<<20, time.Second, 1<<40)
	dialer, stopServer := serve(srv)
	pool := newPool(t, table(1<<20, time.Second, 1<<40))
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, s string) (net.Conn, error) {
			c, err := dialer(ctx, s)
			if err != nil {
				return nil, err
			}
			return memnet.Delay(c, 50*time.Millisecond), nil
		}),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableRetry(),
		grpc.WithStreamInterceptor(grpcsem.StreamClientInterceptor(pool)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := conn.NewStream(ctx, chatDesc, "/test.Limited/Chat")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if md, err := s.Header(); md != nil || err != nil {
		t.Fatalf("Header after the cancel: %v, %v; want nil, nil (grpc-go's)", md, err)
	}
	if got := hrevHeldAtArrival(t, srv, func() int64 { return inFlight(pool) }); got == 0 {
		t.Error("the stream's charges were released before the server counted its arrival")
	}
	settle(t, pool, false)
	conn.Close()
	stopServer()
	goleak.VerifyNone(t, before)
}

// TestHrevTimeoutBelowIsNoReply: an interceptor chained below with a
// per-attempt timeout of its own ends a unary RPC with DeadlineExceeded
// while the caller's context is live, before any reply, with the request
// on a 50 ms link still: its charges must be held, not released at once.
func TestHrevTimeoutBelowIsNoReply(t *testing.T) {
	before := goleak.IgnoreCurrent()
	srv := newServer(1<<20, time.Second, 1<<40)
	dialer, stopServer := serve(srv)
	pool := newPool(t, table(1<<20, time.Second, 1<<40))
	perAttempt := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		defer cancel()
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, s string) (net.Conn, error) {
			c, err := dialer(ctx, s)
			if err != nil {
				return nil, err
			}
			return memnet.Delay(c, 50*time.Millisecond), nil
		}),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableRetry(),
		grpc.WithChainUnaryInterceptor(grpcsem.UnaryClientInterceptor(pool), perAttempt))
	if err != nil {
		t.Fatal(err)
	}
	// Connect first (the handshake crosses the slow link too), so that the
	// attempt's 10 ms go to the RPC.
	conn.Connect()
	for end := time.Now().Add(2 * time.Second); conn.GetState().String() != "READY"; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("never connected")
		}
	}
	err = conn.Invoke(context.Background(), "/test.Limited/Echo", wrapperspb.String("x"), new(wrapperspb.StringValue))
	if err == nil {
		t.Fatal("no error: the attempt's timeout did not fire")
	}
	if got := hrevHeldAtArrival(t, srv, func() int64 { return inFlight(pool) }); got == 0 {
		t.Errorf("the RPC's charges (err %v) were released before the server counted its arrival", err)
	}
	settle(t, pool, false)
	conn.Close()
	stopServer()
	goleak.VerifyNone(t, before)
}

// TestHrevFailuresDoNotShrinkTheHold: RPCs that fail at once without any
// reply from a server (here an interceptor below answers UNAVAILABLE, as
// grpc-go does for a connection in TRANSIENT_FAILURE) are no time to a
// first reply: 64 of them must not shrink the hold of the next RPC without
// a reply to nothing (before any reply it is 1 s).
func TestHrevFailuresDoNotShrinkTheHold(t *testing.T) {
	pool := newPool(t, table(1<<20, time.Second, 1<<40))
	unary := grpcsem.UnaryClientInterceptor(pool)
	down := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		if err := ctx.Err(); err != nil {
			return status.FromContextError(err).Err()
		}
		return status.Error(codes.Unavailable, "connection refused")
	}
	for range 64 {
		if err := unary(context.Background(), "/test.Limited/Echo", nil, nil, nil, down); status.Code(err) != codes.Unavailable {
			t.Fatalf("err %v", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// Acquire fails on a done context: cancel inside the invoker instead.
	err := unary(context.Background(), "/test.Limited/Echo", nil, nil, nil, func(_ context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		return down(ctx, method, req, reply, cc, opts...)
	})
	if status.Code(err) != codes.Canceled {
		t.Fatalf("err %v", err)
	}
	time.Sleep(50 * time.Millisecond)
	if got := inFlight(pool); got == 0 {
		t.Error("released within 50 ms: the failures without a reply shrank the hold")
	}
	settle(t, pool, false)
}

// TestHrevNearRepliesKeepFarHold: the times to a first reply are kept per
// target (ClientConn.Target). One Pool's interceptors on a near target and
// a far one (50 ms away) learn the far one's latency, then make 64 calls
// to the near one: with one ring for both, the far target's unary calls
// cancelled before their reply are held twice the near latency only, and the server counts
// arrivals over its limit.
func TestHrevNearRepliesKeepFarHold(t *testing.T) {
	cancelStorm(t, 64, func(far *grpc.ClientConn) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		far.Invoke(ctx, "/test.Limited/Echo", wrapperspb.String("x"), new(wrapperspb.StringValue))
		cancel()
	})
}
