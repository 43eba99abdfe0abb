package grpcsem_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/grpcsem"
	"github.com/ratesem/ratesem/redisrate"
	"github.com/ratesem/ratesem/redistest"
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

// Bidi streams used as grpc-go allows, SendMsg on one goroutine and RecvMsg
// on another, while the caller cancels at a point of its own or the server
// ends the stream: each permit is released once (a second Release panics),
// the pool ends with nothing, and no goroutine is left.
func TestRev21bConcurrentSendRecv(t *testing.T) {
	before := goleak.IgnoreCurrent()
	srv := newServer(1000, 50*time.Millisecond, 1<<40)
	pool := newPool(t, table(1000, 50*time.Millisecond, 8))
	conn, stop := dial(t, srv, pool)
	var wg sync.WaitGroup
	for i := range 80 {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if i%4 == 3 {
				ctx = with(ctx, "x-reject-code", "8", "x-pushback", "1")
			}
			s, err := conn.NewStream(ctx, chatDesc, "/test.Limited/Chat")
			if err != nil {
				t.Error(err)
				return
			}
			var inner sync.WaitGroup
			inner.Go(func() {
				for k := 0; k < 20; k++ {
					if s.SendMsg(wrapperspb.String("x")) != nil {
						return
					}
				}
				s.CloseSend()
			})
			inner.Go(func() {
				for k := 0; ; k++ {
					if i%4 == 1 && k == i%7 {
						cancel()
					}
					if s.RecvMsg(new(wrapperspb.StringValue)) != nil {
						return
					}
				}
			})
			inner.Wait()
		})
	}
	wg.Wait()
	settle(t, pool, false)
	stop()
	goleak.VerifyNone(t, before)
}

// A Key function that panics (a table's bug, or a hostile metadata value
// it trips on) reaches the caller of the RPC; nothing is held and the
// RPC is not sent.
func TestRev21bPanickingKey(t *testing.T) {
	srv := newServer(1000, time.Second, 100)
	tab := table(1000, time.Second, 100)
	tab.Rules[1].Key = func(r *http.Request) (string, bool) {
		if r.Header.Get("X-Boom") != "" {
			panic("boom")
		}
		return "", true
	}
	pool := newPool(t, tab)
	conn, _ := dial(t, srv, pool)
	ctx := with(context.Background(), "x-boom", "1")
	for _, call := range []func() error{
		func() error { return echo(ctx, conn) },
		func() error { _, err := conn.NewStream(ctx, chatDesc, "/test.Limited/Chat"); return err },
	} {
		func() {
			defer func() {
				if r := recover(); r != "boom" {
					t.Errorf("recovered %v, want the Key's panic", r)
				}
			}()
			call()
		}()
	}
	if got := inFlight(pool); got != 0 || srv.stats().arrivals != 0 {
		t.Errorf("after panics: pool holds %d, server saw %d", got, srv.stats().arrivals)
	}
	if err := echo(context.Background(), conn); err != nil {
		t.Errorf("a call after the panics: %v", err)
	}
}

// A server that sheds load with plain UNAVAILABLE (gRPC's 503, and what
// grpc-go makes of a proxy's HTTP 503) is overloaded: as package httpclient
// does for a 503 (clientpool.Pool.Overloaded), the interceptors pause
// nothing but must not count such RPCs as successes that raise an adaptive
// level.
func TestRev21bUnavailableDoesNotRaiseAdaptiveLevel(t *testing.T) {
	unavailableAdaptive(t)
}

// The same over Redis (redisrate.Shared): the fleet's level does not rise
// either.
func TestRev21bUnavailableDoesNotRaiseAdaptiveLevelRedis(t *testing.T) {
	rc := goredis.NewClient(&goredis.Options{Addr: redistest.Start(t).Addr()})
	t.Cleanup(func() { rc.Close() })
	unavailableAdaptive(t, redisrate.Shared(rc, "rev21b"))
}

func unavailableAdaptive(t *testing.T, opts ...clientpool.Option) {
	srv := newServer(1<<40, time.Second, 1<<40)
	srv.work = 0
	tab := clientpool.Table{
		Rules:   []clientpool.Rule{{Name: "api", Limit: limit(5, 20*time.Millisecond), Adapt: &clientpool.Adaptive{Floor: 5, Ceiling: 1000}}},
		Default: []clientpool.Cost{{Rule: "api", Units: 1}},
	}
	pool := newPool(t, tab, opts...)
	defer pool.Close()
	conn, _ := dial(t, srv, pool)
	ctx := with(context.Background(), "x-reject-code", "14")
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 60 {
				unary := echo(ctx, conn)
				s, err := conn.NewStream(ctx, countDesc, "/test.Limited/Count")
				if err == nil {
					s.SendMsg(wrapperspb.Int64(1))
					s.CloseSend()
					err = s.RecvMsg(new(wrapperspb.Int64Value))
				}
				if status.Code(unary) != codes.Unavailable || status.Code(err) != codes.Unavailable {
					t.Errorf("unary %v, stream %v; want Unavailable", unary, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, k := range pool.Snapshot() {
		if k.Rule == "api" && k.Limit.N > 5 {
			t.Errorf("after 480 RPCs answered UNAVAILABLE the adaptive level is %d, above its floor 5", k.Limit.N)
		}
		if !k.PausedUntil.IsZero() {
			t.Errorf("UNAVAILABLE paused %s/%s", k.Rule, k.Key)
		}
	}
	settle(t, pool, false)
}
