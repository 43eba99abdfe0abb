package grpcsem_test

import (
	"context"
	"errors"
	"io"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/grpcsem"
)

// TestMain fails the run if a test leaves a goroutine behind (a stream's
// watcher, a server's or a client's).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newPool(t testing.TB, tab clientpool.Table, opts ...clientpool.Option) *clientpool.Pool {
	t.Helper()
	p, err := clientpool.New(tab, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// inFlight returns the units the pool holds for calls not released.
func inFlight(p *clientpool.Pool) int64 {
	var n int64
	for _, k := range p.Snapshot() {
		n += k.InFlight
	}
	return n
}

// settle waits up to 5 s for the pool to hold nothing (a stream released by
// its context watcher or its cleanup is released on another goroutine),
// calling the garbage collector meanwhile when gc is set.
func settle(t *testing.T, p *clientpool.Pool, gc bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); inFlight(p) != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the pool still holds %d units: %+v", inFlight(p), p.Snapshot())
		}
		if gc {
			runtime.GC()
		}
		time.Sleep(time.Millisecond)
	}
}

// pausedFor returns how long after since the key of the rule "acct" is
// paused (0 when it is not).
func pausedFor(p *clientpool.Pool, account string, since time.Time) time.Duration {
	for _, k := range p.Snapshot() {
		if k.Rule == "acct" && k.Key == account && !k.PausedUntil.IsZero() {
			return k.PausedUntil.Sub(since)
		}
	}
	return 0
}

// with returns ctx carrying the outgoing metadata kv.
func with(ctx context.Context, kv ...string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

func echo(ctx context.Context, conn *grpc.ClientConn) error {
	return conn.Invoke(ctx, "/test.Limited/Echo", wrapperspb.String("hi"), new(wrapperspb.StringValue))
}

// TestFanOutNoViolations sends 100 RPCs of every kind at once through the
// interceptors to a server that enforces 10 units per 100 ms arriving and 4
// in flight: none violates either, each permit is released once (a second
// Release would panic) and the pool and the server both end with nothing in
// flight.
func TestFanOutNoViolations(t *testing.T) {
	const n, w, c = 10, 100 * time.Millisecond, 4
	srv := newServer(n, w, c)
	pool := newPool(t, table(n, w, c))
	conn, _ := dial(t, srv, pool)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	run := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				errs <- err
			}
		}()
	}
	for range 60 {
		run(func() error { return echo(ctx, conn) })
	}
	for range 20 {
		run(func() error {
			s, err := conn.NewStream(ctx, countDesc, "/test.Limited/Count")
			if err != nil {
				return err
			}
			if err := s.SendMsg(wrapperspb.Int64(5)); err != nil {
				return err
			}
			s.CloseSend()
			for got := 0; ; got++ {
				if err := s.RecvMsg(new(wrapperspb.Int64Value)); err == io.EOF {
					if got != 5 {
						return errors.New("Count: short stream")
					}
					return nil
				} else if err != nil {
					return err
				}
			}
		})
	}
	for range 10 {
		run(func() error {
			s, err := conn.NewStream(ctx, sumDesc, "/test.Limited/Sum")
			if err != nil {
				return err
			}
			for i := range 3 {
				if err := s.SendMsg(wrapperspb.Int64(int64(i))); err != nil {
					return err
				}
			}
			s.CloseSend()
			sum := new(wrapperspb.Int64Value)
			if err := s.RecvMsg(sum); err != nil {
				return err
			}
			if sum.GetValue() != 3 {
				return errors.New("Sum: wrong sum")
			}
			return nil
		})
	}
	for range 10 {
		run(func() error {
			s, err := conn.NewStream(ctx, chatDesc, "/test.Limited/Chat")
			if err != nil {
				return err
			}
			for range 3 {
				if err := s.SendMsg(wrapperspb.String("x")); err != nil {
					return err
				}
				if err := s.RecvMsg(new(wrapperspb.StringValue)); err != nil {
					return err
				}
			}
			s.CloseSend()
			if err := s.RecvMsg(new(wrapperspb.StringValue)); err != io.EOF {
				return errors.New("Chat: no EOF")
			}
			return nil
		})
	}
	start := time.Now()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := srv.stats()
	if st.arrivals != 100 || st.ends != 100 || st.violations != 0 || st.inFlight != 0 {
		t.Errorf("server: %d arrivals, %d ends, %d violations, %d units in flight; want 100, 100, 0, 0", st.arrivals, st.ends, st.violations, st.inFlight)
	}
	if st.maxFlight > c || st.overFlight != 0 {
		t.Errorf("server saw up to %d units in flight (%d arrivals over %d)", st.maxFlight, st.overFlight, c)
	}
	if got := inFlight(pool); got != 0 {
		t.Errorf("the pool holds %d units after every RPC ended", got)
	}
	// 130 units at 10 per 100 ms: at least 12 windows after the first.
	if el := time.Since(start); el < 1200*time.Millisecond {
		t.Errorf("100 RPCs (130 units) took %v: faster than the limit allows", el)
	}
}

