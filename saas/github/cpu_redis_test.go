package github_test

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/redisrate"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/saas/github"
	"github.com/ratesem/ratesem/saas/saastest"
)

// fleetCPU runs 3 processes' pools (made by newPool) of one token, 30
// requests each at once, against a GitHub server on a scaled clock (a
// minute of 2 s: 3 s of server time per 2 s) that enforces the limit on
// server time, each request taking 20 ms to 80 ms of it; it returns the
// server's statistics, its peak server time per (scaled) minute and the
// longest server time of a request.
func fleetCPU(t *testing.T, newPool func() *clientpool.Pool) (st saastest.Stats, peak, longest time.Duration) {
	const scale = 30
	srv := saastest.NewGitHub(saastest.GitHubConfig{
		InMemory: true, CPUTime: true, Scale: scale,
		ServerTime: func(*http.Request) time.Duration {
			return 20*time.Millisecond + time.Duration(rand.Int64N(int64(60*time.Millisecond)))
		},
	})
	defer srv.Close()
	var wg sync.WaitGroup
	for p := range 3 {
		client := &http.Client{Transport: httpclient.NewPool(newPool(), httpclient.WithBase(srv.Client().Transport),
			httpclient.WithThrottledBody(github.Throttled))}
		for i := range 30 {
			wg.Go(func() {
				req, _ := http.NewRequest("GET", fmt.Sprintf("%s/repos/octo/p%d/issues/%d", srv.URL(), p, i), nil)
				req.Header.Set("Authorization", "Bearer fleet")
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			})
		}
	}
	wg.Wait()
	for _, e := range srv.Log() {
		if e.Accepted() {
			longest = max(longest, e.Done.Sub(e.At))
		}
	}
	peak, _ = srv.PeakCPU()
	return srv.Stats(), peak, longest
}

// A fleet of 3 processes sharing one token over Redis (redisrate.Shared)
// holds GitHub's limit on server time together: the calls settle to their
// duration in Redis, so no process is refused for it. The control, 3
// processes that each hold the limit alone, is refused. Real time: a
// request stretched past its estimate (500 ms, for 20 ms to 80 ms of work)
// by a loaded machine counts only its estimate while in flight (see
// clientpool.Rule.TimeUnit), and the test then cannot judge: it skips.
func TestCPUTimeFleetRedis(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: redistest.Start(t).Addr(), MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	const estimate = 500 * time.Millisecond
	table := github.Table(github.WithScale(30), github.WithCPUEstimate(estimate))
	start := time.Now()
	st, peak, longest := fleetCPU(t, func() *clientpool.Pool {
		p, err := clientpool.New(table, redisrate.Shared(c, "cpufleet"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	})
	t.Logf("fleet over Redis: accepted %d, rejected %v, peak server time per scaled minute %v of 3s, longest request %v, took %v",
		st.Accepted, st.Rejected, peak, longest, time.Since(start))
	if longest > estimate {
		t.Skipf("a request took %v of server time, more than its estimate %v: the machine is too loaded to judge", longest, estimate)
	}
	if len(st.Rejected) != 0 || st.Accepted != 90 {
		t.Errorf("fleet over Redis: accepted %d, rejected %v", st.Accepted, st.Rejected)
	}
	if peak > 3*time.Second {
		t.Errorf("peak server time per scaled minute %v > 3s", peak)
	}
	start = time.Now()
	st, peak, _ = fleetCPU(t, func() *clientpool.Pool {
		p, err := clientpool.New(table)
		if err != nil {
			t.Fatal(err)
		}
		return p
	})
	t.Logf("control, 3 processes alone: accepted %d, rejected %v, peak %v, took %v", st.Accepted, st.Rejected, peak, time.Since(start))
	if st.Rejected[saastest.LimitCPU] == 0 {
		t.Errorf("control: no rejection for server time (%v)", st.Rejected)
	}
}
