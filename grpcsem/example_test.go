package grpcsem_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/grpcsem"
	"github.com/ratesem/ratesem/window"
)

// A gRPC client limited to 5 units per 100 ms (counted from each RPC's
// end, the completion window) fans out 12 RPCs at once to a server that
// enforces as much: none is over its limit.
func ExampleUnaryClientInterceptor() {
	pool, err := clientpool.New(clientpool.Table{
		Rules: []clientpool.Rule{{Name: "rpc", Limit: window.Limit{N: 5, Per: 100 * time.Millisecond}}},
		Endpoints: []clientpool.Endpoint{
			{Path: "/test.Limited/Count", Costs: []clientpool.Cost{{Rule: "rpc", Units: 2}}},
		},
		Default: []clientpool.Cost{{Rule: "rpc", Units: 1}}, // every other method
	})
	if err != nil {
		panic(err)
	}
	srv := newServer(5, 100*time.Millisecond, 5) // counts arrivals, and those over its limit
	dialer, stop := serve(srv)
	defer stop()

	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(dialer),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableRetry(), // grpc-go's retries would run below the interceptor
		grpc.WithUnaryInterceptor(grpcsem.UnaryClientInterceptor(pool)),
		grpc.WithStreamInterceptor(grpcsem.StreamClientInterceptor(pool)))
	if err != nil {
		panic(err)
	}
	defer conn.Close()

	var wg sync.WaitGroup
	for range 12 {
		wg.Go(func() {
			if err := conn.Invoke(context.Background(), "/test.Limited/Echo", wrapperspb.String("hi"), new(wrapperspb.StringValue)); err != nil {
				fmt.Println(err)
			}
		})
	}
	wg.Wait()
	st := srv.stats()
	fmt.Printf("%d RPCs sent, %d over the server's limit\n", st.arrivals, st.violations)
	// Output: 12 RPCs sent, 0 over the server's limit
}

// An RPC is priced as the HTTP/2 request it is: a path per method (or per
// service, with a trailing slash), a key from the outgoing metadata, a
// weight from the request message.
func ExampleRequest() {
	pool, err := clientpool.New(clientpool.Table{
		Rules: []clientpool.Rule{{
			Name:  "tenant",
			Limit: window.Limit{N: 100, Per: time.Second},
			Key:   func(r *http.Request) (string, bool) { return r.Header.Get("X-Tenant"), true },
		}},
		Endpoints: []clientpool.Endpoint{
			{Path: "/store.Store/", Costs: []clientpool.Cost{{Rule: "tenant", Units: 1}}}, // every method of the service
			{Path: "/store.Store/BatchPut", Costs: []clientpool.Cost{{Rule: "tenant", Weight: func(r *http.Request) int64 {
				batch, _ := grpcsem.Message(r).(*wrapperspb.StringValue) // nil for a stream
				return int64(len(strings.Split(batch.GetValue(), ",")))
			}}}},
		},
	})
	if err != nil {
		panic(err)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-tenant", "acme")
	for _, method := range []string{"/store.Store/Get", "/store.Store/BatchPut"} {
		charges, err := pool.Classify(grpcsem.Request(ctx, "dns:///store:443", method, wrapperspb.String("a,b,c")))
		fmt.Println(method, charges, err)
	}
	// Output:
	// /store.Store/Get [tenant[acme]×1] <nil>
	// /store.Store/BatchPut [tenant[acme]×3] <nil>
}

// ParsePushback takes one value of ASCII digits, and nothing else.
func ExampleParsePushback() {
	for _, v := range [][]string{{"1500"}, {"0"}, {"-1"}, {"1.5"}, {"10", "20"}, {"99999999999999999999"}} {
		d, ok := grpcsem.ParsePushback(v)
		fmt.Println(v, d, ok)
	}
	// Output:
	// [1500] 1.5s true
	// [0] 0s true
	// [-1] 0s false
	// [1.5] 0s false
	// [10 20] 0s false
	// [99999999999999999999] 2562047h47m16.854775807s true
}