// TestStreamEndsEveryWay ends a stream each way it can end and checks that
// its permit is released, once: at once when the caller's own call ends
// it, soon after (on the context watcher's goroutine) when its context
// does, and when the garbage collector finds a dropped stream.
func TestStreamEndsEveryWay(t *testing.T) {
	type way struct {
		name string
		// run opens and ends a stream; now says the release is due when
		// run returns (not later, on another goroutine).
		run func(t *testing.T, conn *grpc.ClientConn) (now bool)
	}
	ways := []way{
		{"server stream read to EOF", func(t *testing.T, conn *grpc.ClientConn) bool {
			s := mustStream(t, conn, context.Background(), countDesc, "Count")
			s.SendMsg(wrapperspb.Int64(3))
			s.CloseSend()
			for s.RecvMsg(new(wrapperspb.Int64Value)) == nil {
			}
			return true
		}},
		{"client stream: CloseSend and its one reply", func(t *testing.T, conn *grpc.ClientConn) bool {
			s := mustStream(t, conn, context.Background(), sumDesc, "Sum")
			s.SendMsg(wrapperspb.Int64(1))
			s.CloseSend()
			if err := s.RecvMsg(new(wrapperspb.Int64Value)); err != nil {
				t.Fatal(err)
			}
			return true
		}},
		{"bidi: CloseSend then EOF", func(t *testing.T, conn *grpc.ClientConn) bool {
			s := mustStream(t, conn, context.Background(), chatDesc, "Chat")
			s.SendMsg(wrapperspb.String("a"))
			s.RecvMsg(new(wrapperspb.StringValue))
			s.CloseSend()
			if err := s.RecvMsg(new(wrapperspb.StringValue)); err != io.EOF {
				t.Fatalf("RecvMsg after CloseSend: %v, want io.EOF", err)
			}
			return true
		}},
		{"server's error status", func(t *testing.T, conn *grpc.ClientConn) bool {
			s := mustStream(t, conn, with(context.Background(), "x-reject-code", "13"), countDesc, "Count")
			s.SendMsg(wrapperspb.Int64(3))
			if err := s.RecvMsg(new(wrapperspb.Int64Value)); status.Code(err) != codes.Internal {
				t.Fatalf("RecvMsg: %v, want Internal", err)
			}
			return true
		}},
		{"SendMsg fails on the client (message over the size limit)", func(t *testing.T, conn *grpc.ClientConn) bool {
			s, err := conn.NewStream(context.Background(), chatDesc, "/test.Limited/Chat", grpc.MaxCallSendMsgSize(1))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.SendMsg(wrapperspb.String("too long")); status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("SendMsg: %v, want ResourceExhausted", err)
			}
			return false // no reply: the stream's header may reach the server later (held, hold.go)
		}},
		{"NewStream fails (no such codec)", func(t *testing.T, conn *grpc.ClientConn) bool {
			if _, err := conn.NewStream(context.Background(), chatDesc, "/test.Limited/Chat", grpc.CallContentSubtype("nosuchcodec")); err == nil {
				t.Fatal("NewStream with an unknown codec succeeded")
			}
			return true
		}},
		{"context cancelled mid-way", func(t *testing.T, conn *grpc.ClientConn) bool {
			ctx, cancel := context.WithCancel(context.Background())
			s := mustStream(t, conn, ctx, countDesc, "Count")
			s.SendMsg(wrapperspb.Int64(100_000))
			s.CloseSend()
			for range 3 {
				if err := s.RecvMsg(new(wrapperspb.Int64Value)); err != nil {
					t.Fatal(err)
				}
			}
			cancel()
			return false
		}},
		{"deadline passes mid-way", func(t *testing.T, conn *grpc.ClientConn) bool {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
			defer cancel()
			s := mustStream(t, conn, ctx, chatDesc, "Chat")
			s.SendMsg(wrapperspb.String("a"))
			s.RecvMsg(new(wrapperspb.StringValue))
			<-ctx.Done()
			return false
		}},
		{"context cancelled, then the caller reads the error", func(t *testing.T, conn *grpc.ClientConn) bool {
			ctx, cancel := context.WithCancel(context.Background())
			s := mustStream(t, conn, ctx, countDesc, "Count")
			s.SendMsg(wrapperspb.Int64(100_000))
			s.RecvMsg(new(wrapperspb.Int64Value))
			cancel()
			for s.RecvMsg(new(wrapperspb.Int64Value)) == nil {
			}
			return false
		}},
		{"dropped mid-way without a cancel", func(t *testing.T, conn *grpc.ClientConn) bool {
			s := mustStream(t, conn, context.Background(), countDesc, "Count")
			s.SendMsg(wrapperspb.Int64(100_000))
			s.RecvMsg(new(wrapperspb.Int64Value))
			return false
		}},
	}
	for _, w := range ways {
		t.Run(w.name, func(t *testing.T) {
			before := goleak.IgnoreCurrent()
			srv := newServer(1000, time.Second, 100)
			pool := newPool(t, table(1000, time.Second, 100))
			conn, stop := dial(t, srv, pool)
			if now := w.run(t, conn); now {
				if got := inFlight(pool); got != 0 {
					t.Fatalf("the pool holds %d units when the stream's end returned", got)
				}
			}
			settle(t, pool, true)
			if d := pausedFor(pool, "", time.Now()); d > 0 {
				t.Errorf("an RPC that was not throttled paused its key for %v", d)
			}
			// Every RPC the server saw ends there too.
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
				st := srv.stats()
				if st.arrivals == st.ends {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("server: %d arrivals, %d ends", st.arrivals, st.ends)
				}
			}
			stop()
			goleak.VerifyNone(t, before)
		})
	}
}

