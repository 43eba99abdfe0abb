package grpcsem_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/grpcsem"
)

// grevHeld returns the units the pool holds, failing the test when a
// limiter's count is negative (a double release).
func grevHeld(t *testing.T, p *clientpool.Pool) int64 {
	t.Helper()
	var n int64
	for _, k := range p.Snapshot() {
		if k.InFlight < 0 {
			t.Errorf("%s[%s] holds %d units: released twice", k.Rule, k.Key, k.InFlight)
		}
		n += k.InFlight
	}
	return n
}

// grevRecover runs f and returns what it panicked with.
func grevRecover(f func()) (r any) {
	defer func() { r = recover() }()
	f()
	return nil
}

// A streamer below the interceptor (another interceptor's bug) that
// returns no stream and no error must not hand the caller a stream that
// panics on first use: the RPC fails with an error, and nothing is held.
func TestGrevStreamerReturnsNilNil(t *testing.T) {
	pool := newPool(t, table(1000, time.Second, 100))
	icpt := grpcsem.StreamClientInterceptor(pool)
	s, err := icpt(context.Background(), chatDesc, nil, "/test.Limited/Chat",
		func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
			return nil, nil
		})
	if err == nil || s != nil {
		t.Errorf("a streamer's (nil, nil): interceptor returned (%v, %v), want no stream and an error", s, err)
	}
	if status.Code(err) != codes.Internal {
		t.Errorf("code %v, want Internal", status.Code(err))
	}
	if got := grevHeld(t, pool); got != 0 {
		t.Errorf("the pool holds %d units", got)
	}
}

// A streamer that panics: the panic reaches the caller, nothing is held
// and the derived context's watcher leaves no goroutine.
func TestGrevStreamerPanics(t *testing.T) {
	before := goleak.IgnoreCurrent()
	pool := newPool(t, table(1000, time.Second, 100))
	icpt := grpcsem.StreamClientInterceptor(pool)
	r := grevRecover(func() {
		icpt(context.Background(), chatDesc, nil, "/test.Limited/Chat",
			func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
				panic("streamer")
			})
	})
	if r != "streamer" {
		t.Errorf("recovered %v", r)
	}
	if got := grevHeld(t, pool); got != 0 {
		t.Errorf("the pool holds %d units", got)
	}
	goleak.VerifyNone(t, before)
}

// A unary invoker that panics, and a WithCharges that panics: the panic
// reaches the caller and nothing is held.
func TestGrevUnaryPanics(t *testing.T) {
	pool := newPool(t, table(1000, time.Second, 100))
	icpt := grpcsem.UnaryClientInterceptor(pool)
	r := grevRecover(func() {
		icpt(context.Background(), "/test.Limited/Echo", wrapperspb.String("x"), new(wrapperspb.StringValue), nil,
			func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { panic("invoker") })
	})
	if r != "invoker" {
		t.Errorf("recovered %v", r)
	}
	charges := grpcsem.UnaryClientInterceptor(pool, grpcsem.WithCharges(func(context.Context, string, any) ([]clientpool.Charge, error) {
		panic("charges")
	}))
	r = grevRecover(func() {
		charges(context.Background(), "/test.Limited/Echo", nil, nil, nil,
			func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
				t.Error("invoked after a panicking WithCharges")
				return nil
			})
	})
	if r != "charges" {
		t.Errorf("recovered %v", r)
	}
	if got := grevHeld(t, pool); got != 0 {
		t.Errorf("the pool holds %d units", got)
	}
}

