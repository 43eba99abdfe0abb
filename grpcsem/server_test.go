package grpcsem_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/grpcsem"
	"github.com/ratesem/ratesem/window"
)

// The test service, "test.Limited", written by hand (no protoc): its
// messages are protobuf's well-known wrappers, so grpc-go's default codec
// carries them.
//
//	Echo   unary             StringValue -> StringValue
//	Count  server streaming  Int64Value n -> n Int64Values, one a millisecond
//	Sum    client streaming  Int64Values -> their sum
//	Chat   bidi streaming    StringValues echoed until the client's EOF
//
// Every method answers the status of the metadata "x-reject-code" (a
// number) when it is sent, with "x-pushback" values as the PushbackKey
// trailer and each "x-trailer" value "key=value" as that trailer, before
// doing anything else. Count fails with RESOURCE_EXHAUSTED and a 200 ms
// pushback after the number of messages "x-fail-after" says.
const service = "test.Limited"

// weights are the units each method costs, on the server's count and in
// the client's table (table).
var weights = map[string]int64{"/test.Limited/Echo": 1, "/test.Limited/Count": 2, "/test.Limited/Sum": 1, "/test.Limited/Chat": 2}

// server enforces a limit of n units arriving in any window of w (a
// sliding log over arrivals, as a server that counts requests does): a call
// over it is a violation, answered RESOURCE_EXHAUSTED with a pushback of w.
// It also counts the units of its handlers still running, and the arrivals
// that find more than c of them (overFlight): a client's cancel ends a call
// for the client's limit before the server's handler sees it (see the
// package doc), so these are counted, not rejected. It logs every arrival
// and end.
type server struct {
	n, c int64
	w    time.Duration
	work time.Duration // how long Echo takes

	mu         sync.Mutex
	arrivals   []arrival
	inFlight   int64
	maxFlight  int64
	overFlight int
	ends       int
	violations int
}

type arrival struct {
	at     time.Time
	weight int64
	id     string // the metadata "x-id", when the client sent one
}

func newServer(n int64, w time.Duration, c int64) *server {
	return &server{n: n, w: w, c: c, work: 2 * time.Millisecond}
}

// enter logs an arrival of method and checks the limits.
func (s *server) enter(ctx context.Context, method string) error {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-reject-code"); len(v) > 0 {
		code, _ := strconv.Atoi(v[0])
		if pb := md.Get("x-pushback"); len(pb) > 0 {
			grpc.SetTrailer(ctx, metadata.MD{grpcsem.PushbackKey: pb})
		}
		for _, kv := range md.Get("x-trailer") {
			k, v, _ := strings.Cut(kv, "=")
			grpc.SetTrailer(ctx, metadata.Pairs(k, v))
		}
		return status.Error(codes.Code(code), "rejected as asked")
	}
	w := weights[method]
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var id string
	if v := md.Get("x-id"); len(v) > 0 {
		id = v[0]
	}
	s.arrivals = append(s.arrivals, arrival{now, w, id})
	var units int64
	for i := len(s.arrivals) - 1; i >= 0 && now.Sub(s.arrivals[i].at) < s.w; i-- {
		units += s.arrivals[i].weight
	}
	if units > s.n {
		s.violations++
		s.ends++
		grpc.SetTrailer(ctx, metadata.Pairs(grpcsem.PushbackKey, strconv.FormatInt(s.w.Milliseconds(), 10)))
		return status.Errorf(codes.ResourceExhausted, "%d units in %v: over %d per %v", units, s.w, s.n, s.w)
	}
	s.inFlight += w
	s.maxFlight = max(s.maxFlight, s.inFlight)
	if s.inFlight > s.c {
		s.overFlight++
	}
	return nil
}

// leave logs the end of a call of method that entered.
func (s *server) leave(method string) {
	s.mu.Lock()
	s.inFlight -= weights[method]
	s.ends++
	s.mu.Unlock()
}

// stats is what a server logged.
type stats struct {
	arrivals   int   // calls that arrived (those rejected on purpose, by x-reject-code, are not logged)
	ends       int   // calls that ended, violations included
	violations int   // arrivals over n per w
	inFlight   int64 // units of the handlers running now
	maxFlight  int64 // the most units of handlers running at once
	overFlight int   // arrivals that found more than c units running
}

// log returns a copy of the arrivals the server logged so far.
func (s *server) log() []arrival {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]arrival(nil), s.arrivals...)
}

// checkWindow fails t for every arrival of log (stamps as they are) that
// ends a window of w holding more than n units: N per W checked exactly
// over the server's log.
func checkWindow(t *testing.T, log []arrival, n int64, w time.Duration) {
	t.Helper()
	slices.SortFunc(log, func(a, b arrival) int { return a.at.Compare(b.at) })
	for j := range log {
		var units int64
		for k := j; k >= 0 && log[j].at.Sub(log[k].at) < w; k-- {
			units += log[k].weight
		}
		if units > n {
			t.Errorf("%d units arrived in the %v before %v (call %s), over %d", units, w, log[j].at, log[j].id, n)
		}
	}
}

// stats returns what the server logged so far.
func (s *server) stats() stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return stats{len(s.arrivals), s.ends, s.violations, s.inFlight, s.maxFlight, s.overFlight}
}

func (s *server) echo(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	if err := s.enter(ctx, "/test.Limited/Echo"); err != nil {
		return nil, err
	}
	defer s.leave("/test.Limited/Echo")
	if s.work > 0 {
		time.Sleep(s.work)
	}
	return wrapperspb.String(in.GetValue()), nil
}