// mustStream opens a stream of the test service's method name.
func mustStream(t *testing.T, conn *grpc.ClientConn, ctx context.Context, desc *grpc.StreamDesc, name string) grpc.ClientStream {
	t.Helper()
	s, err := conn.NewStream(ctx, desc, "/test.Limited/"+name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestWaitingCallLeavesNoTrace checks that an RPC refused while it waits
// for admission (its deadline passes, or its context is cancelled) is
// never sent, holds nothing, and gets an error with the right gRPC code
// that still matches the context's error.
func TestWaitingCallLeavesNoTrace(t *testing.T) {
	srv := newServer(100, time.Second, 2)
	pool := newPool(t, table(100, time.Second, 2))
	conn, _ := dial(t, srv, pool)
	ctx, cancel := context.WithCancel(context.Background())
	long := mustStream(t, conn, ctx, countDesc, "Count") // 2 units: the cap
	long.SendMsg(wrapperspb.Int64(100_000))
	long.RecvMsg(new(wrapperspb.Int64Value))

	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	_, err := conn.NewStream(short, chatDesc, "/test.Limited/Chat")
	if status.Code(err) != codes.DeadlineExceeded || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("stream past its deadline: %v (code %v), want DeadlineExceeded matching context.DeadlineExceeded", err, status.Code(err))
	}
	gone, cancelGone := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancelGone() }()
	if err := echo(gone, conn); status.Code(err) != codes.Canceled || !errors.Is(err, context.Canceled) {
		t.Errorf("unary call cancelled while waiting: %v (code %v), want Canceled matching context.Canceled", err, status.Code(err))
	}
	if st := srv.stats(); st.arrivals != 1 {
		t.Errorf("server saw %d arrivals, want 1 (the refused calls were sent)", st.arrivals)
	}
	if got := inFlight(pool); got != 3 {
		t.Errorf("pool holds %d units, want the long stream's 3 (2 of rpc, 1 of acct)", got)
	}
	cancel()
	settle(t, pool, false)
	t0 := time.Now()
	if err := echo(context.Background(), conn); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(t0); el > 500*time.Millisecond {
		t.Errorf("a call after the stream's cancel waited %v", el)
	}
}

