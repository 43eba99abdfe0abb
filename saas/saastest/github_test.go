package saastest_test

import (
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/ratesem/ratesem/saas/saastest"
)

func newGitHub(t *testing.T, cfg saastest.GitHubConfig) (*saastest.GitHubServer, *http.Client) {
	cfg.InMemory = true
	s := saastest.NewGitHub(cfg)
	t.Cleanup(s.Close)
	return s, s.Client()
}

const tok = "Authorization"

func TestGitHubPrimaryRejectsExactlyAtTheLimitUntilTheReset(t *testing.T) {
	for _, status := range []int{0, 429} {
		synctest.Test(t, func(t *testing.T) {
			// Scale 7: the hour lasts 514.285714285 s, so the reset is rounded up.
			s, c := newGitHub(t, saastest.GitHubConfig{Limit: 3, Scale: 7, RejectStatus: status})
			start := time.Now()
			scale := 7.0
			end := start.Add(time.Duration(float64(time.Hour) / scale))
			wantReset := int64(math.Ceil(float64(end.UnixNano()) / 1e9))
			url := s.URL() + "/repos/o/r"
			for i := range 3 {
				r := do(t, c, "GET", url, "", tok, "token a")
				if r.status != 200 || r.num(t, "x-ratelimit-remaining") != int64(2-i) || r.num(t, "x-ratelimit-used") != int64(i+1) ||
					r.num(t, "x-ratelimit-limit") != 3 || r.header.Get("x-ratelimit-resource") != "core" {
					t.Fatalf("request %d: %d %v", i, r.status, r.header)
				}
				if got := r.num(t, "x-ratelimit-reset"); got != wantReset {
					t.Fatalf("x-ratelimit-reset = %d, want %d (window end %v rounded up)", got, wantReset, end)
				}
			}
			want := 403
			if status == 429 {
				want = 429
			}
			r := do(t, c, "GET", url, "", tok, "token a")
			if r.status != want || r.num(t, "x-ratelimit-remaining") != 0 || r.num(t, "x-ratelimit-reset") != wantReset ||
				!strings.Contains(r.str("message"), "rate limit exceeded") {
				t.Fatalf("4th: %d %v %s, want %d, remaining 0", r.status, r.header, r.raw, want)
			}
			// Another token has its own window.
			if r := do(t, c, "GET", url, "", tok, "token b"); r.status != 200 {
				t.Fatalf("other token: %d", r.status)
			}
			time.Sleep(end.Sub(time.Now()) - time.Nanosecond)
			if r := do(t, c, "GET", url, "", tok, "token a"); r.status != want {
				t.Fatalf("1 ns before the reset: %d", r.status)
			}
			time.Sleep(time.Nanosecond)
			r = do(t, c, "GET", url, "", tok, "token a")
			if r.status != 200 || r.num(t, "x-ratelimit-remaining") != 2 || r.num(t, "x-ratelimit-reset") <= wantReset {
				t.Fatalf("new window: %d %v", r.status, r.header)
			}
			st := s.Stats()
			if st.Accepted != 5 || st.Rejected[saastest.LimitPrimary] != 2 {
				t.Errorf("Stats = %+v", st)
			}
			if v := s.Violations(); len(v) != 0 {
				t.Errorf("%d violations, first %+v", len(v), v[0])
			}
		})
	}
}

