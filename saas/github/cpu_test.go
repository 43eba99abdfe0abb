package github_test

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/saas/github"
	"github.com/ratesem/ratesem/saas/saastest"
)

// cpuFanOut sends 500 REST requests and 60 GraphQL requests of one token
// at once through table against a server that enforces GitHub's limit on
// server time (saastest's CPUTime: 90 s per minute, 60 s of it GraphQL),
// each request taking 100 ms to 900 ms of server time at random (searches
// and GraphQL longer), and returns the server's log statistics, its peak
// server time per minute, and the virtual time the fan-out took.
func cpuFanOut(t *testing.T, table clientpool.Table, seed uint64) (saastest.Stats, time.Duration, time.Duration, time.Duration) {
	rng := rand.New(rand.NewPCG(seed, 1))
	var mu sync.Mutex
	srv := saastest.NewGitHub(saastest.GitHubConfig{
		InMemory: true, CPUTime: true,
		ServerTime: func(r *http.Request) time.Duration {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case r.URL.Path == github.GraphQLPath, strings.HasPrefix(r.URL.Path, "/search/"):
				return 500*time.Millisecond + time.Duration(rng.Int64N(int64(400*time.Millisecond)))
			}
			return 100*time.Millisecond + time.Duration(rng.Int64N(int64(800*time.Millisecond)))
		},
	})
	defer srv.Close()
	pool, err := clientpool.New(table)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: httpclient.NewPool(pool, httpclient.WithBase(srv.Client().Transport),
		httpclient.WithThrottledBody(github.Throttled))}
	send := func(method, path, body string) {
		req, _ := http.NewRequest(method, srv.URL()+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer fanout")
		resp, err := client.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i := range 450 {
		wg.Go(func() { send("GET", fmt.Sprintf("/repos/octo/r%d/issues/%d", i%7, i), "") })
	}
	for i := range 50 {
		wg.Go(func() { send("GET", fmt.Sprintf("/search/issues?q=%d", i), "") })
	}
	for range 60 {
		wg.Go(func() { send("POST", github.GraphQLPath, `{"query":"{viewer{login}}"}`) })
	}
	wg.Wait()
	all, gql := srv.PeakCPU()
	return srv.Stats(), all, gql, time.Since(start)
}

// withoutCPU is the preset's table without its rules on server time.
func withoutCPU(table clientpool.Table) clientpool.Table {
	var out clientpool.Table
	for _, r := range table.Rules {
		if r.Name != github.RuleCPU && r.Name != github.RuleGraphQLCPU {
			out.Rules = append(out.Rules, r)
		}
	}
	for _, c := range table.Default {
		if c.Rule != github.RuleCPU && c.Rule != github.RuleGraphQLCPU {
			out.Default = append(out.Default, c)
		}
	}
	return out
}

// A fan-out through the preset against a server that enforces GitHub's
// limit on server time is never refused by it (over several seeds), and
// the server never sums more than 90 s (GraphQL 60 s) in a minute; the
// same fan-out without the preset's rules on server time is refused, so
// that the test can fail.
func TestCPUTimeFanOut(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st, all, gql, took := cpuFanOut(t, github.Table(), seed)
				t.Logf("preset: accepted %d, rejected %v, peak server time per minute %v (GraphQL %v), took %v", st.Accepted, st.Rejected, all, gql, took)
				if len(st.Rejected) != 0 || st.Accepted != 560 {
					t.Errorf("preset: accepted %d, rejected %v", st.Accepted, st.Rejected)
				}
				if all > 90*time.Second || gql > 60*time.Second {
					t.Errorf("preset: peak server time per minute %v (GraphQL %v)", all, gql)
				}
			})
			synctest.Test(t, func(t *testing.T) {
				st, all, gql, took := cpuFanOut(t, withoutCPU(github.Table()), seed)
				t.Logf("control: accepted %d, rejected %v, peak server time per minute %v (GraphQL %v), took %v", st.Accepted, st.Rejected, all, gql, took)
				if st.Rejected[saastest.LimitCPU]+st.Rejected[saastest.LimitGraphQLCPU] == 0 {
					t.Errorf("control without the rules on server time: no rejection for it (%v)", st.Rejected)
				}
			})
		})
	}
}