// TestPushbackPausesKey checks that RESOURCE_EXHAUSTED with a pushback
// pauses the keys the RPC charged for the pushback plus the pool's jitter
// (unary and streaming), that the next RPC on that key waits it out while
// other keys go on, and which other statuses pause.
func TestPushbackPausesKey(t *testing.T) {
	srv := newServer(1000, time.Second, 100)
	pool := newPool(t, table(1000, time.Second, 100))
	conn, _ := dial(t, srv, pool)
	bg := context.Background()

	before := time.Now()
	err := echo(with(bg, "x-account", "a", "x-reject-code", "8", "x-pushback", "300"), conn)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("Echo: %v, want ResourceExhausted", err)
	}
	// backoff.Spread: d + up to d/10 + 50 ms; 100 ms more for a slow machine.
	if d := pausedFor(pool, "a", before); d < 300*time.Millisecond || d > 480*time.Millisecond {
		t.Errorf("account a paused for %v, want the 300 ms pushback plus jitter", d)
	}
	t0 := time.Now()
	if err := echo(with(bg, "x-account", "b"), conn); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(t0); el > 200*time.Millisecond {
		t.Errorf("account b waited %v for a's pause", el)
	}
	if err := echo(with(bg, "x-account", "a"), conn); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(before); el < 300*time.Millisecond {
		t.Errorf("account a's next call went after %v, inside its 300 ms pause", el)
	}

	before = time.Now()
	s := mustStream(t, conn, with(bg, "x-account", "s", "x-reject-code", "8", "x-pushback", "400"), countDesc, "Count")
	s.SendMsg(wrapperspb.Int64(1))
	if err := s.RecvMsg(new(wrapperspb.Int64Value)); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("Count: %v, want ResourceExhausted", err)
	}
	if d := pausedFor(pool, "s", before); d < 400*time.Millisecond || d > 590*time.Millisecond {
		t.Errorf("stream's account paused for %v, want the 400 ms pushback plus jitter", d)
	}

	// Mid-stream, after messages: the status comes in trailers, not in a
	// trailers-only reply.
	before = time.Now()
	s = mustStream(t, conn, with(bg, "x-account", "m", "x-fail-after", "3"), countDesc, "Count")
	s.SendMsg(wrapperspb.Int64(10))
	got := 0
	for err = s.RecvMsg(new(wrapperspb.Int64Value)); err == nil; err = s.RecvMsg(new(wrapperspb.Int64Value)) {
		got++
	}
	if got != 3 || status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("Count failing after 3: %d messages, then %v", got, err)
	}
	if d := pausedFor(pool, "m", before); d < 200*time.Millisecond || d > 370*time.Millisecond {
		t.Errorf("mid-stream throttle paused its account for %v, want the 200 ms pushback plus jitter", d)
	}

	for _, c := range []struct {
		account, code, pushback string
		paused                  bool
	}{
		{"u1", "14", "", false},      // UNAVAILABLE alone: a transport's code, not a rate
		{"u2", "14", "250", true},    // UNAVAILABLE with a pushback: the server sheds load
		{"i1", "13", "250", false},   // INTERNAL: never a throttle
		{"r1", "8", "", true},        // RESOURCE_EXHAUSTED without a pushback: backoff
		{"p1", "7", "250", false},    // PERMISSION_DENIED
		{"d1", "4", "100000", false}, // DEADLINE_EXCEEDED from the server
	} {
		kv := []string{"x-account", c.account, "x-reject-code", c.code}
		if c.pushback != "" {
			kv = append(kv, "x-pushback", c.pushback)
		}
		echo(with(bg, kv...), conn)
		if d := pausedFor(pool, c.account, time.Now().Add(-time.Second)); (d > 0) != c.paused {
			t.Errorf("code %s, pushback %q: paused %v, want paused %v", c.code, c.pushback, d > 0, c.paused)
		}
	}
	settle(t, pool, false)
}