func TestGitHubUnauthenticatedSearchAndInitialUsed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c := newGitHub(t, saastest.GitHubConfig{InitialUsed: 4990})
		// Without a token the limit is 60 per IP, and InitialUsed is capped at it.
		r := do(t, c, "GET", s.URL()+"/users/u", "")
		if r.status != 403 || r.num(t, "x-ratelimit-limit") != 60 || r.num(t, "x-ratelimit-used") != 60 {
			t.Errorf("unauthenticated: %d %v", r.status, r.header)
		}
		if e := s.Log()[0]; e.Key != "ip:127.0.0.1" {
			t.Errorf("unauthenticated key %q, want ip:127.0.0.1", e.Key)
		}
		r = do(t, c, "GET", s.URL()+"/users/u", "", tok, "token a")
		if r.num(t, "x-ratelimit-limit") != 5000 || r.num(t, "x-ratelimit-remaining") != 9 || r.num(t, "x-ratelimit-used") != 4991 {
			t.Errorf("part-used first window: %v", r.header)
		}
		for i := range 30 {
			r := do(t, c, "GET", s.URL()+"/search/repositories?q=go", "", tok, "token a")
			if r.status != 200 || r.header.Get("x-ratelimit-resource") != "search" || r.num(t, "x-ratelimit-remaining") != int64(29-i) {
				t.Fatalf("search %d: %d %v", i, r.status, r.header)
			}
		}
		if r := do(t, c, "GET", s.URL()+"/search/code?q=go", "", tok, "token a"); r.status != 403 {
			t.Fatalf("31st search: %d", r.status)
		}
		if r := do(t, c, "GET", s.URL()+"/repos/o/r", "", tok, "token a"); r.status != 200 {
			t.Fatalf("core after search exhausted: %d", r.status)
		}
		// The IP's first window was used up; the next one starts empty.
		time.Sleep(time.Hour)
		for i := range 60 {
			if r := do(t, c, "GET", s.URL()+"/users/u", ""); r.status != 200 {
				t.Fatalf("unauthenticated %d in the second window: %d", i, r.status)
			}
		}
		if r := do(t, c, "GET", s.URL()+"/search/code?q=go", "", tok, "token a"); r.status != 200 {
			t.Fatalf("search later: %d", r.status)
		}
		if v := s.Violations(); len(v) != 0 {
			t.Errorf("%d violations, first %+v", len(v), v[0])
		}
	})
}

func TestGitHubPointsPerEndpoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c := newGitHub(t, saastest.GitHubConfig{})
		// PATCH costs 5 points and creates nothing: 180 × 5 = 900.
		for i := range 180 {
			if r := do(t, c, "PATCH", s.URL()+"/repos/o/r/issues/1", `{"title":"x"}`, tok, "t"); r.status != 200 {
				t.Fatalf("PATCH %d: %d %s", i, r.status, r.raw)
			}
			time.Sleep(100 * time.Millisecond)
		}
		// Same endpoint (numbers are {n}): over 900.
		r := do(t, c, "PATCH", s.URL()+"/repos/o/r/issues/2", `{}`, tok, "t")
		if r.status != 403 || r.header.Get("retry-after") == "" || !strings.Contains(r.str("message"), "secondary rate limit") {
			t.Fatalf("181st PATCH: %d %v %s", r.status, r.header, r.raw)
		}
		// The first PATCH leaves the minute at t0+60s: 42 s from now (t0+18 s), rounded up.
		if got := r.num(t, "retry-after"); got != 42 {
			t.Errorf("retry-after = %d, want 42", got)
		}
		if r.num(t, "x-ratelimit-remaining") != 5000-180 {
			t.Errorf("secondary rejection shows remaining %s, want 4820", r.header.Get("x-ratelimit-remaining"))
		}
		// GET of the same path is another endpoint.
		if r := do(t, c, "GET", s.URL()+"/repos/o/r/issues/1", "", tok, "t"); r.status != 200 {
			t.Fatalf("GET: %d", r.status)
		}
		time.Sleep(42 * time.Second)
		if r := do(t, c, "PATCH", s.URL()+"/repos/o/r/issues/3", `{}`, tok, "t"); r.status != 200 {
			t.Fatalf("after the retry-after: %d %s", r.status, r.raw)
		}
		if got := s.PeakPoints(); got != 900 {
			t.Errorf("PeakPoints = %d, want 900", got)
		}
		if st := s.Stats(); st.Rejected[saastest.LimitPoints] != 1 {
			t.Errorf("Stats = %+v", st)
		}
		if v := s.Violations(); len(v) != 0 {
			t.Errorf("%d violations, first %+v", len(v), v[0])
		}
	})
}

func TestGitHubGetCostsOnePoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c := newGitHub(t, saastest.GitHubConfig{PointsPerMinute: 10})
		for i := range 10 {
			if r := do(t, c, "GET", s.URL()+"/repos/o/r/pulls", "", tok, "t"); r.status != 200 {
				t.Fatalf("GET %d: %d", i, r.status)
			}
		}
		if r := do(t, c, "HEAD", s.URL()+"/repos/o/r/pulls", "", tok, "t"); r.status != 200 {
			t.Fatalf("HEAD is another endpoint: %d", r.status)
		}
		if r := do(t, c, "GET", s.URL()+"/repos/x/y/pulls", "", tok, "t"); r.status != 403 {
			t.Fatalf("11th GET of /repos/{owner}/{repo}/pulls: %d", r.status)
		}
		if r := do(t, c, "POST", s.URL()+"/repos/o/r/pulls", "{}", tok, "t"); r.status != 201 {
			t.Fatalf("POST (5 of 10): %d", r.status)
		}
		if r := do(t, c, "DELETE", s.URL()+"/repos/o/r/pulls", "", tok, "t"); r.status != 204 {
			t.Fatalf("DELETE (5 of 10): %d", r.status)
		}
		if r := do(t, c, "GET", s.URL()+"/repos/o/r/pulls", "", tok, "u"); r.status != 200 {
			t.Fatalf("other token: %d", r.status)
		}
	})
}

func TestGitHubInFlightCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c := newGitHub(t, saastest.GitHubConfig{Latency: func() time.Duration { return time.Second }})
		var wg sync.WaitGroup
		var mu sync.Mutex
		codes := map[int]int{}
		for range 101 {
			wg.Go(func() {
				r := do(t, c, "GET", s.URL()+"/repos/o/r", "", tok, "t")
				mu.Lock()
				codes[r.status]++
				mu.Unlock()
			})
		}
		wg.Wait()
		if codes[200] != 100 || codes[403] != 1 {
			t.Fatalf("codes = %v, want 100 × 200 and 1 × 403", codes)
		}
		if st := s.Stats(); st.Rejected[saastest.LimitConcurrency] != 1 {
			t.Errorf("Stats = %+v", st)
		}
		if got := s.PeakInFlight(); got != 100 {
			t.Errorf("PeakInFlight = %d, want 100", got)
		}
		// All answered: room again.
		if r := do(t, c, "GET", s.URL()+"/repos/o/r", "", tok, "t"); r.status != 200 {
			t.Fatalf("after: %d", r.status)
		}
		for _, e := range s.Log() {
			if e.Accepted() && e.Done.Sub(e.At) != time.Second {
				t.Fatalf("entry in flight %v, want 1s", e.Done.Sub(e.At))
			}
		}
	})
}

func TestGitHubContentCreation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c := newGitHub(t, saastest.GitHubConfig{CreatesPerHour: 100})
		for i := range 80 {
			method := []string{"POST", "PUT"}[i%2]
			if r := do(t, c, method, s.URL()+"/repos/o/r/issues", `{"title":"t"}`, tok, "t"); r.status/100 != 2 {
				t.Fatalf("%s %d: %d %s", method, i, r.status, r.raw)
			}
		}
		for _, m := range []string{"POST", "PUT"} {
			r := do(t, c, m, s.URL()+"/repos/o/r/comments", `{}`, tok, "t")
			if r.status != 403 || r.num(t, "retry-after") != 60 {
				t.Fatalf("81st create (%s): %d retry-after %s", m, r.status, r.header.Get("retry-after"))
			}
		}
		if r := do(t, c, "PATCH", s.URL()+"/repos/o/r/issues/1", `{}`, tok, "t"); r.status != 200 {
			t.Fatalf("PATCH does not create: %d", r.status)
		}
		time.Sleep(time.Minute)
		for i := range 20 {
			if r := do(t, c, "POST", s.URL()+"/repos/o/r/labels", `{}`, tok, "t"); r.status != 201 {
				t.Fatalf("POST %d after a minute: %d", i, r.status)
			}
		}
		r := do(t, c, "POST", s.URL()+"/repos/o/r/labels", `{}`, tok, "t")
		if r.status != 403 || r.num(t, "retry-after") != 3540 {
			t.Fatalf("101st in the hour: %d retry-after %s, want 403 and 3540", r.status, r.header.Get("retry-after"))
		}
		st := s.Stats()
		if st.Rejected[saastest.LimitCreatesMinute] != 2 || st.Rejected[saastest.LimitCreatesHour] != 1 {
			t.Errorf("Stats = %+v", st)
		}
		if m, h := s.PeakCreates(); m != 80 || h != 100 {
			t.Errorf("PeakCreates = %d, %d, want 80, 100", m, h)
		}
		if v := s.Violations(); len(v) != 0 {
			t.Errorf("%d violations, first %+v", len(v), v[0])
		}
	})
}

