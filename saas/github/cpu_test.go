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

// cpuFanOut sends 950 REST requests and 60 GraphQL requests of one token
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
	for i := range 900 {
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
// that the test can fail. (The server counts a request's time at its end:
// the control is refused once an arrival finds a minute's answers over
// 90 s; with fewer requests, all may have arrived before.)
func TestCPUTimeFanOut(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st, all, gql, took := cpuFanOut(t, github.Table(), seed)
				t.Logf("preset: accepted %d, rejected %v, peak server time per minute %v (GraphQL %v), took %v", st.Accepted, st.Rejected, all, gql, took)
				if len(st.Rejected) != 0 || st.Accepted != 1010 {
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

// The rules on server time: every request under RuleCPU, a GraphQL request
// also under RuleGraphQLCPU and not under RuleCore, each for the estimate
// in ms; an estimate ≤ 0 is the default, one over the GraphQL budget that
// budget.
func TestCPURules(t *testing.T) {
	for _, c := range []struct {
		opt  []github.Option
		want int64
	}{
		{nil, 1000},
		{[]github.Option{github.WithCPUEstimate(2500*time.Millisecond + 1)}, 2501},
		{[]github.Option{github.WithCPUEstimate(-time.Hour)}, 1000},
		{[]github.Option{github.WithCPUEstimate(time.Duration(1<<63 - 1))}, github.GraphQLCPUPerMinute},
	} {
		table := github.Table(c.opt...)
		pool, err := clientpool.New(table)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range table.Rules {
			if r.Name == github.RuleCPU || r.Name == github.RuleGraphQLCPU {
				if r.TimeUnit != github.CPUUnit || r.Source != github.DocsURL {
					t.Errorf("%s: TimeUnit %v, Source %q", r.Name, r.TimeUnit, r.Source)
				}
			}
		}
		charges := func(method, path string) map[string]int64 {
			req, _ := http.NewRequest(method, "https://api.github.com"+path, strings.NewReader(`{}`))
			req.Header.Set("Authorization", "Bearer x")
			cs, err := pool.Classify(req)
			if err != nil {
				t.Fatal(err)
			}
			m := map[string]int64{}
			for _, ch := range cs {
				m[ch.Rule] = ch.Weight
			}
			return m
		}
		rest := charges("GET", "/repos/o/r/issues")
		if rest[github.RuleCPU] != c.want || rest[github.RuleGraphQLCPU] != 0 {
			t.Errorf("%v: REST charges %v, want %s %d", c.opt, rest, github.RuleCPU, c.want)
		}
		gql := charges("POST", github.GraphQLPath)
		if _, core := gql[github.RuleCore]; core || gql[github.RuleCPU] != c.want || gql[github.RuleGraphQLCPU] != c.want {
			t.Errorf("GraphQL charges %v", gql)
		}
	}
}

// Under WithScale the unit and the budgets are divided by the scale; N
// units of the unit never exceed a scaled budget, and N stays ≥ 1.
func TestCPUUnitsScaled(t *testing.T) {
	for _, f := range []float64{0, -1, 1, 60, 360, 7, 1e6, 1e9, 1e18} {
		unit, cpu, gql := github.CPUUnits(f)
		scale := f
		if !(f > 0) {
			scale = 1
		}
		budget := time.Duration(float64(90*time.Second) / scale)
		gbudget := time.Duration(float64(60*time.Second) / scale)
		if unit <= 0 || cpu < 1 || gql < 1 {
			t.Fatalf("scale %v: unit %v, N %d and %d", f, unit, cpu, gql)
		}
		if budget >= time.Microsecond && (time.Duration(cpu)*unit > budget || time.Duration(gql)*unit > gbudget) {
			t.Errorf("scale %v: %d × %v > %v, or %d × %v > %v", f, cpu, unit, budget, gql, unit, gbudget)
		}
		if f == 1 && (unit != time.Millisecond || cpu != 90_000 || gql != 60_000) {
			t.Errorf("unscaled: %v, %d, %d", unit, cpu, gql)
		}
	}
}