// TestHostilePushback sends pushback trailers a client must not take at
// their word and checks the pause each causes: a usable value pauses for
// it (capped by WithMaxPushback), anything else backs off as a throttle
// without Retry-After does (a first throttle pauses 100 to 200 ms).
func TestHostilePushback(t *testing.T) {
	srv := newServer(1000, time.Second, 100)
	pool := newPool(t, table(1000, time.Second, 100), clientpool.WithMaxPause(3*time.Second))
	conn, _ := dial(t, srv, pool, grpcsem.WithMaxPushback(time.Second))
	const slack = 100 * time.Millisecond
	backoff := [2]time.Duration{100 * time.Millisecond, 200*time.Millisecond + slack}
	capped := [2]time.Duration{time.Second, time.Second + 150*time.Millisecond + slack}
	for i, c := range []struct {
		values []string
		want   [2]time.Duration
	}{
		{[]string{"250"}, [2]time.Duration{250 * time.Millisecond, 325*time.Millisecond + slack}},
		{[]string{" 250 "}, [2]time.Duration{250 * time.Millisecond, 325*time.Millisecond + slack}},
		{[]string{"0"}, backoff},
		{[]string{"-5"}, backoff},
		{[]string{"-9223372036854775808"}, backoff},
		{[]string{"+5"}, backoff},
		{[]string{"1.5"}, backoff},
		{[]string{"0x10"}, backoff},
		{[]string{"soon"}, backoff},
		{[]string{"1e3"}, backoff},
		{[]string{"250", "250"}, backoff},
		{[]string{"100", "99999999"}, backoff},
		{[]string{strings.Repeat("9", 33)}, backoff}, // too long to be meant
		{[]string{strings.Repeat("9", 32)}, capped},  // saturates, then capped
		{[]string{"9223372036854775807"}, capped},
		{[]string{"86400000"}, capped}, // a day
		{[]string{"2147483647"}, capped},
	} {
		account := "h" + string(rune('a'+i))
		kv := []string{"x-account", account, "x-reject-code", "8"}
		for _, v := range c.values {
			kv = append(kv, "x-pushback", v)
		}
		before := time.Now()
		if err := echo(with(context.Background(), kv...), conn); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("%q: %v", c.values, err)
		}
		if d := pausedFor(pool, account, before); d < c.want[0] || d > c.want[1] {
			t.Errorf("pushback %q: paused %v, want within [%v, %v]", c.values, d, c.want[0], c.want[1])
		}
	}
	settle(t, pool, false)
}

// TestThrottleTestPanics checks that a WithThrottle function that panics
// leaks no charge: the panic reaches the caller of the RPC, and the pool
// holds nothing.
func TestThrottleTestPanics(t *testing.T) {
	srv := newServer(1000, time.Second, 100)
	pool := newPool(t, table(1000, time.Second, 100))
	conn, _ := dial(t, srv, pool, grpcsem.WithThrottle(func(*status.Status, metadata.MD) bool { panic("boom") }))
	reject := with(context.Background(), "x-reject-code", "8")
	recovered := func(f func()) (r any) {
		defer func() { r = recover() }()
		f()
		return nil
	}
	if r := recovered(func() { echo(reject, conn) }); r != "boom" {
		t.Errorf("unary: recovered %v, want boom", r)
	}
	if got := inFlight(pool); got != 0 {
		t.Errorf("unary: the pool holds %d units after the panic", got)
	}
	s := mustStream(t, conn, reject, countDesc, "Count")
	s.SendMsg(wrapperspb.Int64(1))
	if r := recovered(func() { s.RecvMsg(new(wrapperspb.Int64Value)) }); r != "boom" {
		t.Errorf("stream: recovered %v, want boom", r)
	}
	if got := inFlight(pool); got != 0 {
		t.Errorf("stream: the pool holds %d units after the panic", got)
	}
	if err := echo(context.Background(), conn); err != nil { // the pool still works
		t.Fatal(err)
	}
}

