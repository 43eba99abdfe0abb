package httpclient_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/internal/memnet"
)

// timedLimiter admits at once and records when each release happens.
type timedLimiter struct {
	mu       sync.Mutex
	releases []time.Time
	panicOn  bool // Release panics (after recording)
}

func (l *timedLimiter) Acquire(ctx context.Context, n int64) error { return ctx.Err() }
func (l *timedLimiter) PauseFor(time.Duration)                     {}
func (l *timedLimiter) Release(int64) {
	l.mu.Lock()
	l.releases = append(l.releases, time.Now())
	p := l.panicOn
	l.mu.Unlock()
	if p {
		panic("hrev: Release panics")
	}
}

func (l *timedLimiter) released() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.releases...)
}

// TestHrevTimeoutBelowIsHeld: a base that ends the request by a timeout of
// its own (a per-attempt context below the Transport, or
// http.Transport.ResponseHeaderTimeout) while the caller's context is live
// returns an error without any response, with the request still on a slow
// link. The server counts its arrival 50 ms after it was written: the
// Transport must not release its units before that (the completion window
// holds at the server only if each arrival lies before its call's end).
func TestHrevTimeoutBelowIsHeld(t *testing.T) {
	const oneWay = 50 * time.Millisecond
	arrived := make(chan time.Time, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		arrived <- time.Now()
	}))
	defer srv.Close()
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return memnet.Delay(c, oneWay), nil
	}
	for _, tc := range []struct {
		name    string
		base    func(*http.Transport) http.RoundTripper
		timeout time.Duration // http.Client.Timeout
	}{
		{"http.Client.Timeout", func(slow *http.Transport) http.RoundTripper { return slow }, 10 * time.Millisecond},
		{"per-attempt context below", func(slow *http.Transport) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				ctx, cancel := context.WithTimeout(r.Context(), 10*time.Millisecond)
				defer cancel()
				return slow.RoundTrip(r.WithContext(ctx))
			})
		}, 0},
		{"ResponseHeaderTimeout", func(slow *http.Transport) http.RoundTripper {
			slow.ResponseHeaderTimeout = 10 * time.Millisecond
			return slow
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			slow := &http.Transport{DialContext: dial}
			defer slow.CloseIdleConnections()
			lim := &timedLimiter{}
			client := &http.Client{Transport: httpclient.New(lim, httpclient.WithBase(tc.base(slow))), Timeout: tc.timeout}
			req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
			resp, err := client.Do(req)
			if err == nil {
				resp.Body.Close()
				t.Fatal("no error: the base's timeout did not fire")
			}
			var at time.Time
			select {
			case at = <-arrived:
			case <-time.After(2 * time.Second):
				t.Fatal("the request never reached the server")
			}
			var rel []time.Time
			for end := time.Now().Add(3 * time.Second); ; time.Sleep(time.Millisecond) {
				if rel = lim.released(); len(rel) > 0 || time.Now().After(end) {
					break
				}
			}
			if len(rel) != 1 {
				t.Fatalf("%d releases, want 1", len(rel))
			}
			if !rel[0].After(at) {
				t.Errorf("released %v before the server counted the request's arrival (err %v)", at.Sub(rel[0]), err)
			}
		})
	}
}

