package github_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/saas/github"
	"github.com/ratesem/ratesem/saas/saastest"
	"github.com/ratesem/ratesem/window"
)

// A crawl with no limit given up front, from a token another program has
// already used most of, through the preset: the limit is learned from the
// first response, no request is rejected, and the server's log shows every
// secondary limit held (points per endpoint per minute, requests in
// flight, content creation per minute and per hour).
func TestCrawlAgainstServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := saastest.NewGitHub(saastest.GitHubConfig{
			InMemory: true, Limit: 3000, InitialUsed: 2500,
			Latency: func() time.Duration {
				return 50*time.Millisecond + time.Duration(rand.Int64N(int64(400*time.Millisecond)))
			},
		})
		defer srv.Close()
		pool, err := clientpool.New(github.Table())
		if err != nil {
			t.Fatal(err)
		}
		client := &http.Client{Transport: httpclient.NewPool(pool, httpclient.WithBase(srv.Client().Transport),
			httpclient.WithThrottledBody(github.Throttled))}
		send := func(method, path string) {
			req, _ := http.NewRequest(method, srv.URL()+path, strings.NewReader(`{"title":"x"}`))
			req.Header.Set("Authorization", "Bearer crawler")
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		var wg sync.WaitGroup
		for i := range 1200 {
			wg.Go(func() { send("GET", fmt.Sprintf("/repos/octo/hello/issues/%d", i)) })
		}
		for i := range 150 {
			wg.Go(func() { send("POST", fmt.Sprintf("/repos/octo/r%d/issues", i%3)) })
		}
		for i := range 100 {
			wg.Go(func() { send("GET", fmt.Sprintf("/users/u%d/repos", i)) })
		}
		wg.Wait()
		if st := srv.Stats(); len(st.Rejected) != 0 || st.Accepted != 1450 {
			t.Fatalf("accepted %d, rejected %v", st.Accepted, st.Rejected)
		}
		if l, _ := pool.Limit(github.RuleCore); l != (window.Limit{N: 3000, Per: time.Hour}) {
			t.Fatalf("core limit learned: %v", l)
		}
		if p := srv.PeakPoints(); p > github.PointsPerMinute {
			t.Errorf("peak points per endpoint per minute %d > %d", p, github.PointsPerMinute)
		}
		if p := srv.PeakInFlight(); p > github.MaxConcurrent {
			t.Errorf("peak in flight %d > %d", p, github.MaxConcurrent)
		}
		if m, h := srv.PeakCreates(); m > github.CreatesPerMinute || h > github.CreatesPerHour {
			t.Errorf("peak content creation %d per minute, %d per hour", m, h)
		}
		if v := srv.Violations(); len(v) != 0 {
			t.Errorf("%d violations", len(v))
		}
		log := srv.Log()
		t.Logf("1450 requests in %v; peak points %d, in flight %d", log[len(log)-1].At.Sub(log[0].At), srv.PeakPoints(), srv.PeakInFlight())
	})
}

// Endpoint names the parts GitHub's endpoints vary by.
func TestEndpoint(t *testing.T) {
	for p, want := range map[string]string{
		"/repos/octo/hello/issues/42":          "/repos/{owner}/{repo}/issues/*",
		"/repos/octo/hello/issues/42/comments": "/repos/{owner}/{repo}/issues/*",
		"/repos/octo/hello/issues":             "/repos/{owner}/{repo}/issues",
		"/repos/o/r/commits/abc123def":         "/repos/{owner}/{repo}/commits/*",
		"/repos/o/r":                           "/repos/{owner}/{repo}",
		"/users/alice/repos":                   "/users/{user}/repos",
		"/orgs/acme/members":                   "/orgs/{org}/members",
		"/search/code":                         "/search/*",
		"/gists/aa11":                          "/gists/*",
		"/user":                                "/user",
		"/":                                    "/",
	} {
		if got := github.Endpoint(p); got != want {
			t.Errorf("Endpoint(%q) = %q, want %q", p, got, want)
		}
	}
}

// Throttled recognises GitHub's throttles only.
func TestThrottled(t *testing.T) {
	h := func(kv ...string) http.Header {
		x := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			x.Set(kv[i], kv[i+1])
		}
		return x
	}
	cases := []struct {
		status int
		h      http.Header
		want   bool
	}{
		{429, h(), true},
		{403, h("Retry-After", "60"), true},
		{403, h("x-ratelimit-remaining", "0"), true},
		{403, h("x-ratelimit-remaining", "12"), false}, // a permission error
		{404, h("Retry-After", "60"), false},
		{200, h("x-ratelimit-remaining", "0"), false},
	}
	for _, c := range cases {
		if got := github.Throttled(c.status, c.h, nil); got != c.want {
			t.Errorf("Throttled(%d, %v) = %v", c.status, c.h, got)
		}
	}
}

// Hostile primary-limit headers teach nothing (a limit of 20 digits, a
// sign, another resource's report) or are taken at their bounds (a reset
// in the past or 2^40 seconds away is no window end); a sane report after
// them is learned.
func TestLearnHostileHeaders(t *testing.T) {
	pool, err := clientpool.New(github.Table())
	if err != nil {
		t.Fatal(err)
	}
	observe := func(kv ...string) window.Limit {
		req, _ := http.NewRequest("GET", "http://api.test/repos/o/r", nil)
		req.Header.Set("Authorization", "Bearer t")
		charges, err := pool.Classify(req)
		if err != nil {
			t.Fatal(err)
		}
		tk, err := pool.Acquire(context.Background(), charges...)
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		tk.ObserveHeaders(h)
		tk.Release()
		l, _ := pool.Limit(github.RuleCore)
		return l
	}
	for _, bad := range [][]string{
		{github.HeaderLimit, "99999999999999999999", github.HeaderRemaining, "1"},
		{github.HeaderLimit, "-5000", github.HeaderRemaining, "1"},
		{github.HeaderLimit, "5000 ", github.HeaderRemaining, "1"},
		{github.HeaderLimit, "5000", github.HeaderResource, "search"},
		{github.HeaderLimit, "0"},
	} {
		if l := observe(bad...); l.N != 0 {
			t.Fatalf("%v taught the limit %v", bad, l)
		}
	}
	far := strconv.FormatInt(1<<40, 10)
	if l := observe(github.HeaderLimit, "5000", github.HeaderRemaining, "4999", github.HeaderReset, far, github.HeaderResource, "core"); l.N != 5000 {
		t.Fatalf("a sane limit with an absurd reset: learned %v", l)
	}
	if l := observe(github.HeaderLimit, "4000", github.HeaderRemaining, "3999", github.HeaderReset, "1", github.HeaderResource, "core"); l.N != 4000 {
		t.Fatalf("a limit change with a reset in 1970: learned %v", l)
	}
}