// TestAcquireErrors checks that an RPC the pool cannot price or admit is
// not sent and fails with a gRPC code that wraps the pool's error.
func TestAcquireErrors(t *testing.T) {
	srv := newServer(1000, time.Second, 100)
	tab := table(10, time.Second, 100)
	tab.Endpoints = tab.Endpoints[:0]
	tab.Endpoints = append(tab.Endpoints, clientpool.Endpoint{Path: "/test.Limited/Echo", Costs: []clientpool.Cost{{Rule: "rpc", Units: 11}}})
	pool := newPool(t, tab)
	conn, _ := dial(t, srv, pool)
	if err := echo(context.Background(), conn); status.Code(err) != codes.Internal || !errors.Is(err, ratesem.ErrWeightTooLarge) {
		t.Errorf("Echo heavier than the limit: %v (code %v), want Internal matching ErrWeightTooLarge", err, status.Code(err))
	}
	if _, err := conn.NewStream(context.Background(), countDesc, "/test.Limited/Count"); status.Code(err) != codes.Internal || !errors.Is(err, ratesem.ErrNoEndpoint) {
		t.Errorf("Count, in no endpoint: %v (code %v), want Internal matching ErrNoEndpoint", err, status.Code(err))
	}
	mine := errors.New("no price")
	conn2, _ := dial(t, srv, pool, grpcsem.WithCharges(func(context.Context, string, any) ([]clientpool.Charge, error) { return nil, mine }))
	if err := echo(context.Background(), conn2); status.Code(err) != codes.Internal || !errors.Is(err, mine) {
		t.Errorf("WithCharges's error: %v (code %v), want Internal matching it", err, status.Code(err))
	}
	if st := srv.stats(); st.arrivals != 0 {
		t.Errorf("server saw %d arrivals, want 0", st.arrivals)
	}
}

// TestQueueFullIsResourceExhausted checks the code of a call refused at once
// by a full queue (clientpool.WithMaxQueue).
func TestQueueFullIsResourceExhausted(t *testing.T) {
	srv := newServer(1000, time.Second, 100)
	queued := make(chan struct{}, 10)
	pool := newPool(t, table(1000, time.Second, 2), clientpool.WithMaxQueue(1), clientpool.WithObserver(func(e ratesem.Event) {
		if e.Kind == ratesem.Queued {
			queued <- struct{}{}
		}
	}))
	conn, _ := dial(t, srv, pool)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := mustStream(t, conn, ctx, countDesc, "Count") // holds the cap
	s.SendMsg(wrapperspb.Int64(100_000))
	s.RecvMsg(new(wrapperspb.Int64Value))
	done := make(chan error)
	go func() { done <- echo(ctx, conn) }()
	<-queued
	if err := echo(ctx, conn); status.Code(err) != codes.ResourceExhausted || !errors.Is(err, ratesem.ErrQueueFull) {
		t.Errorf("Echo with a full queue: %v (code %v), want ResourceExhausted matching ErrQueueFull", err, status.Code(err))
	}
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Errorf("queued Echo after cancel: %v, want Canceled", err)
	}
	settle(t, pool, false)
}