// TestHrevHeldReleasePanics: a Limiter whose Release panics, on a release
// held on a timer (a request cancelled before its response), must not
// crash the program: the timer's goroutine has no caller to give the panic
// to. The request runs in a child process, which must outlive the hold.
func TestHrevHeldReleasePanics(t *testing.T) {
	if os.Getenv("HREV_CHILD") == "1" {
		lim := &timedLimiter{panicOn: true}
		tr := httpclient.New(lim, httpclient.WithBase(roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return nil, context.Canceled // a cancel below: held
		})))
		req, _ := http.NewRequest(http.MethodGet, "http://example.invalid/", nil)
		if _, err := tr.RoundTrip(req); err == nil {
			t.Fatal("no error")
		}
		if len(lim.released()) != 0 {
			t.Fatal("released at once, not held")
		}
		for end := time.Now().Add(3 * time.Second); len(lim.released()) == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(end) {
				t.Fatal("never released")
			}
		}
		time.Sleep(100 * time.Millisecond) // the panic, if it crashes, has crashed
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHrevHeldReleasePanics$", "-test.count=1")
	cmd.Env = append(os.Environ(), "HREV_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// TestHrevSlowDialThenCancel: the hold counts from the request's start,
// but a request that needs a new connection is written only once its dial
// (a TCP and TLS handshake: several round trips) is over. With the times
// to a response learned on a warm connection (~40 ms on a 20 ms link, so a
// hold of ~80 ms), a request whose dial takes 150 ms and which is
// cancelled as soon as it is written is past its start plus the hold when
// it fails: released at once, it arrives 20 ms after its release. The
// release must come after the server counted the arrival.
func TestHrevSlowDialThenCancel(t *testing.T) {
	const oneWay, handshake = 20 * time.Millisecond, 150 * time.Millisecond
	var (
		mu      sync.Mutex
		arrival time.Time
	)
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrival = time.Now()
		mu.Unlock()
	}))
	defer srv.Close()
	var slowDial atomic.Bool
	slow := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if slowDial.Load() {
			time.Sleep(handshake)
		}
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return memnet.Delay(c, oneWay), nil
	}}
	defer slow.CloseIdleConnections()
	lim := &timedLimiter{}
	client := &http.Client{Transport: httpclient.New(lim, httpclient.WithBase(slow))}
	get := func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	// The first request's dial is in its sample; 64 more on the warm
	// connection push it out of the ring.
	for range 65 {
		if err := get(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	slow.CloseIdleConnections()
	slowDial.Store(true)
	mu.Lock()
	arrival = time.Time{}
	mu.Unlock()
	t0 := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { cancel() }})
	if err := get(ctx); err == nil {
		t.Fatal("no error: the cancel came after the response")
	}
	cancel()
	var at time.Time
	for end := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		at = arrival
		mu.Unlock()
		if n := len(lim.released()); n == 66 && !at.IsZero() || time.Now().After(end) {
			break
		}
	}
	rel := lim.released()
	if len(rel) != 66 {
		t.Fatalf("%d releases, want 66", len(rel))
	}
	if !rel[65].After(at) {
		t.Errorf("released %v before the server counted the arrival (released %v after the start)", at.Sub(rel[65]), rel[65].Sub(t0))
	}
}

// TestHrevRequestCancelIsHeld: http.Client.Timeout, with a RoundTripper it
// does not know (Transport), closes the deprecated Request.Cancel at the
// deadline as well as setting a context deadline, and the base may see the
// close first (under -race it does, now and then). A request the base
// ended by its closed Cancel, with the context live and no deadline, may
// be on its way like a cancelled one: held past the server's arrival.
func TestHrevRequestCancelIsHeld(t *testing.T) {
	arrived := make(chan time.Time, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		arrived <- time.Now()
	}))
	defer srv.Close()
	slow := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return memnet.Delay(c, 50*time.Millisecond), nil
	}}
	defer slow.CloseIdleConnections()
	lim := &timedLimiter{}
	tr := httpclient.New(lim, httpclient.WithBase(slow))
	cancel := make(chan struct{})
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { close(cancel) }})
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	req.Cancel = cancel // deprecated, but what http.Client does for its Timeout
	if resp, err := tr.RoundTrip(req); err == nil {
		resp.Body.Close()
		t.Fatal("no error: Cancel did not end the request")
	}
	var at time.Time
	select {
	case at = <-arrived:
	case <-time.After(2 * time.Second):
		t.Fatal("the request never reached the server")
	}
	var rel []time.Time
	for end := time.Now().Add(3 * time.Second); len(rel) == 0 && time.Now().Before(end); time.Sleep(time.Millisecond) {
		rel = lim.released()
	}
	if len(rel) != 1 || !rel[0].After(at) {
		t.Errorf("releases %v, want one after the arrival at %v", rel, at)
	}
}
