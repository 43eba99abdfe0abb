package httpclient_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/redisrate"
	"github.com/ratesem/ratesem/redistest"
)

// TestHrevPoolHoldThenClose: under NewPool, in process and over Redis, a
// request cancelled before its response keeps its charges (Snapshot's
// InFlight) through the hold (1 s before any response), even when the Pool
// is closed meanwhile, and then releases them once: InFlight reaches 0, a
// second request gets through afterwards in process, and no goroutine is
// left (TestMain's goleak).
func TestHrevPoolHoldThenClose(t *testing.T) {
	for _, mode := range []string{"process", "redis"} {
		t.Run(mode, func(t *testing.T) {
			var opts []clientpool.Option
			if mode == "redis" {
				rs := redistest.Start(t)
				rc := goredis.NewClient(&goredis.Options{Addr: rs.Addr()})
				t.Cleanup(func() { rc.Close() })
				opts = append(opts, redisrate.Shared(rc, "hrev-hold"))
			}
			p, err := clientpool.New(keyedTable(false), opts...)
			if err != nil {
				t.Fatal(err)
			}
			inFlight := func() (n int64) {
				for _, k := range p.Snapshot() {
					n += k.InFlight
				}
				return n
			}
			tr := httpclient.NewPool(p, httpclient.WithBase(roundTripFunc(func(r *http.Request) (*http.Response, error) {
				return nil, context.Canceled // cancelled below the Transport, nothing heard back
			})))
			req, _ := http.NewRequest(http.MethodGet, "http://api.test/o?instId=a", nil)
			start := time.Now()
			if _, err := tr.RoundTrip(req); err == nil {
				t.Fatal("no error")
			}
			if got := inFlight(); got != 1 {
				t.Fatalf("right after the cancel InFlight = %d, want 1 (held)", got)
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			for inFlight() != 0 {
				if time.Since(start) > 3*time.Second {
					t.Fatalf("InFlight %d after %v, want 0 after the 1 s hold", inFlight(), time.Since(start))
				}
				time.Sleep(time.Millisecond)
			}
			if el := time.Since(start); el < 900*time.Millisecond {
				t.Errorf("released after %v, before the hold of 1 s", el)
			}
			time.Sleep(50 * time.Millisecond) // a second release, if any, would show
			if got := inFlight(); got != 0 {
				t.Errorf("InFlight %d after the release", got)
			}
		})
	}
}