// TestWithCharges checks that WithCharges prices each RPC instead of the
// table, with the RPC's method and, for a unary RPC, its message.
func TestWithCharges(t *testing.T) {
	srv := newServer(1000, time.Second, 100)
	pool := newPool(t, table(1000, time.Second, 100))
	var mu sync.Mutex
	var seen []string
	conn, _ := dial(t, srv, pool, grpcsem.WithCharges(func(_ context.Context, method string, msg any) ([]clientpool.Charge, error) {
		s, _ := msg.(*wrapperspb.StringValue)
		mu.Lock()
		seen = append(seen, method+" "+s.GetValue())
		mu.Unlock()
		return []clientpool.Charge{{Rule: "acct", Key: method, Weight: 1}}, nil
	}))
	if err := echo(context.Background(), conn); err != nil {
		t.Fatal(err)
	}
	s := mustStream(t, conn, context.Background(), countDesc, "Count")
	s.SendMsg(wrapperspb.Int64(1))
	for s.RecvMsg(new(wrapperspb.Int64Value)) == nil {
	}
	if want := []string{"/test.Limited/Echo hi", "/test.Limited/Count "}; strings.Join(seen, "|") != strings.Join(want, "|") {
		t.Errorf("WithCharges saw %q, want %q", seen, want)
	}
	var keys []string
	for _, k := range pool.Snapshot() {
		keys = append(keys, k.Rule+"["+k.Key+"]")
	}
	if got := strings.Join(keys, " "); got != "acct[/test.Limited/Count] acct[/test.Limited/Echo]" {
		t.Errorf("limiters %s, want only WithCharges's", got)
	}
}

// TestCancelStorm opens 150 streams of every kind through a pool of 20
// units per 100 ms and 6 in flight; each is cancelled, dropped or read to
// its end at a point of its own. The server sees no violation of its
// window, the pool ends holding nothing, and no goroutine is left.
func TestCancelStorm(t *testing.T) {
	before := goleak.IgnoreCurrent()
	const n, w, c = 20, 100 * time.Millisecond, 6
	srv := newServer(n, w, 1<<40) // a cancelled handler may outlive the client's release (package doc)
	pool := newPool(t, table(n, w, c))
	conn, stop := dial(t, srv, pool)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		cancelAt = map[string]time.Time{} // by x-id: when the client cancelled the call before its reply
	)
	for i := range 150 {
		wg.Go(func() {
			id := strconv.Itoa(i)
			ctx, cancel := context.WithCancel(with(context.Background(), "x-id", id))
			defer cancel()
			cancelEarly := func() {
				mu.Lock()
				cancelAt[id] = time.Now()
				mu.Unlock()
				cancel()
			}
			desc, name := countDesc, "Count"
			if i%3 == 1 {
				desc, name = chatDesc, "Chat"
			}
			s, err := conn.NewStream(ctx, desc, "/test.Limited/"+name)
			if err != nil {
				t.Error(err)
				return
			}
			switch i % 5 {
			case 0: // cancelled before any message
				cancelEarly()
				return
			case 1: // dropped after one message, never cancelled: the cleanup ends it
				if name == "Count" {
					s.SendMsg(wrapperspb.Int64(100_000))
				} else {
					s.SendMsg(wrapperspb.String("x"))
				}
				s.RecvMsg(new(wrapperspb.Int64Value))
				go func() { <-time.After(time.Duration(i) * time.Millisecond); runtime.GC() }()
				return
			}
			if name == "Count" {
				s.SendMsg(wrapperspb.Int64(int64(i % 7)))
				s.CloseSend()
			}
			for k := 0; ; k++ {
				if k == i%4 && i%5 == 2 {
					cancelEarly() // mid-way, at k = 0 before any reply
				}
				if name == "Chat" {
					if k == 3 {
						s.CloseSend()
					} else if s.SendMsg(wrapperspb.String("x")) != nil {
						return
					}
				}
				if s.RecvMsg(new(wrapperspb.StringValue)) != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	settle(t, pool, true)
	// The server's own count is not the check: a call cancelled before
	// any reply ends for the limit at the cancel, and its request may reach
	// the server later (grpc-go's writer sends it after the cancel; see the
	// package doc, "What an interceptor cannot see"). What the completion
	// window guarantees is that each arrival, stamped at the earlier of
	// its arrival and its client's cancel, lies between its call's start
	// and end; client and server share this process's clock, so N per W
	// must hold over those stamps exactly.
	log := srv.log()
	if len(log) > 150 {
		t.Errorf("server: %d arrivals, want at most 150", len(log))
	}
	for j := range log {
		if at, ok := cancelAt[log[j].id]; ok && at.Before(log[j].at) {
			log[j].at = at
		}
	}
	checkWindow(t, log, n, w)
	stop()
	goleak.VerifyNone(t, before)
}
