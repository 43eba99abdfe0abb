package grpcsem_test

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/redisrate"
	"github.com/ratesem/ratesem/redistest"
)

// TestFleetOverRedis runs the interceptors over Pools that share their
// rules through one Redis (redisrate.Shared), as replicas of one client
// do: two pools, each with its own connection, fan out unary RPCs and
// streams (some cancelled mid-way) to one server that enforces 10 units
// per 100 ms (the client also caps 4 units in flight). The server sees no
// violation, each pool ends
// holding nothing, and a throttle with a pushback pauses the key for the
// whole fleet (once it has reached Redis).
func TestFleetOverRedis(t *testing.T) {
	before := goleak.IgnoreCurrent()
	rs := redistest.Start(t)
	const n, w, c = 10, 100 * time.Millisecond, 4
	srv := newServer(n, w, c)
	var pools []*clientpool.Pool
	var clients []*goredis.Client
	var stops []func()
	conns := 2
	for range conns {
		rc := goredis.NewClient(&goredis.Options{Addr: rs.Addr()})
		clients = append(clients, rc)
		p := newPool(t, table(n, w, c), redisrate.Shared(rc, "grpcsem-test"))
		pools = append(pools, p)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i, p := range pools {
		conn, stop := dial(t, srv, p)
		stops = append(stops, stop)
		for range 25 {
			wg.Go(func() {
				if err := echo(context.Background(), conn); err != nil {
					errs <- err
				}
			})
		}
		for j := range 10 {
			wg.Go(func() {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				s, err := conn.NewStream(ctx, countDesc, "/test.Limited/Count")
				if err != nil {
					errs <- err
					return
				}
				s.SendMsg(wrapperspb.Int64(4))
				s.CloseSend()
				for k := 0; ; k++ {
					if (i+j)%2 == 0 && k == 2 {
						cancel() // mid-way
						return
					}
					if err := s.RecvMsg(new(wrapperspb.Int64Value)); err == io.EOF {
						return
					} else if err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, p := range pools {
		settle(t, p, false)
	}
	st := srv.stats()
	if st.arrivals != 2*(25+10) || st.violations != 0 {
		t.Errorf("server: %d arrivals, %d violations; want %d, 0", st.arrivals, st.violations, 2*(25+10))
	}
	// A cancelled stream's handler may still run when the client has
	// released its units (the package doc): logged, not a failure.
	t.Logf("server: up to %d units in flight (limit %d); %d arrivals found more", st.maxFlight, c, st.overFlight)

	// A throttle seen by one replica pauses the key in every replica.
	conn0, stop0 := dial(t, srv, pools[0])
	conn1, stop1 := dial(t, srv, pools[1])
	stops = append(stops, stop0, stop1)
	t0 := time.Now()
	if err := echo(with(context.Background(), "x-account", "z", "x-reject-code", "8", "x-pushback", "300"), conn0); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("Echo: %v", err)
	}
	// The pause reaches Redis in the background: wait until the other
	// replica is refused on the key (a call it admits meanwhile costs 1 of
	// a million).
	for z := (clientpool.Charge{Rule: "acct", Key: "z", Weight: 1}); ; time.Sleep(time.Millisecond) {
		tk, _, err := pools[1].TryAcquire(z)
		if tk == nil {
			break
		}
		tk.Release()
		if err != nil || time.Since(t0) > 250*time.Millisecond {
			t.Fatalf("the other replica is not refused on the paused key after %v (%v)", time.Since(t0), err)
		}
	}
	if err := echo(with(context.Background(), "x-account", "z"), conn1); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(t0); el < 300*time.Millisecond {
		t.Errorf("the other replica's call on the paused key went %v after the throttle, inside the 300 ms pause", el)
	}

	for _, stop := range stops {
		stop()
	}
	for _, p := range pools {
		p.Close()
	}
	for _, rc := range clients {
		rc.Close()
	}
	rs.Stop() // Cleanup's Stop does nothing then
	goleak.VerifyNone(t, before)
}
