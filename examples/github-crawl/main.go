// Command github-crawl is ratesem's SaaS example: a crawler of the GitHub
// REST API through the GitHub preset (package saas/github), given no limit up
// front, against the GitHub test server of package saas/saastest, which
// enforces the primary hourly limit per token and the secondary limits
// (https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api).
//
//	go run ./examples/github-crawl              # an hour lasts 20 s (scale 180)
//	go run ./examples/github-crawl -used 4000   # the token is 4000 requests into its hour
//
// It walks a few repositories: lists each one's issues page by page
// (following the Link header), fetches every issue, and comments on some
// (POST: 5 points, content-creating). The pool learns the token's limit and
// what remains from the first response (one request at a time until then),
// then spends the budget GitHub announced for each window. It prints
// progress every server-minute, then what the server's log shows: the limit
// learned, rejections, and the peaks of each secondary limit against its
// bound. It exits with status 1 if a request was rejected or failed, or a
// secondary limit was exceeded at the server.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/saas/github"
	"github.com/ratesem/ratesem/saas/saastest"
)

// config is one crawl.
type config struct {
	repos    int     // repositories to walk
	issues   int     // issues fetched per repository
	scale    float64 // the server's hour lasts time.Hour/scale
	limit    int64   // the token's primary limit per hour, at the server
	used     int64   // requests of the token's first window already used
	workers  int
	inMemory bool      // serve over in-memory pipes (tests, in a synctest bubble)
	progress io.Writer // nil: no progress lines
}

// result is what the server's log shows of a crawl.
type result struct {
	requests, rejected, failed int
	learned                    int64 // the core limit the pool learned
	peakPoints, peakInFlight   int64
	createsMin, createsHour    int64
	elapsed                    time.Duration // on the server's clock
}

func main() {
	var cfg config
	flag.IntVar(&cfg.repos, "repos", 12, "repositories to walk")
	flag.IntVar(&cfg.issues, "issues", 150, "issues fetched per repository")
	flag.Float64Var(&cfg.scale, "scale", 180, "the server's hour lasts time.Hour/scale")
	flag.Int64Var(&cfg.limit, "limit", 5000, "the token's primary limit per hour at the server (the crawler is not told)")
	flag.Int64Var(&cfg.used, "used", 0, "requests of the token's first hour already used by another program")
	flag.IntVar(&cfg.workers, "workers", 200, "concurrent workers")
	flag.Parse()
	cfg.progress = os.Stdout
	r, err := crawl(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("requests %d in %.1f server-minutes; rejected %d, failed %d\n", r.requests, r.elapsed.Minutes()*cfg.scale, r.rejected, r.failed)
	fmt.Printf("primary limit learned from the first response: %d per hour (server: %d)\n", r.learned, cfg.limit)
	fmt.Printf("secondary, peak at the server: %d of %d points per endpoint per minute, %d of %d in flight, %d of %d creations per minute, %d of %d per hour\n",
		r.peakPoints, github.PointsPerMinute, r.peakInFlight, github.MaxConcurrent, r.createsMin, github.CreatesPerMinute, r.createsHour, github.CreatesPerHour)
	if !r.ok(cfg) {
		os.Exit(1)
	}
}

// ok reports whether the crawl met its targets.
func (r result) ok(cfg config) bool {
	return r.rejected == 0 && r.failed == 0 && r.learned == cfg.limit &&
		r.peakPoints <= github.PointsPerMinute && r.peakInFlight <= github.MaxConcurrent &&
		r.createsMin <= github.CreatesPerMinute && r.createsHour <= github.CreatesPerHour
}

var nextLink = regexp.MustCompile(`<([^>]+)>;\s*rel="next"`)

func crawl(ctx context.Context, cfg config) (result, error) {
	srv := saastest.NewGitHub(saastest.GitHubConfig{
		Limit: cfg.limit, InitialUsed: cfg.used, Scale: cfg.scale, InMemory: cfg.inMemory, Pages: 5,
		// GitHub answers in 50 to 400 ms
		Latency: func() time.Duration {
			return time.Duration(float64(50*time.Millisecond+time.Duration(rand.Int64N(int64(350*time.Millisecond)))) / cfg.scale)
		},
	})
	defer srv.Close()
	pool, err := clientpool.New(github.Table(github.WithScale(cfg.scale)))
	if err != nil {
		return result{}, err
	}
	client := &http.Client{Transport: httpclient.NewPool(pool, httpclient.WithBase(srv.Client().Transport),
		httpclient.WithThrottledBody(github.Throttled))}
	var sent, failed atomic.Int64
	get := func(ctx context.Context, method, url string) (*http.Response, error) {
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader(`{"body":"looks good"}`)
		}
		req, err := http.NewRequestWithContext(ctx, method, url, body)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer crawler-token")
		req.Header.Set("Accept", "application/vnd.github+json")
		sent.Add(1)
		resp, err := client.Do(req)
		if err != nil || resp.StatusCode >= 300 {
			failed.Add(1)
		}
		return resp, err
	}
	drain := func(resp *http.Response) {
		if resp != nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}

	stop := make(chan struct{})
	if cfg.progress != nil {
		go func() {
			tick := time.NewTicker(time.Duration(float64(time.Minute) / cfg.scale))
			defer tick.Stop()
			for m := 1; ; m++ {
				select {
				case <-stop:
					return
				case <-tick.C:
					if m%5 == 0 {
						l, _ := pool.Limit(github.RuleCore)
						fmt.Fprintf(cfg.progress, "  minute %3d: %5d requests sent, limit known %v\n", m, sent.Load(), l)
					}
				}
			}
		}()
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(cfg.workers)
	for r := range cfg.repos {
		repo := fmt.Sprintf("%s/repos/octo/repo%d", srv.URL(), r)
		g.Go(func() error {
			// the listing, page by page
			url := repo + "/issues"
			for url != "" {
				resp, err := get(gctx, http.MethodGet, url)
				if err != nil {
					return nil
				}
				url = ""
				if m := nextLink.FindStringSubmatch(resp.Header.Get("Link")); m != nil {
					url = m[1]
				}
				var items []json.RawMessage
				json.NewDecoder(resp.Body).Decode(&items)
				drain(resp)
			}
			return nil
		})
		for i := range cfg.issues {
			g.Go(func() error {
				resp, _ := get(gctx, http.MethodGet, fmt.Sprintf("%s/issues/%d", repo, i+1))
				drain(resp)
				if i%10 == 0 {
					resp, _ = get(gctx, http.MethodPost, fmt.Sprintf("%s/issues/%d/comments", repo, i+1))
					drain(resp)
				}
				return nil
			})
		}
	}
	err = g.Wait()
	close(stop)
	if err != nil {
		return result{}, err
	}
	log := srv.Log()
	st := srv.Stats()
	res := result{requests: len(log), failed: int(failed.Load())}
	for _, n := range st.Rejected {
		res.rejected += n
	}
	res.failed -= res.rejected
	if len(log) > 0 {
		res.elapsed = log[len(log)-1].At.Sub(log[0].At)
	}
	l, _ := pool.Limit(github.RuleCore)
	res.learned = l.N
	res.peakPoints, res.peakInFlight = srv.PeakPoints(), srv.PeakInFlight()
	res.createsMin, res.createsHour = srv.PeakCreates()
	return res, nil
}
