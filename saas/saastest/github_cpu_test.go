package saastest_test

import (
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/saas/saastest"
)

// CPUTime: the server sums each key's handler time (ServerTime here) over
// the requests answered in the last minute, and refuses an arrival once
// the sum has reached the budget, all requests' and GraphQL's apart, with
// retry-after until enough answered requests leave the minute.
func TestGitHubCPUTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c := newGitHub(t, saastest.GitHubConfig{
			CPUTime: true, CPUPerMinute: time.Second, GraphQLCPUPerMinute: 500 * time.Millisecond,
			ServerTime: func(r *http.Request) time.Duration {
				if r.URL.Path == "/graphql" {
					return 300 * time.Millisecond
				}
				return 200 * time.Millisecond
			},
		})
		t0 := time.Now()
		gql := func() reply { return do(t, c, "POST", s.URL()+"/graphql", `{"query":"{viewer{login}}"}`, tok, "a") }
		for i := range 2 { // 600 ms of GraphQL
			if r := gql(); r.status != 200 {
				t.Fatalf("graphql %d: %d %s", i, r.status, r.raw)
			}
		}
		r := gql()
		if r.status != 403 || !strings.Contains(r.str("message"), "secondary rate limit") || r.num(t, "retry-after") != 60 {
			t.Fatalf("3rd graphql: %d %v %s", r.status, r.header, r.raw)
		}
		for i := range 2 { // REST still has 400 ms: 2 of 200 ms
			if r := do(t, c, "GET", s.URL()+"/repos/o/r", "", tok, "a"); r.status != 200 {
				t.Fatalf("GET %d: %d", i, r.status)
			}
		}
		if r := do(t, c, "GET", s.URL()+"/repos/o/r", "", tok, "a"); r.status != 403 || r.num(t, "retry-after") != 60 {
			t.Fatalf("GET over 1 s: %d %v", r.status, r.header)
		}
		if r := do(t, c, "GET", s.URL()+"/repos/o/r", "", tok, "b"); r.status != 200 {
			t.Fatalf("another token: %d", r.status)
		}
		st := s.Stats()
		if st.Rejected[saastest.LimitGraphQLCPU] != 1 || st.Rejected[saastest.LimitCPU] != 1 {
			t.Fatalf("Stats = %+v", st)
		}
		all, g := s.PeakCPU()
		if all != time.Second || g != 600*time.Millisecond {
			t.Fatalf("PeakCPU = %v, %v; want 1s, 600ms", all, g)
		}
		// The first GraphQL request (answered at t0+300ms) leaves the
		// minute at t0+60.3s: 1 ns before, still refused (1 s summed).
		time.Sleep(t0.Add(time.Minute + 300*time.Millisecond - time.Nanosecond).Sub(time.Now()))
		if r := do(t, c, "GET", s.URL()+"/repos/o/r", "", tok, "a"); r.status != 403 {
			t.Fatalf("1 ns before the first request leaves the minute: %d", r.status)
		}
		time.Sleep(time.Nanosecond)
		if r := do(t, c, "GET", s.URL()+"/repos/o/r", "", tok, "a"); r.status != 200 {
			t.Fatalf("after the first request left the minute: %d %v", r.status, r.header)
		}
		if v := s.Violations(); len(v) != 0 {
			t.Errorf("%d violations", len(v))
		}
	})
}

// Off by default: a hundred requests of a second each are accepted.
func TestGitHubCPUTimeOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c := newGitHub(t, saastest.GitHubConfig{ServerTime: func(*http.Request) time.Duration { return 2 * time.Second }})
		for range 50 {
			if r := do(t, c, "GET", s.URL()+"/repos/o/r", "", tok, "a"); r.status != 200 {
				t.Fatalf("%d", r.status)
			}
		}
		if all, _ := s.PeakCPU(); all != 60*time.Second {
			t.Fatalf("PeakCPU %v, want 60s (30 requests of 2 s answered in a minute)", all)
		}
	})
}

func TestGitHubCPUNegativePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	saastest.NewGitHub(saastest.GitHubConfig{CPUTime: true, CPUPerMinute: -1})
}