func (s *server) count(in *wrapperspb.Int64Value, ss grpc.ServerStream) error {
	if err := s.enter(ss.Context(), "/test.Limited/Count"); err != nil {
		return err
	}
	defer s.leave("/test.Limited/Count")
	md, _ := metadata.FromIncomingContext(ss.Context())
	for i := range in.GetValue() {
		if v := md.Get("x-fail-after"); len(v) > 0 && strconv.FormatInt(i, 10) == v[0] {
			ss.SetTrailer(metadata.Pairs(grpcsem.PushbackKey, "200"))
			return status.Error(codes.ResourceExhausted, "quota spent mid-stream")
		}
		select {
		case <-ss.Context().Done():
			return ss.Context().Err()
		case <-time.After(time.Millisecond):
		}
		if err := ss.SendMsg(wrapperspb.Int64(i)); err != nil {
			return err
		}
	}
	return nil
}

func (s *server) sum(ss grpc.ServerStream) error {
	if err := s.enter(ss.Context(), "/test.Limited/Sum"); err != nil {
		return err
	}
	defer s.leave("/test.Limited/Sum")
	var total int64
	for {
		in := new(wrapperspb.Int64Value)
		if err := ss.RecvMsg(in); err == io.EOF {
			return ss.SendMsg(wrapperspb.Int64(total))
		} else if err != nil {
			return err
		}
		total += in.GetValue()
	}
}

func (s *server) chat(ss grpc.ServerStream) error {
	if err := s.enter(ss.Context(), "/test.Limited/Chat"); err != nil {
		return err
	}
	defer s.leave("/test.Limited/Chat")
	for {
		in := new(wrapperspb.StringValue)
		if err := ss.RecvMsg(in); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if err := ss.SendMsg(in); err != nil {
			return err
		}
	}
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: service,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Echo",
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			return srv.(*server).echo(ctx, in)
		},
	}},
	Streams: []grpc.StreamDesc{
		{StreamName: "Count", ServerStreams: true, Handler: func(srv any, ss grpc.ServerStream) error {
			in := new(wrapperspb.Int64Value)
			if err := ss.RecvMsg(in); err != nil {
				return err
			}
			return srv.(*server).count(in, ss)
		}},
		{StreamName: "Sum", ClientStreams: true, Handler: func(srv any, ss grpc.ServerStream) error { return srv.(*server).sum(ss) }},
		{StreamName: "Chat", ServerStreams: true, ClientStreams: true, Handler: func(srv any, ss grpc.ServerStream) error { return srv.(*server).chat(ss) }},
	},
}

var (
	countDesc = &grpc.StreamDesc{StreamName: "Count", ServerStreams: true}
	sumDesc   = &grpc.StreamDesc{StreamName: "Sum", ClientStreams: true}
	chatDesc  = &grpc.StreamDesc{StreamName: "Chat", ServerStreams: true, ClientStreams: true}
)

// serve serves srv on an in-memory listener and returns a dialer for
// grpc.WithContextDialer and a function that stops the server.
func serve(srv *server) (dialer func(context.Context, string) (net.Conn, error), stop func()) {
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	gs.RegisterService(&serviceDesc, srv)
	go gs.Serve(lis)
	return func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }, func() {
		gs.Stop()
		lis.Close()
	}
}

// dial serves srv (serve) and returns a client through the interceptors
// over pool, with grpc-go's retries off (see the package doc). Both are
// stopped by stop, which tests call before checking for leaked goroutines
// (and Cleanup calls again, harmlessly).
func dial(tb testing.TB, srv *server, pool *clientpool.Pool, opts ...grpcsem.Option) (conn *grpc.ClientConn, stop func()) {
	tb.Helper()
	dialer, stopServer := serve(srv)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(dialer),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableRetry(),
		grpc.WithUnaryInterceptor(grpcsem.UnaryClientInterceptor(pool, opts...)),
		grpc.WithStreamInterceptor(grpcsem.StreamClientInterceptor(pool, opts...)))
	if err != nil {
		stopServer()
		tb.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			conn.Close()
			stopServer()
		})
	}
	tb.Cleanup(stop)
	return conn, stop
}

// table is the client's table for the test service: one rule "rpc" of n
// units per w under the completion window (the default) with at most c
// units in flight, each method at its weight, and a rule "acct" keyed by
// the metadata "x-account" (unlimited in practice), the one a throttle
// pauses (PauseOnThrottle), so that tests pause one account at a time.
func table(n int64, w time.Duration, c int64) clientpool.Table {
	t := clientpool.Table{Rules: []clientpool.Rule{
		{Name: "rpc", Limit: limit(n, w), MaxUnitsInFlight: c},
		{Name: "acct", Limit: limit(1_000_000, time.Second), Key: accountKey, PauseOnThrottle: true},
	}}
	for m, w := range weights {
		t.Endpoints = append(t.Endpoints, clientpool.Endpoint{Path: m, Costs: []clientpool.Cost{{Rule: "rpc", Units: w}, {Rule: "acct", Units: 1}}})
	}
	return t
}

func limit(n int64, per time.Duration) window.Limit { return window.Limit{N: n, Per: per} }

// accountKey keys a call by its metadata "x-account" ("" without one).
func accountKey(r *http.Request) (string, bool) { return r.Header.Get("X-Account"), true }
