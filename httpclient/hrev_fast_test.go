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

// TestHrevFastSamplesPushOutSlow: the times to a response are kept per
// host. A Transport shared by a near host and a far one (an account whose
// API has two hosts, or a NewPool Transport for several APIs) learns the
// far one's latency, then sends 64 requests to the near one: with one ring
// per Transport, the far host's samples are gone and its cancelled
// requests are held twice the near host's latency only, far less than
// their 50 ms on the wire (22 of 506 arrivals over the limit in a run).
func TestHrevFastSamplesPushOutSlow(t *testing.T) {
	const n, w, oneWay = 100, 300 * time.Millisecond, 50 * time.Millisecond
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
	// One account on two hosts: a near one and a far one (50 ms away).
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
	sem := semaphore.New(n, w)
	client := &http.Client{Transport: httpclient.New(sem, httpclient.WithBase(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Host == far.Listener.Addr().String() {
			return slow.RoundTrip(r)
		}
		return fast.RoundTrip(r)
	})))}
	get := func(ctx context.Context, link string) error {
		url := near.URL
		if link == "slow" {
			url = far.URL
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
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
	// 64 fast requests push the slow link's samples out of the ring.
	for range 64 {
		if err := get(context.Background(), "fast"); err != nil {
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
