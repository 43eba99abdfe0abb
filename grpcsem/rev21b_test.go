package grpcsem_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/grpcsem"
)

// Two interceptors chained (a pool per tenant over a fleet's pool, say):
// the inner one's own refusal (RESOURCE_EXHAUSTED for its queue) never
// reached a server, so the outer one must not take it for a throttle and
// pause its keys.
func TestRev21bChainedLocalRefusalIsNoThrottle(t *testing.T) {
	srv := newServer(1000, time.Second, 100)
	outer := newPool(t, table(1000, time.Second, 100))
	inner := newPool(t, clientpool.Table{
		Rules:   []clientpool.Rule{{Name: "inner", Limit: limit(1, time.Hour)}},
		Default: []clientpool.Cost{{Rule: "inner", Units: 1}},
	})
	dialer, stopServer := serve(srv)
	defer stopServer()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(dialer),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableRetry(),
		grpc.WithChainUnaryInterceptor(grpcsem.UnaryClientInterceptor(outer), grpcsem.UnaryClientInterceptor(inner)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := with(context.Background(), "x-account", "a")
	if err := echo(ctx, conn); err != nil {
		t.Fatal(err)
	}
	err = echo(ratesem.WithQueueWait(ctx, 10*time.Millisecond), conn)
	if status.Code(err) != codes.ResourceExhausted || !errors.Is(err, ratesem.ErrQueueTimeout) {
		t.Fatalf("second call: %v (code %v), want the inner pool's ResourceExhausted", err, status.Code(err))
	}
	if d := pausedFor(outer, "a", time.Now()); d > 0 {
		t.Errorf("the inner interceptor's local refusal paused the outer pool's key for %v", d)
	}
	settle(t, outer, false)
	settle(t, inner, false)
}