// A context already done when the RPC starts: the RPC is not sent, holds
// nothing, and fails with the context's code.
func TestGrevContextDoneAtStart(t *testing.T) {
	srv := newServer(1000, time.Second, 100)
	pool := newPool(t, table(1000, time.Second, 100))
	conn, _ := dial(t, srv, pool)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, c := range []struct {
		ctx  context.Context
		code codes.Code
		is   error
	}{{cancelled, codes.Canceled, context.Canceled}, {expired, codes.DeadlineExceeded, context.DeadlineExceeded}} {
		if err := echo(c.ctx, conn); status.Code(err) != c.code || !errors.Is(err, c.is) {
			t.Errorf("unary: %v (code %v), want %v", err, status.Code(err), c.code)
		}
		if s, err := conn.NewStream(c.ctx, chatDesc, "/test.Limited/Chat"); status.Code(err) != c.code || s != nil {
			t.Errorf("stream: %v, %v (code %v), want %v", s, err, status.Code(err), c.code)
		}
	}
	if st := srv.stats(); st.arrivals != 0 {
		t.Errorf("server saw %d arrivals", st.arrivals)
	}
	if got := grevHeld(t, pool); got != 0 {
		t.Errorf("the pool holds %d units", got)
	}
}

// A deadline that passes, or a cancel with a cause, while the RPC waits in
// the Pool's queue: the caller sees DeadlineExceeded or Canceled (the
// codes grpc-go itself gives), never Internal.
func TestGrevDeadlineInQueue(t *testing.T) {
	srv := newServer(1000, time.Second, 100)
	pool := newPool(t, table(1000, time.Second, 2))
	conn, _ := dial(t, srv, pool)
	hold, cancelHold := context.WithCancel(context.Background())
	long := mustStream(t, conn, hold, countDesc, "Count") // the cap
	long.SendMsg(wrapperspb.Int64(100_000))
	long.RecvMsg(new(wrapperspb.Int64Value))

	// A deadline far enough for the pool not to fail it fast is hard to
	// tell apart on a loaded machine; either way the code is the deadline's.
	d, c1 := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer c1()
	if err := echo(d, conn); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("deadline in the queue: %v (code %v)", err, status.Code(err))
	}
	dc, c2 := context.WithTimeoutCause(context.Background(), 30*time.Millisecond, errors.New("my cause"))
	defer c2()
	if err := echo(dc, conn); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("deadline with a cause in the queue: %v (code %v)", err, status.Code(err))
	}
	cc, c3 := context.WithCancelCause(context.Background())
	go func() { time.Sleep(10 * time.Millisecond); c3(errors.New("shutting down")) }()
	if _, err := conn.NewStream(cc, chatDesc, "/test.Limited/Chat"); status.Code(err) != codes.Canceled {
		t.Errorf("cancel with a cause in the queue: %v (code %v)", err, status.Code(err))
	}
	if st := srv.stats(); st.arrivals != 1 {
		t.Errorf("server saw %d arrivals, want 1", st.arrivals)
	}
	cancelHold()
	settle(t, pool, false)
	grevHeld(t, pool)
}

