package grpcsem_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/grpcsem"
)

// TestProxyThrottles checks the throttles a proxy in front of a gRPC
// server sends: Envoy's rate limit filter's UNAVAILABLE with
// x-envoy-ratelimited, a retry-after trailer when there is no pushback,
// and a plain HTTP 429 from a proxy that does not speak gRPC, which grpc-go
// reports as UNAVAILABLE; and that a plain 503 is no throttle.
func TestProxyThrottles(t *testing.T) {
	srv := newServer(1000, time.Second, 100)
	pool := newPool(t, table(1000, time.Second, 100), clientpool.WithMaxPause(3*time.Second))
	conn, _ := dial(t, srv, pool, grpcsem.WithMaxPushback(time.Second))
	const slack = 100 * time.Millisecond
	backoff := [2]time.Duration{100 * time.Millisecond, 200*time.Millisecond + slack}
	for i, c := range []struct {
		code    string
		trailer []string
		want    [2]time.Duration // {0, 0}: not paused
	}{
		{"14", []string{"x-envoy-ratelimited=true"}, backoff},
		{"14", []string{"x-envoy-ratelimited=true", "retry-after=1"}, [2]time.Duration{time.Second, time.Second + 150*time.Millisecond + slack}},
		{"8", []string{"retry-after=0"}, backoff},
		{"8", []string{"retry-after=Wed, 21 Oct 2015 07:28:00 GMT"}, backoff}, // in the past
		{"8", []string{"retry-after=soon"}, backoff},
		{"8", []string{"retry-after=99999999999999"}, [2]time.Duration{time.Second, time.Second + 150*time.Millisecond + slack}},
		{"8", []string{"retry-after=2", "grpc-retry-pushback-ms=300"}, [2]time.Duration{300 * time.Millisecond, 380*time.Millisecond + slack}}, // the pushback wins
		{"8", []string{"retry-after=1", "grpc-retry-pushback-ms=-1"}, [2]time.Duration{time.Second, time.Second + 150*time.Millisecond + slack}},
		{"14", []string{"retry-after=1"}, [2]time.Duration{}}, // UNAVAILABLE with only a retry-after: not said to be the rate
		{"14", []string{"x-other=1"}, [2]time.Duration{}},
	} {
		account := "p" + string(rune('a'+i))
		kv := []string{"x-account", account, "x-reject-code", c.code}
		for _, tr := range c.trailer {
			kv = append(kv, "x-trailer", tr)
		}
		before := time.Now()
		err := echo(with(context.Background(), kv...), conn)
		if err == nil {
			t.Fatalf("%s %q: no error", c.code, c.trailer)
		}
		if d := pausedFor(pool, account, before); d < c.want[0] || d > c.want[1] {
			t.Errorf("code %s, trailer %q: paused %v, want within [%v, %v]", c.code, c.trailer, d, c.want[0], c.want[1])
		}
	}

	for _, c := range []struct {
		status int
		paused bool
	}{{http.StatusTooManyRequests, true}, {http.StatusServiceUnavailable, false}} {
		lis := bufconn.Listen(1 << 16)
		hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "60") // lost: grpc-go keeps no header of a non-gRPC reply
			http.Error(w, "slow down", c.status)
		})}
		hs.Protocols = new(http.Protocols)
		hs.Protocols.SetUnencryptedHTTP2(true)
		go hs.Serve(lis)
		proxied, err := grpc.NewClient("passthrough:///proxy",
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDisableRetry(),
			grpc.WithUnaryInterceptor(grpcsem.UnaryClientInterceptor(pool)))
		if err != nil {
			t.Fatal(err)
		}
		account := "http" + string(rune('0'+c.status%10))
		before := time.Now()
		err = echo(with(context.Background(), "x-account", account), proxied)
		st := status.Convert(err)
		if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), http.StatusText(c.status)) {
			t.Errorf("HTTP %d from a proxy: %v, want UNAVAILABLE naming it", c.status, err)
		}
		if d := pausedFor(pool, account, before); (d > 0) != c.paused || (c.paused && (d < backoff[0] || d > backoff[1])) {
			t.Errorf("HTTP %d from a proxy: paused %v, want paused %v (with backoff)", c.status, d, c.paused)
		}
		proxied.Close()
		hs.Close()
		lis.Close()
	}
	settle(t, pool, false)
}
