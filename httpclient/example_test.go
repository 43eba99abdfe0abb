package httpclient_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratesem/ratesem/httpclient"
)

// slotLimiter is a minimal Limiter for the examples: at most cap(slots)
// units in flight, and PauseFor only reports the pause. Real programs use a
// *semaphore.RateSemaphore, which also limits the rate and honours pauses.
type slotLimiter struct {
	slots chan struct{}
	mu    sync.Mutex
	log   []string
}

func newSlotLimiter(capacity int) *slotLimiter {
	return &slotLimiter{slots: make(chan struct{}, capacity)}
}

func (l *slotLimiter) Acquire(ctx context.Context, n int64) error {
	for i := int64(0); i < n; i++ {
		select {
		case l.slots <- struct{}{}:
		case <-ctx.Done():
			l.Release(i)
			return ctx.Err()
		}
	}
	return nil
}

func (l *slotLimiter) Release(n int64) {
	for i := int64(0); i < n; i++ {
		<-l.slots
	}
}

func (l *slotLimiter) PauseFor(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// The pause is the Retry-After plus a little jitter (so that clients
	// throttled together do not resume at one instant); print whole seconds.
	l.log = append(l.log, fmt.Sprintf("limiter paused for %v", d.Truncate(time.Second)))
}

// Wrap an http.Client's transport so that at most two requests are in
// flight; a 429 with Retry-After pauses the limiter and still reaches the
// caller as an ordinary response.
func ExampleNew() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		io.WriteString(w, "hello")
	}))
	defer srv.Close()

	lim := newSlotLimiter(2)
	client := &http.Client{Transport: httpclient.New(lim)}
	defer client.CloseIdleConnections()

	for i := 0; i < 2; i++ {
		resp, err := client.Get(srv.URL)
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close() // gives the slot back
		fmt.Printf("%s %q\n", resp.Status, body)
	}
	fmt.Println(strings.Join(lim.log, "\n"))
	fmt.Println("slots in use:", len(lim.slots))
	// Output:
	// 429 Too Many Requests ""
	// 200 OK "hello"
	// limiter paused for 2s
	// slots in use: 0
}

// Charge each endpoint its own weight, and leave health checks unlimited.
func ExampleNewSelect() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer srv.Close()

	lim := newSlotLimiter(10)
	tr := httpclient.NewSelect(func(req *http.Request) (httpclient.Limiter, int64) {
		switch {
		case req.URL.Path == "/health":
			return nil, 0 // not limited
		case strings.HasPrefix(req.URL.Path, "/api/v3/depth"):
			return lim, 5
		default:
			return lim, 1
		}
	})
	client := &http.Client{Transport: tr}
	defer client.CloseIdleConnections()

	for _, path := range []string{"/health", "/api/v3/depth", "/api/v3/time"} {
		resp, err := client.Get(srv.URL + path)
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		fmt.Printf("%s: %d units held until Close\n", path, len(lim.slots))
		resp.Body.Close()
	}
	// Output:
	// /health: 0 units held until Close
	// /api/v3/depth: 5 units held until Close
	// /api/v3/time: 1 units held until Close
}

func ExampleParseRetryAfter() {
	now := time.Date(2015, time.October, 21, 7, 27, 30, 0, time.UTC)

	d, err := httpclient.ParseRetryAfter("120", now)
	fmt.Println(d, err)

	d, err = httpclient.ParseRetryAfter("Wed, 21 Oct 2015 07:28:00 GMT", now)
	fmt.Println(d, err)

	d, err = httpclient.ParseRetryAfter("Tue, 20 Oct 2015 07:28:00 GMT", now) // in the past
	fmt.Println(d, err)

	_, err = httpclient.ParseRetryAfter("soon", now)
	fmt.Println(err)
	// Output:
	// 2m0s <nil>
	// 30s <nil>
	// 0s <nil>
	// ratesem: invalid Retry-After "soon": want delay-seconds or an HTTP-date
}
