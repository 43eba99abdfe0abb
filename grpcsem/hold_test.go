package grpcsem_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratesem/ratesem/grpcsem"
	"github.com/ratesem/ratesem/internal/memnet"
)

// TestCancelBeforeReplyAtTheServer cancels streams right after they start
// on a target whose requests take 50 ms to reach the server, while calls to
// a near target keep the limit binding (cancelStorm). Released at the cancel, each such
// stream would free its units a window before the server counts its
// arrival, and the fast calls that take them would put the server's window
// over N. The interceptor holds the release of an RPC without a reply
// (twice the longest time to a first reply it has seen, here > 100 ms), so
// the server, which rejects what goes over N per W, sees no violation.
// Released at the cancel instead (the hold removed), this fails on every run.
func TestCancelBeforeReplyAtTheServer(t *testing.T) {
	cancelStorm(t, 0, func(far *grpc.ClientConn) {
		ctx, cancel := context.WithCancel(context.Background())
		s, err := far.NewStream(ctx, chatDesc, "/test.Limited/Chat")
		cancel()
		if err == nil {
			s.RecvMsg(new(wrapperspb.StringValue))
		}
	})
}

// cancelStorm runs a server that rejects what goes over n = 10 units per
// W = 300 ms, reached through one Pool's interceptors on two ClientConns,
// a near target and a far one 50 ms away (memnet.Delay). The interceptors
// first learn the far target's latency (two unary calls), then make push
// unary calls to the near one; then for 1.5 s 12 goroutines keep the limit
// binding on the near target while 3 call cancel on the far one in a loop.
// It fails t on any violation at the server, fewer than 2n arrivals, units
// held 5 s after the storm, or a goroutine left.
func cancelStorm(t *testing.T, push int, cancel func(far *grpc.ClientConn)) {
	before := goleak.IgnoreCurrent()
	const n, w, oneWay = 10, 300 * time.Millisecond, 50 * time.Millisecond
	srv := newServer(n, w, 1<<40)
	dialer, stopServer := serve(srv)
	pool := newPool(t, table(n, w, 1<<40))
	unary, stream := grpcsem.UnaryClientInterceptor(pool), grpcsem.StreamClientInterceptor(pool)
	newConn := func(target string, d time.Duration) *grpc.ClientConn {
		conn, err := grpc.NewClient("passthrough:///"+target,
			grpc.WithContextDialer(func(ctx context.Context, s string) (net.Conn, error) {
				c, err := dialer(ctx, s)
				if err != nil || d == 0 {
					return c, err
				}
				return memnet.Delay(c, d), nil
			}),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDisableRetry(),
			grpc.WithUnaryInterceptor(unary), grpc.WithStreamInterceptor(stream))
		if err != nil {
			t.Fatal(err)
		}
		return conn
	}
	far, near := newConn("far", oneWay), newConn("near", 0)
	echo := func(conn *grpc.ClientConn) error {
		return conn.Invoke(context.Background(), "/test.Limited/Echo", wrapperspb.String("x"), new(wrapperspb.StringValue))
	}
	for range 2 { // the interceptors learn the far target takes > 50 ms to answer
		if err := echo(far); err != nil {
			t.Fatal(err)
		}
	}
	for range push {
		if err := echo(near); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(1500 * time.Millisecond)
	var wg sync.WaitGroup
	for range 12 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				echo(near)
			}
		})
	}
	for range 3 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				cancel(far)
			}
		})
	}
	wg.Wait()
	settle(t, pool, false)
	st := srv.stats()
	if st.violations != 0 {
		t.Errorf("server: %d of %d arrivals over %d per %v", st.violations, st.arrivals, n, w)
	}
	if st.arrivals < 2*n {
		t.Errorf("server: %d arrivals, want the limit binding (at least %d)", st.arrivals, 2*n)
	}
	far.Close()
	near.Close()
	stopServer()
	goleak.VerifyNone(t, before)
}
