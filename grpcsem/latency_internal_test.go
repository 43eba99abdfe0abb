package grpcsem

import (
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/window"
)

// TestInterceptorsOfAPoolShareLatencies: the unary and the stream
// interceptor of one Pool keep one set of times to a first reply, so a
// unary RPC's reply teaches the hold of a stream to the same target; another
// Pool's interceptors keep their own; the entry goes with its Pool.
func TestInterceptorsOfAPoolShareLatencies(t *testing.T) {
	tab := clientpool.Table{Rules: []clientpool.Rule{{Name: "r", Limit: window.Limit{N: 1, Per: time.Second}}}}
	newPool := func() *clientpool.Pool {
		p, err := clientpool.New(tab)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := newPool()
	unary, stream := newLimiter(p, nil), newLimiter(p, nil)
	unary.latency("far").Add(300 * time.Millisecond)
	if got := stream.latency("far").Hold(); got != 600*time.Millisecond {
		t.Fatalf("the stream interceptor's hold to a target the unary one heard back from in 300ms: %v, want 600ms", got)
	}
	if other := newLimiter(newPool(), nil); other.latency("far") == unary.latency("far") {
		t.Fatal("another Pool's interceptor shares the first Pool's latencies")
	}
	key := weak.Make(p)
	p, unary, stream = nil, nil, nil
	for deadline := time.Now().Add(5 * time.Second); ; {
		runtime.GC()
		if _, ok := poolLatencies.Load(key); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a collected Pool's latencies are still kept")
		}
		time.Sleep(time.Millisecond)
	}
}
