package github_test

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/saas/github"
	"github.com/ratesem/ratesem/saas/saastest"
)

// A crawl spends each primary window in full: the reply with the lowest
// remaining is the latest the server counted, and only the calls that
// have not reported may be missing from it (clientpool's budgetLocked). On
// the base commit the budget left out every call in flight again besides
// the calls admitted after the reply (counting those twice, and the
// reply's own call): with 100 requests in flight (GitHub's concurrency
// cap) a window of 300 saw 101-113 requests, and 800 took 83.5 s of the
// scaled hours of 10 s; now 300 and 23.8 s. Every full window must see at
// least 270 (90%), with no rejection, on a host's clock exact, ahead or
// behind.
func TestCrawlSpendsEachWindow(t *testing.T) {
	for _, skew := range []time.Duration{0, 2 * time.Second, -2 * time.Second} {
		t.Run(skew.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st, log := crawlSkewedLog(t, skew, nil)
				if len(st.Rejected) != 0 || st.Accepted != 800 {
					t.Fatalf("accepted %d, rejected %v", st.Accepted, st.Rejected)
				}
				per := map[time.Time]int{}
				var order []time.Time
				for _, e := range log {
					if !e.Accepted() {
						continue
					}
					if per[e.Reset] == 0 {
						order = append(order, e.Reset)
					}
					per[e.Reset]++
				}
				for i, r := range order {
					t.Logf("window %d: %d requests", i, per[r])
					if i < len(order)-1 && per[r] < 270 {
						t.Errorf("window %d: %d requests of 300", i, per[r])
					}
				}
			})
		})
	}
}

// Requests that reach the server in another order than they were admitted
// (0 to 40 ms between Acquire and the server, at random) change nothing:
// the budget reads the server's order from its replies, not the
// admissions'. Every full window at least 270 of 300, no rejection.
func TestCrawlReorderedArrivals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const scale = 360
		srv := saastest.NewGitHub(saastest.GitHubConfig{
			InMemory: true, Limit: 300, Scale: scale,
			Latency: func() time.Duration {
				return 20*time.Millisecond + time.Duration(rand.Int64N(int64(40*time.Millisecond)))
			},
		})
		defer srv.Close()
		pool, err := clientpool.New(github.Table(github.WithScale(scale)))
		if err != nil {
			t.Fatal(err)
		}
		base := rtFunc(func(r *http.Request) (*http.Response, error) {
			time.Sleep(time.Duration(rand.Int64N(int64(40 * time.Millisecond))))
			return srv.Client().Transport.RoundTrip(r)
		})
		client := &http.Client{Transport: httpclient.NewPool(pool, httpclient.WithBase(base),
			httpclient.WithThrottledBody(github.Throttled))}
		var wg sync.WaitGroup
		for i := range 800 {
			wg.Go(func() {
				req, _ := http.NewRequest("GET", fmt.Sprintf("%s/repos/octo/hello/issues/%d", srv.URL(), i), nil)
				req.Header.Set("Authorization", "Bearer crawler")
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			})
		}
		wg.Wait()
		st := srv.Stats()
		if v := srv.Violations(); len(v) != 0 || len(st.Rejected) != 0 || st.Accepted != 800 {
			t.Fatalf("accepted %d, rejected %v, %d violations", st.Accepted, st.Rejected, len(v))
		}
		per := map[time.Time]int{}
		var order []time.Time
		for _, e := range srv.Log() {
			if e.Accepted() {
				if per[e.Reset] == 0 {
					order = append(order, e.Reset)
				}
				per[e.Reset]++
			}
		}
		for i, r := range order {
			t.Logf("window %d: %d requests", i, per[r])
			if i < len(order)-1 && per[r] < 270 {
				t.Errorf("window %d: %d requests of 300", i, per[r])
			}
		}
	})
}
