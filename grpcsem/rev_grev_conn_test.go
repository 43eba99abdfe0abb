package grpcsem_test

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratesem/ratesem/grpcsem"
)

// Closing the ClientConn ends its streams (grpc-go's first way to end a
// stream, ClientConn.NewStream's doc): a stream the caller still holds but
// no longer reads must release its charges then, not when the garbage
// collector finds it, since the Pool may be shared with other connections.
func TestGrevConnCloseReleases(t *testing.T) {
	srv := newServer(1000, time.Second, 100)
	pool := newPool(t, table(1000, time.Second, 100))
	conn, stop := dial(t, srv, pool)
	s := mustStream(t, conn, context.Background(), countDesc, "Count")
	s.SendMsg(wrapperspb.Int64(100_000))
	if err := s.RecvMsg(new(wrapperspb.Int64Value)); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	for deadline := time.Now().Add(5 * time.Second); grevHeld(t, pool) != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("5 s after the ClientConn closed, the pool holds %d units for its stream", grevHeld(t, pool))
			break
		}
	}
	stop()
	runtime.KeepAlive(s)
	if err := s.RecvMsg(new(wrapperspb.Int64Value)); status.Code(err) != codes.Canceled {
		t.Errorf("RecvMsg after Close: %v", err)
	}
	settle(t, pool, true)
}

// Header on a stream the server ended at once (a trailers-only
// RESOURCE_EXHAUSTED) returns no header and no error in grpc-go, which keeps
// the status for RecvMsg: the stream still holds its permit (Header may have
// seen one attempt of a retrying interceptor below, TestGrevRetryBelowHoldsPermit),
// and RecvMsg then pauses its keys for the pushback and releases.
func TestGrevHeaderThenRecvThrottle(t *testing.T) {
	srv := newServer(1000, time.Second, 100)
	pool := newPool(t, table(1000, time.Second, 100))
	conn, _ := dial(t, srv, pool)
	before := time.Now()
	s := mustStream(t, conn, with(context.Background(), "x-account", "h", "x-reject-code", "8", "x-pushback", "300"), countDesc, "Count")
	s.SendMsg(wrapperspb.Int64(1))
	s.CloseSend()
	if md, err := s.Header(); err != nil || len(md) != 0 {
		t.Fatalf("Header: %v, %v", md, err)
	}
	if got := grevHeld(t, pool); got != 3 {
		t.Errorf("the pool holds %d units after Header, want 3", got)
	}
	if err := s.RecvMsg(new(wrapperspb.Int64Value)); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("RecvMsg: %v", err)
	}
	if got := grevHeld(t, pool); got != 0 {
		t.Errorf("the pool holds %d units", got)
	}
	if d := pausedFor(pool, "h", before); d < 300*time.Millisecond {
		t.Errorf("account paused for %v, want the 300 ms pushback", d)
	}
}

// grevRetrying is a stream of an interceptor chained below grpcsem's that
// opens a second stream for the RPC when the first fails (as retrying
// interceptors do), sending it the first message again.
type grevRetrying struct {
	grpc.ClientStream
	again func() (grpc.ClientStream, error)
	first any
	tried bool
}

func (r *grevRetrying) SendMsg(m any) error {
	if r.first == nil {
		r.first = m
	}
	return r.ClientStream.SendMsg(m)
}

func (r *grevRetrying) RecvMsg(m any) error {
	err := r.ClientStream.RecvMsg(m)
	if err == nil || r.tried {
		return err
	}
	r.tried = true
	cs, err := r.again()
	if err != nil {
		return err
	}
	r.ClientStream = cs
	cs.SendMsg(r.first)
	cs.CloseSend()
	return cs.RecvMsg(m)
}