func TestGitHubPagination(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c := newGitHub(t, saastest.GitHubConfig{})
		r := do(t, c, "GET", s.URL()+"/repos/o/r/issues?per_page=2", "", tok, "t")
		if r.status != 200 || !strings.HasPrefix(r.raw, "[{") || strings.Count(r.raw, `"number"`) != 2 {
			t.Fatalf("page 1: %d %s", r.status, r.raw)
		}
		link := r.header.Get("Link")
		if !strings.Contains(link, `page=2&per_page=2>; rel="next"`) || !strings.Contains(link, `page=3&per_page=2>; rel="last"`) {
			t.Errorf("Link = %q", link)
		}
		r = do(t, c, "GET", s.URL()+"/repos/o/r/issues?page=3&per_page=2", "", tok, "t")
		if r.header.Get("Link") != "" || strings.Count(r.raw, `"number"`) != 2 {
			t.Errorf("last page: Link %q body %s", r.header.Get("Link"), r.raw)
		}
		r = do(t, c, "GET", s.URL()+"/repos/o/r/issues?page=-4&per_page=100000", "", tok, "t")
		if r.status != 200 || strings.Count(r.raw, `"number"`) != 100 {
			t.Errorf("hostile page parameters: %d, %d items", r.status, strings.Count(r.raw, `"number"`))
		}
		if r := do(t, c, "GET", s.URL()+"/repos/o/r/issues/7", "", tok, "t"); r.body["url"] != "/repos/o/r/issues/7" {
			t.Errorf("object: %s", r.raw)
		}
	})
}

func TestGitHubHostileRequestsAreUncounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c := newGitHub(t, saastest.GitHubConfig{})
		cases := []struct {
			method, path, body string
			want               int
		}{
			{"POST", "/repos/o/r/issues", `{"title":`, 400},
			{"POST", "/repos/o/r/issues", `{"t":"` + strings.Repeat("x", 10<<20) + `"}`, 400},
			{"GET", "/repos/o", "", 404},
			{"GET", "/", "", 404},
			{"GET", "/orgs/x", "", 404},
			{"GET", "/repos//r", "", 404},
			{"TRACE", "/repos/o/r", "", 405},
		}
		for _, tc := range cases {
			if r := do(t, c, tc.method, s.URL()+tc.path, tc.body, tok, "t"); r.status != tc.want {
				t.Errorf("%s %s: %d, want %d", tc.method, tc.path, r.status, tc.want)
			}
		}
		if st := s.Stats(); st.Accepted != 0 || st.Rejected[saastest.LimitInvalid] != len(cases) {
			t.Errorf("Stats = %+v", st)
		}
		if r := do(t, c, "GET", s.URL()+"/repos/o/r", "", tok, "t"); r.num(t, "x-ratelimit-used") != 1 {
			t.Errorf("first valid call: used %s, want 1", r.header.Get("x-ratelimit-used"))
		}
	})
}

func TestGitHubOnAMockClock(t *testing.T) {
	mock := clock.NewMock()
	mock.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := saastest.NewGitHub(saastest.GitHubConfig{Limit: 1, Clock: mock})
	defer s.Close()
	c := s.Client()
	r := do(t, c, "GET", s.URL()+"/repos/o/r", "", tok, "t")
	if r.status != 200 || r.num(t, "x-ratelimit-reset") != mock.Now().Add(time.Hour).Unix() {
		t.Fatalf("%d reset %s", r.status, r.header.Get("x-ratelimit-reset"))
	}
	if r := do(t, c, "GET", s.URL()+"/repos/o/r", "", tok, "t"); r.status != 403 {
		t.Fatalf("2nd: %d", r.status)
	}
	mock.Add(time.Hour)
	if r := do(t, c, "GET", s.URL()+"/repos/o/r", "", tok, "t"); r.status != 200 {
		t.Fatalf("after the hour: %d", r.status)
	}
}
