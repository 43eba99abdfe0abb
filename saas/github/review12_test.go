package github_test

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/saas/github"
)

// Endpoint's doc promises "coarser than GitHub's own notion at worst, never
// finer", but a segment that is neither numeric nor owner/repo/user/org (a
// commit SHA, a tree SHA, a branch, a file path under contents/) makes a new
// endpoint per value: each gets its own 900 points per minute, so a crawl of
// commits or files spends many times the per-endpoint limit at GitHub, and
// every value is a new key in the pool (memory).
func TestReview12EndpointFinerThanGitHub(t *testing.T) {
	for _, c := range [][2]string{
		{"/repos/o/r/commits/0a1b2c3d4e", "/repos/o/r/commits/ffee998877"},
		{"/repos/o/r/git/trees/0a1b2c3d4e", "/repos/o/r/git/trees/ffee998877"},
		{"/repos/o/r/contents/a.txt", "/repos/o/r/contents/b.txt"},
		{"/repos/o/r/branches/main", "/repos/o/r/branches/dev"},
		{"/gists/aa11bb22", "/gists/cc33dd44"},
	} {
		if a, b := github.Endpoint(c[0]), github.Endpoint(c[1]); a != b {
			t.Errorf("Endpoint(%s) = %s, Endpoint(%s) = %s: one GitHub endpoint, two budgets", c[0], a, c[1], b)
		}
	}
}

// The same defect through the pool: 1000 GETs of distinct commits of one
// repository (one endpoint at GitHub, 900 points per minute) all start
// within a second, the core limit being known and large.
func TestReview12PointsPerEndpointExceeded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pool, err := clientpool.New(github.Table(github.WithCoreLimit(100000)))
		if err != nil {
			t.Fatal(err)
		}
		var sent atomic.Int64
		base := rtFunc(func(r *http.Request) (*http.Response, error) {
			sent.Add(1)
			return &http.Response{StatusCode: 200, Header: http.Header{}, Request: r, Body: http.NoBody}, nil
		})
		c := &http.Client{Transport: httpclient.NewPool(pool, httpclient.WithBase(base))}
		var wg sync.WaitGroup
		for i := range 1000 {
			wg.Go(func() {
				req, _ := http.NewRequest("GET", fmt.Sprintf("http://api.test/repos/o/r/commits/%040x", i+0xabc), nil)
				req.Header.Set("Authorization", "Bearer t")
				if resp, err := c.Do(req); err == nil {
					resp.Body.Close()
				}
			})
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if n := sent.Load(); n > github.PointsPerMinute {
			t.Errorf("%d GETs of one endpoint sent within a second, want ≤ %d", n, github.PointsPerMinute)
		}
		time.Sleep(2 * time.Minute)
		wg.Wait()
	})
}

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Search code has its own primary limit at GitHub (resource code_search, 10
// per minute; DocsURL and docs.github.com/rest/search/search "Rate limit"),
// but the preset counts /search/code under RuleSearch, which learns only
// resource "search" (30 per minute): once a search of issues taught the
// budget, 20 code searches start in the same minute, and GitHub throttles
// the 11th on.
func TestReview12CodeSearchOwnLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pool, err := clientpool.New(github.Table())
		if err != nil {
			t.Fatal(err)
		}
		reset := strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)
		var code atomic.Int64
		base := rtFunc(func(r *http.Request) (*http.Response, error) {
			h := http.Header{}
			h.Set(github.HeaderReset, reset)
			if strings.HasPrefix(r.URL.Path, "/search/code") {
				n := code.Add(1)
				h.Set(github.HeaderResource, "code_search")
				h.Set(github.HeaderLimit, "10")
				h.Set(github.HeaderRemaining, strconv.FormatInt(max(10-n, 0), 10))
			} else {
				h.Set(github.HeaderResource, "search")
				h.Set(github.HeaderLimit, "30")
				h.Set(github.HeaderRemaining, "29")
			}
			return &http.Response{StatusCode: 200, Header: h, Request: r, Body: http.NoBody}, nil
		})
		c := &http.Client{Transport: httpclient.NewPool(pool, httpclient.WithBase(base))}
		get := func(path string) {
			req, _ := http.NewRequest("GET", "http://api.test"+path, nil)
			req.Header.Set("Authorization", "Bearer t")
			if resp, err := c.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
		get("/search/issues?q=x")
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() { get("/search/code?q=x") })
		}
		time.Sleep(50 * time.Second)
		synctest.Wait()
		if n := code.Load(); n > 10 {
			t.Errorf("%d code searches sent within the minute, GitHub allows 10", n)
		}
		time.Sleep(5 * time.Minute)
		wg.Wait()
	})
}

// The primary limit is per token, but "not learned yet" is per rule: once
// token A's first reply taught the limit, token B (another user, maybe
// with nothing left) has no budget and starts as many requests as the
// concurrency cap lets before its own first reply, instead of one at a time.
func TestReview12SecondTokenNotConservative(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pool, err := clientpool.New(github.Table())
		if err != nil {
			t.Fatal(err)
		}
		reset := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
		release := make(chan struct{})
		var inB, maxB atomic.Int64
		base := rtFunc(func(r *http.Request) (*http.Response, error) {
			h := http.Header{}
			h.Set(github.HeaderResource, "core")
			h.Set(github.HeaderLimit, "5000")
			h.Set(github.HeaderReset, reset)
			h.Set(github.HeaderRemaining, "4999")
			if r.Header.Get("Authorization") == "Bearer b" {
				h.Set(github.HeaderRemaining, "0")
				if n := inB.Add(1); n > maxB.Load() {
					maxB.Store(n)
				}
				<-release
				inB.Add(-1)
			}
			return &http.Response{StatusCode: 200, Header: h, Request: r, Body: http.NoBody}, nil
		})
		c := &http.Client{Transport: httpclient.NewPool(pool, httpclient.WithBase(base))}
		get := func(tok string, i int) {
			req, _ := http.NewRequest("GET", fmt.Sprintf("http://api.test/repos/o/r/issues/%d", i), nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			if resp, err := c.Do(req); err == nil {
				resp.Body.Close()
			}
		}
		get("a", 0)
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() { get("b", i) })
		}
		synctest.Wait()
		got := maxB.Load()
		close(release)
		wg.Wait()
		if got > 1 {
			t.Errorf("token b, whose budget was never learned, had %d requests in flight before its first reply, want 1", got)
		}
	})
}