// An interceptor chained below the limiter that retries a failed stream,
// or abandons a first attempt (cancelling its own context) for a second:
// the attempts finish in grpc-go while the RPC goes on, and the RPC's
// permit must be held until the stream that reaches the caller ends.
func TestGrevRetryBelowHoldsPermit(t *testing.T) {
	srv := newServer(1000, time.Second, 100)
	pool := newPool(t, table(1000, time.Second, 100))
	finished := make(chan struct{}, 1)
	below := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		again := func() (grpc.ClientStream, error) { return streamer(ctx, desc, cc, method, opts...) }
		md, _ := metadata.FromOutgoingContext(ctx)
		if len(md.Get("x-abandon")) > 0 {
			actx, cancel := context.WithCancel(ctx)
			_, err := streamer(actx, desc, cc, method, append(opts, grpc.OnFinish(func(error) { finished <- struct{}{} }))...)
			cancel()
			if err != nil {
				return nil, err
			}
			<-finished // the first attempt finished in grpc-go
			return again()
		}
		first, err := streamer(metadata.AppendToOutgoingContext(ctx, "x-reject-code", "14"), desc, cc, method, opts...)
		if err != nil {
			return nil, err
		}
		return &grevRetrying{ClientStream: first, again: again}, nil
	}
	dialer, stopServer := serve(srv)
	defer stopServer()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(dialer),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableRetry(),
		grpc.WithChainStreamInterceptor(grpcsem.StreamClientInterceptor(pool), below))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, kv := range [][]string{{"x-account", "r"}, {"x-account", "a", "x-abandon", "1"}} {
		ctx, cancel := context.WithCancel(with(context.Background(), kv...))
		s := mustStream(t, conn, ctx, countDesc, "Count")
		s.SendMsg(wrapperspb.Int64(100_000))
		s.CloseSend()
		// Header of the first attempt, which the server ends at once
		// (trailers-only): grpc-go finishes that attempt, not the RPC.
		if _, err := s.Header(); err != nil {
			t.Fatalf("%v: Header: %v", kv, err)
		}
		if got := grevHeld(t, pool); got != 3 {
			t.Errorf("%v: the pool holds %d units after Header, want 3", kv, got)
		}
		for range 2 {
			if err := s.RecvMsg(new(wrapperspb.Int64Value)); err != nil {
				t.Fatalf("%v: %v", kv, err)
			}
			if got := grevHeld(t, pool); got != 3 {
				t.Errorf("%v: the pool holds %d units while the retried stream runs, want 3", kv, got)
			}
		}
		cancel()
		settle(t, pool, false)
	}
}

// Three ClientConns share a pool; on each, bidi streams are read and
// written by two goroutines, some are left idle (held, never read) and
// some dropped; then each conn is closed at a point of its own. Every
// permit is released once (a second Release panics), none goes negative,
// the idle ones at the close without the garbage collector, and no
// goroutine is left.
func TestGrevConnCloseStorm(t *testing.T) {
	before := goleak.IgnoreCurrent()
	srv := newServer(1<<40, time.Second, 1<<40)
	srv.work = 0
	pool := newPool(t, table(1<<40, 50*time.Millisecond, 1<<40))
	var idle []grpc.ClientStream
	var wg sync.WaitGroup
	var stops []func()
	for k := range 3 {
		conn, stop := dial(t, srv, pool)
		stops = append(stops, stop)
		for i := range 8 {
			s, err := conn.NewStream(with(context.Background(), "x-id", strconv.Itoa(k*100+i)), chatDesc, "/test.Limited/Chat")
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case i%4 == 0: // idle: held by the test, never read (2 a conn)
				s.SendMsg(wrapperspb.String("x"))
				idle = append(idle, s)
			case i == 1: // dropped after a message (1 a conn)
				s.SendMsg(wrapperspb.String("x"))
				s.RecvMsg(new(wrapperspb.StringValue))
			default: // busy until the conn closes
				wg.Go(func() {
					for s.SendMsg(wrapperspb.String("x")) == nil {
					}
				})
				wg.Go(func() {
					for s.RecvMsg(new(wrapperspb.StringValue)) == nil {
					}
				})
			}
		}
	}
	for _, stop := range stops {
		stop()
	}
	wg.Wait()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		held := grevHeld(t, pool)
		// 3 conns x 1 dropped stream x 3 units may wait for the collector;
		// the idle streams (18 units) may not.
		if held <= 3*1*3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 s after the conns closed, the pool holds %d units", held)
		}
	}
	runtime.KeepAlive(idle)
	idle = nil
	settle(t, pool, true)
	grevHeld(t, pool)
	goleak.VerifyNone(t, before)
}
