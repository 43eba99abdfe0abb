package httpclient_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"sync"
	"testing"
	"time"

	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/internal/memnet"
	"github.com/ratesem/ratesem/semaphore"
)

// TestCancelBeforeResponseAtTheServer cancels requests as soon as they are
// written on a link whose requests take 50 ms to reach the server, while
// requests on a fast link keep the limit binding. Released at the cancel,
// each would free its unit a window before the server counts its arrival,
// and the fast requests that take it would put the server's window over N.
// The Transport holds the release of a request without a response (twice
// the longest time to a response it has seen, here > 100 ms:
// internal/hold), so the server, which answers 429 to what goes over N per
// W, sees no violation. Released at the cancel instead (the hold removed),
// this fails on every run.
func TestCancelBeforeResponseAtTheServer(t *testing.T) {
	const n, w, oneWay = 10, 300 * time.Millisecond, 50 * time.Millisecond
	var (
		mu                   sync.Mutex
		arrivals             []time.Time
		violations, accepted int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		now := time.Now()
		arrivals = append(arrivals, now)
		count := 0
		for i := len(arrivals) - 1; i >= 0 && now.Sub(arrivals[i]) < w; i-- {
			count++
		}
		over := count > n
		if over {
			violations++
		} else {
			accepted++
		}
		mu.Unlock()
		if over {
			rw.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	fast := &http.Transport{}
	slow := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return memnet.Delay(c, oneWay), nil
	}}
	defer fast.CloseIdleConnections()
	defer slow.CloseIdleConnections()
	sem := semaphore.New(n, w)
	client := &http.Client{Transport: httpclient.New(sem, httpclient.WithBase(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Header.Get("X-Link") == "slow" {
			return slow.RoundTrip(r)
		}
		return fast.RoundTrip(r)
	})))}
	get := func(ctx context.Context, link string) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		req.Header.Set("X-Link", link)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	// Two requests on the slow link: the Transport learns it takes > 50 ms
	// to hear back.
	for range 2 {
		if err := get(context.Background(), "slow"); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(1500 * time.Millisecond)
	var wg sync.WaitGroup
	for range 12 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				get(context.Background(), "fast")
			}
		})
	}
	for range 3 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				ctx, cancel := context.WithCancel(context.Background())
				ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { cancel() }})
				get(ctx, "slow")
				cancel()
			}
		})
	}
	wg.Wait()
	for end := time.Now().Add(5 * time.Second); sem.Stats().InFlight != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the semaphore still holds %d units", sem.Stats().InFlight)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if violations != 0 {
		t.Errorf("server: %d of %d arrivals over %d per %v", violations, len(arrivals), n, w)
	}
	if accepted < 2*n {
		t.Errorf("server: %d arrivals accepted, want the limit binding (at least %d)", accepted, 2*n)
	}
}
