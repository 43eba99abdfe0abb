package github_test

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/saas/github"
	"github.com/ratesem/ratesem/saas/saastest"
)

// skewClock is the host's clock off the server's by skew: Now reads the
// wall clock plus skew, timers run at the same pace.
type skewClock struct{ skew time.Duration }

func (c skewClock) Now() time.Time                         { return time.Now().Add(c.skew) }
func (c skewClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// crawlSkewed crawls 800 issues with one token through the preset from a
// host whose clock is off the server's by skew, against a server of 300
// requests per (scaled) hour, and returns the server's stats.
func crawlSkewed(t *testing.T, skew time.Duration, mutate func(h http.Header)) saastest.Stats {
	t.Helper()
	st, _ := crawlSkewedLog(t, skew, mutate)
	return st
}

// crawlSkewedLog is crawlSkewed, with the server's log.
func crawlSkewedLog(t *testing.T, skew time.Duration, mutate func(h http.Header)) (saastest.Stats, []saastest.Entry) {
	t.Helper()
	const scale = 360 // an hour of 10 s
	srv := saastest.NewGitHub(saastest.GitHubConfig{
		InMemory: true, Limit: 300, Scale: scale,
		Latency: func() time.Duration {
			return 20*time.Millisecond + time.Duration(rand.Int64N(int64(40*time.Millisecond)))
		},
	})
	defer srv.Close()
	pool, err := clientpool.New(github.Table(github.WithScale(scale)), clientpool.WithClock(skewClock{skew}))
	if err != nil {
		t.Fatal(err)
	}
	base := srv.Client().Transport
	if mutate != nil {
		base = rtFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := srv.Client().Transport.RoundTrip(r)
			if err == nil {
				mutate(resp.Header)
			}
			return resp, err
		})
	}
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
	if v := srv.Violations(); len(v) != 0 {
		t.Errorf("%d violations", len(v))
	}
	log := srv.Log()
	st := srv.Stats()
	t.Logf("skew %v: %d accepted, rejected %v, in %v", skew, st.Accepted, st.Rejected, log[len(log)-1].At.Sub(log[0].At))
	return st, log
}

// Issue 18: a host clock ahead of the server's must not start the next
// primary window early. The reset (Unix epoch seconds, on the server's
// clock) is read against the response's Date header, with
// clientpool.ResetMargin. On the base commit a host 200 ms ahead had 23 of
// 800 requests rejected, 1 s ahead 118, 2 s ahead 200.
func TestCrawlSkewedClock(t *testing.T) {
	for _, skew := range []time.Duration{200 * time.Millisecond, time.Second, 2 * time.Second, 30 * time.Second, -2 * time.Second, 0} {
		t.Run(skew.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				if st := crawlSkewed(t, skew, nil); len(st.Rejected) != 0 || st.Accepted != 800 {
					t.Fatalf("host %v off the server: accepted %d, rejected %v", skew, st.Accepted, st.Rejected)
				}
			})
		})
	}
}

// Hostile or missing Date headers on a host 2 s ahead of the server: a reply
// without a usable Date (absent, malformed, 10 kB long) uses the skew the
// rule measured from the others, a Date in the future cannot undo it, one
// in the far past ends windows at most Per + 2 s later (slower, never
// early): no rejection either way, and the crawl ends. With no Date ever,
// the margin alone covers a host up to ResetMargin ahead.
func TestCrawlHostileDate(t *testing.T) {
	var n atomic.Int64
	everyOther := func(v string) func(http.Header) {
		return func(h http.Header) {
			if n.Add(1)%2 == 0 {
				if v == "" {
					h.Del("Date")
				} else {
					h.Set("Date", v)
				}
			}
		}
	}
	cases := []struct {
		name   string
		skew   time.Duration
		mutate func(http.Header)
	}{
		{"missing on every other reply", 2 * time.Second, everyOther("")},
		{"malformed on every other reply", 2 * time.Second, everyOther("yesterday, around noon")},
		{"10 kB on every other reply", 2 * time.Second, everyOther(strings.Repeat("Mon, 02 Jan 2006 15:04:05 GMT ", 350))},
		{"far future on every other reply", 2 * time.Second, everyOther("Fri, 31 Dec 9999 23:59:59 GMT")},
		{"far past on every reply", 2 * time.Second, func(h http.Header) { h.Set("Date", "Thu, 01 Jan 1970 00:00:00 GMT") }},
		{"missing on every reply, within the margin", clientpool.ResetMargin / 2, func(h http.Header) { h.Del("Date") }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				if st := crawlSkewed(t, c.skew, c.mutate); len(st.Rejected) != 0 || st.Accepted != 800 {
					t.Fatalf("accepted %d, rejected %v", st.Accepted, st.Rejected)
				}
			})
		})
	}
}
