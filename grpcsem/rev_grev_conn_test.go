package grpcsem_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
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
// RESOURCE_EXHAUSTED) finishes the stream in grpc-go and returns no error:
// the RPC is over, so its charges are released then, after its keys are
// paused for the pushback, even when the caller never calls RecvMsg.
func TestGrevHeaderEndsThrottledStream(t *testing.T) {
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
	if got := grevHeld(t, pool); got != 0 {
		t.Errorf("the pool holds %d units after Header found the stream over", got)
	}
	if d := pausedFor(pool, "h", before); d < 300*time.Millisecond {
		t.Errorf("account paused for %v, want the 300 ms pushback", d)
	}
	if err := s.RecvMsg(new(wrapperspb.Int64Value)); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("RecvMsg: %v", err)
	}
	if got := grevHeld(t, pool); got != 0 {
		t.Errorf("the pool holds %d units", got)
	}
	runtime.KeepAlive(s)
}
