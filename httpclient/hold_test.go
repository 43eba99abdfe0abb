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
// written to a host whose requests take 50 ms to reach it, while requests
// to a near host of the same account keep the limit binding
// (cancelStorm). Released at the cancel,
// each would free its unit a window before the server counts its arrival,
// and the fast requests that take it would put the server's window over N.
// The Transport holds the release of a request without a response (twice
// the longest time to a response it has seen, here > 100 ms:
// internal/hold), so the server, which answers 429 to what goes over N per
// W, sees no violation. Released at the cancel instead (the hold removed),
// this fails on every run.
func TestCancelBeforeResponseAtTheServer(t *testing.T) { cancelStorm(t, 10, 0) }

// cancelStorm runs a server that answers 429 to what goes over n requests
// per W = 300 ms, on two hosts (one account's API: both count into one
// log), a near one and a far one 50 ms away (memnet.Delay), behind one
// Transport over a RateSemaphore of n per W. The Transport first learns the
// far host's latency (two requests), then sends push requests to the near
// host, then for 1.5 s 12 goroutines keep the limit binding on the near host
// while 3 cancel requests to the far one as soon as they are written. It
// fails t on any violation at the server, on fewer than 2n requests
// accepted, or on units still held 5 s after the storm.
func cancelStorm(t *testing.T, n, push int) {
	const w, oneWay = 300 * time.Millisecond, 50 * time.Millisecond
	var (
		mu                   sync.Mutex
		arrivals             []time.Time
		violations, accepted int
	)
	handler := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
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
	})
	near, far := httptest.NewServer(handler), httptest.NewServer(handler)
	defer near.Close()
	defer far.Close()
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
	sem := semaphore.New(int64(n), w)
	client := &http.Client{Transport: httpclient.New(sem, httpclient.WithBase(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Host == far.Listener.Addr().String() {
			return slow.RoundTrip(r)
		}
		return fast.RoundTrip(r)
	})))}
	get := func(ctx context.Context, url string) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	for range 2 { // the Transport learns the far host takes > 50 ms to answer
		if err := get(context.Background(), far.URL); err != nil {
			t.Fatal(err)
		}
	}
	for range push {
		if err := get(context.Background(), near.URL); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(1500 * time.Millisecond)
	var wg sync.WaitGroup
	for range 12 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				get(context.Background(), near.URL)
			}
		})
	}
	for range 3 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				ctx, cancel := context.WithCancel(context.Background())
				ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { cancel() }})
				get(ctx, far.URL)
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
