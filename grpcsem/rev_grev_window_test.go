package grpcsem_test

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Under a binding limit, RPCs of every kind that are released only after
// their first reply (read to the end, cancelled after a reply, cut by a
// mid-stream throttle, or ended by closing their ClientConn) leave no window of the server's arrival stamps
// with more than N units: each arrival lies between its call's start and
// end, so the completion window holds at the server exactly.
func TestGrevServerWindowAfterReply(t *testing.T) {
	const n, w = 6, 60 * time.Millisecond
	srv := newServer(n, w, 1<<40)
	srv.work = 0
	pool := newPool(t, table(n, w, 1<<40))
	conns := make([]*grpc.ClientConn, 3)
	for i := range conns {
		conns[i], _ = dial(t, srv, pool)
	}
	var wg sync.WaitGroup
	var idleMu sync.Mutex
	var idle []grpc.ClientStream
	for i := range 72 {
		wg.Go(func() {
			conn := conns[i%3]
			ctx, cancel := context.WithCancel(with(context.Background(), "x-id", strconv.Itoa(i), "x-account", strconv.Itoa(i%5)))
			defer cancel()
			switch i % 6 {
			case 0:
				if err := echo(ctx, conn); err != nil {
					t.Error(err)
				}
			case 1, 2, 3: // Count: to the end; cancelled after a reply; left unread (ended by the deferred cancel, or by its conn's close)
				sctx := ctx
				if i == 3 { // held, never cancelled, until its conn closes
					sctx = context.WithoutCancel(ctx)
				}
				s, err := conn.NewStream(sctx, countDesc, "/test.Limited/Count")
				if err != nil {
					t.Error(err)
					return
				}
				s.SendMsg(wrapperspb.Int64(int64(2 + i%3)))
				s.CloseSend()
				if err := s.RecvMsg(new(wrapperspb.Int64Value)); err != nil {
					t.Error(err)
					return
				}
				switch i % 6 {
				case 1:
					for s.RecvMsg(new(wrapperspb.Int64Value)) == nil {
					}
				case 2:
					cancel()
				case 3:
					if i == 3 {
						idleMu.Lock()
						idle = append(idle, s)
						idleMu.Unlock()
					}
				}
			case 4: // a mid-stream throttle after one message
				s, err := conn.NewStream(with(ctx, "x-fail-after", "1"), countDesc, "/test.Limited/Count")
				if err != nil {
					t.Error(err)
					return
				}
				s.SendMsg(wrapperspb.Int64(5))
				for s.RecvMsg(new(wrapperspb.Int64Value)) == nil {
				}
			case 5:
				s, err := conn.NewStream(ctx, sumDesc, "/test.Limited/Sum")
				if err != nil {
					t.Error(err)
					return
				}
				s.SendMsg(wrapperspb.Int64(1))
				s.CloseSend()
				if err := s.RecvMsg(new(wrapperspb.Int64Value)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	for _, c := range conns {
		c.Close()
	}
	runtime.KeepAlive(idle)
	settle(t, pool, true)
	log := srv.log()
	if len(log) != 72 {
		t.Errorf("server: %d arrivals, want 72", len(log))
	}
	checkWindow(t, log, n, w)
	if st := srv.stats(); st.violations != 0 {
		t.Errorf("server: %d violations", st.violations)
	}
}