// A stream used past its end: RecvMsg again after the error, CloseSend
// twice, Header and Trailer before and after the end. Each permit is
// released once and at the end, and the stream's calls keep grpc-go's
// answers.
func TestGrevStreamUsedPastItsEnd(t *testing.T) {
	srv := newServer(1000, time.Second, 100)
	pool := newPool(t, table(1000, time.Second, 100))
	conn, _ := dial(t, srv, pool)
	s := mustStream(t, conn, with(context.Background(), "x-account", "a"), chatDesc, "Chat")
	if md := s.Trailer(); len(md) != 0 {
		t.Errorf("Trailer before the end: %v", md)
	}
	if err := s.SendMsg(wrapperspb.String("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Header(); err != nil {
		t.Fatal(err)
	}
	if got := grevHeld(t, pool); got != 3 {
		t.Errorf("open stream: the pool holds %d units, want 3", got)
	}
	s.CloseSend()
	s.CloseSend()
	if err := s.RecvMsg(new(wrapperspb.StringValue)); err != nil {
		t.Fatal(err)
	}
	if got := grevHeld(t, pool); got != 3 {
		t.Errorf("half-closed stream: the pool holds %d units, want 3", got)
	}
	for range 3 {
		if err := s.RecvMsg(new(wrapperspb.StringValue)); err != io.EOF {
			t.Errorf("RecvMsg at the end: %v", err)
		}
		if got := grevHeld(t, pool); got != 0 {
			t.Errorf("ended stream: the pool holds %d units", got)
		}
	}
	if err := s.SendMsg(wrapperspb.String("b")); err == nil {
		t.Error("SendMsg after the end succeeded")
	}
	s.CloseSend()
	s.Header()
	s.Trailer()
	if got := grevHeld(t, pool); got != 0 {
		t.Errorf("the pool holds %d units", got)
	}
}

// RPCs on a ClientConn already closed fail with grpc-go's Canceled and
// hold nothing (grpc-go finishes such a stream as it fails to make it).
func TestGrevClosedConn(t *testing.T) {
	srv := newServer(1000, time.Second, 100)
	pool := newPool(t, table(1000, time.Second, 100))
	conn, _ := dial(t, srv, pool)
	conn.Close()
	if err := echo(context.Background(), conn); status.Code(err) != codes.Canceled {
		t.Errorf("unary on a closed conn: %v", err)
	}
	if s, err := conn.NewStream(context.Background(), chatDesc, "/test.Limited/Chat"); status.Code(err) != codes.Canceled || s != nil {
		t.Errorf("stream on a closed conn: %v, %v", s, err)
	}
	if got := grevHeld(t, pool); got != 0 {
		t.Errorf("the pool holds %d units", got)
	}
}

// A deadline known to pass before admission fails at once (the Pool's
// fail-fast, ratesem.ErrDeadline) with DeadlineExceeded, matching
// context.DeadlineExceeded as grpc-go's own deadline errors do.
func TestGrevDeadlineFailFast(t *testing.T) {
	srv := newServer(1000, time.Second, 100)
	pool := newPool(t, table(2, time.Hour, 100))
	conn, _ := dial(t, srv, pool)
	for range 2 {
		if err := echo(context.Background(), conn); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t0 := time.Now()
	err := echo(ctx, conn)
	if status.Code(err) != codes.DeadlineExceeded || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ratesem.ErrDeadline) {
		t.Errorf("unary: %v (code %v)", err, status.Code(err))
	}
	if _, err := conn.NewStream(ctx, chatDesc, "/test.Limited/Chat"); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("stream: %v (code %v)", err, status.Code(err))
	}
	if el := time.Since(t0); el > 10*time.Second {
		t.Errorf("the fail-fast took %v", el)
	}
	if got := grevHeld(t, pool); got != 0 {
		t.Errorf("the pool holds %d units", got)
	}
}

// WithCharges returning no charge, a zero or negative weight, or an unknown
// rule: the RPC either goes unlimited (no charge) or fails with a gRPC code
// before it is sent, and never leaves anything held.
func TestGrevOddCharges(t *testing.T) {
	srv := newServer(1000, time.Second, 100)
	pool := newPool(t, table(1000, time.Second, 100))
	for _, ch := range [][]clientpool.Charge{
		nil,
		{},
		{{Rule: "rpc", Weight: 0}},
		{{Rule: "rpc", Weight: -1}},
		{{Rule: "nope", Weight: 1}},
		{{Rule: "rpc", Weight: 1}, {Rule: "rpc", Weight: 1}},
		{{Rule: "rpc", Weight: 1 << 62}, {Rule: "rpc", Weight: 1 << 62}},
	} {
		conn, stop := dial(t, srv, pool, grpcsem.WithCharges(func(context.Context, string, any) ([]clientpool.Charge, error) { return ch, nil }))
		uerr := echo(context.Background(), conn)
		s, serr := conn.NewStream(context.Background(), countDesc, "/test.Limited/Count")
		if serr == nil {
			s.SendMsg(wrapperspb.Int64(1))
			for s.RecvMsg(new(wrapperspb.Int64Value)) == nil {
			}
		}
		for _, err := range []error{uerr, serr} {
			if err != nil && status.Code(err) == codes.Unknown {
				t.Errorf("charges %v: an error without a gRPC code: %v", ch, err)
			}
		}
		if got := grevHeld(t, pool); got != 0 {
			t.Errorf("charges %v: the pool holds %d units", ch, got)
		}
		stop()
	}
}
