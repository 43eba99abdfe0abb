package grpcsem_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratesem/ratesem/grpcsem"
)

// BenchmarkUnary measures a unary RPC over an in-memory connection without
// and with the interceptor (a limit it never reaches, so that only its cost
// shows): classify, acquire, read the trailer, release.
func BenchmarkUnary(b *testing.B) {
	srv := newServer(1<<40, time.Nanosecond, 1<<40)
	srv.work = 0
	pool := newPool(b, table(1<<40, time.Millisecond, 0))
	dialer, stop := serve(srv)
	defer stop()
	for _, c := range []struct {
		name string
		opts []grpc.DialOption
	}{
		{"plain", nil},
		{"interceptor", []grpc.DialOption{grpc.WithUnaryInterceptor(grpcsem.UnaryClientInterceptor(pool))}},
	} {
		b.Run(c.name, func(b *testing.B) {
			conn, err := grpc.NewClient("passthrough:///bufnet", append([]grpc.DialOption{grpc.WithContextDialer(dialer),
				grpc.WithTransportCredentials(insecure.NewCredentials())}, c.opts...)...)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			in, out := wrapperspb.String("hi"), new(wrapperspb.StringValue)
			b.ReportAllocs()
			for b.Loop() {
				if err := conn.Invoke(context.Background(), "/test.Limited/Echo", in, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
