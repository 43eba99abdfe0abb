package httpclient_test

import (
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/window"
)

// NewPool feeds adaptive rules (clientpool.Adaptive): a 503 cuts the key's
// level and pauses nothing (as before: an overloaded server is not a
// client over its quota); a 429 cuts it and pauses the key; a 200 is a
// success, no cut.
func TestPoolAdaptiveSignals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		status := http.StatusOK
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			return reply(req, status, nil), nil
		})
		p := mustPool(t, clientpool.Table{Rules: []clientpool.Rule{{
			Name: "api", Limit: window.Limit{N: 10, Per: time.Second}, Adapt: &clientpool.Adaptive{Floor: 2},
		}}, Default: []clientpool.Cost{{Rule: "api"}}})
		c := &http.Client{Transport: httpclient.NewPool(p, httpclient.WithBase(base))}
		level := func() (int64, bool) {
			ks := p.Snapshot()
			if len(ks) != 1 {
				t.Fatalf("snapshot %+v", ks)
			}
			return ks[0].Limit.N, !ks[0].PausedUntil.IsZero()
		}
		get(t, c, "http://x/a")
		if n, paused := level(); n != 10 || paused {
			t.Fatalf("after a 200: level %d, paused %v; want 10, not paused", n, paused)
		}
		time.Sleep(100 * time.Millisecond)
		status = http.StatusServiceUnavailable
		get(t, c, "http://x/a")
		n, paused := level()
		if n >= 10 || paused {
			t.Fatalf("after a 503: level %d, paused %v; want a cut, not paused", n, paused)
		}
		time.Sleep(2 * time.Second)
		status = http.StatusTooManyRequests
		get(t, c, "http://x/a")
		if n2, paused := level(); !paused || n2 > n {
			t.Fatalf("after a 429: level %d (was %d), paused %v; want a pause", n2, n, paused)
		}
	})
}
