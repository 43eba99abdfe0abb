package conformance_test

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesem/ratesem/window"
)

// enforcer is an API server that enforces a limit of n arrivals per per
// in any window (the completion window's guarantee at the server): an
// arrival beyond it is a violation, answered 429. Each request is held a
// little before the answer, longer for every fifth.
type enforcer struct {
	n   int
	per time.Duration
	tol time.Duration

	mu         sync.Mutex
	arrivals   []time.Time
	violations int
	seq        atomic.Int64
}

func (e *enforcer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	e.mu.Lock()
	e.arrivals = append(e.arrivals, now)
	count := 0
	for _, a := range e.arrivals {
		if a.After(now.Add(-e.per + e.tol)) {
			count++
		}
	}
	over := count > e.n
	if over {
		e.violations++
	}
	e.mu.Unlock()
	time.Sleep(time.Duration(e.seq.Add(1)%5) * e.per / 50)
	if over {
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	io.WriteString(w, "ok")
}

// hammer sends calls GET requests through rt from goroutines goroutines,
// reading each body to its end, and returns the status codes seen.
func hammer(t *testing.T, rt http.RoundTripper, calls, goroutines int) map[int]int {
	t.Helper()
	var (
		mu     sync.Mutex
		status = make(map[int]int)
		next   atomic.Int64
		wg     sync.WaitGroup
	)
	client := &http.Client{Transport: rt}
	for range goroutines {
		wg.Go(func() {
			for next.Add(1) <= int64(calls) {
				resp, err := client.Get("http://api.test/v1/items")
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				status[resp.StatusCode]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return status
}

func checkEnforced(t *testing.T, e *enforcer, status map[int]int, calls int) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.violations != 0 || status[http.StatusOK] != calls || len(e.arrivals) != calls {
		t.Errorf("%d violations at the server, %d arrivals, statuses %v; want 0 violations and %d answered 200",
			e.violations, len(e.arrivals), status, calls)
	}
}

// TestTransportSemaphore: a Transport over a RateSemaphore sends no
// request the server refuses, in both modes.
func TestTransportSemaphore(t *testing.T) {
	forModesRun(t, false, func(t *testing.T, m mode) {
		e := &enforcer{n: 5, per: m.per, tol: m.tol}
		base := m.server(t, e)
		s := m.mustSem(t, 5, m.per, semCfg{})
		checkEnforced(t, e, hammer(t, semTransport(s, base), 40, 8), 40)
	})
}

// TestTransportPool: a Transport over a Pool sends no request the server
// refuses, in every mode.
func TestTransportPool(t *testing.T) {
	forModesRun(t, true, func(t *testing.T, m mode) {
		e := &enforcer{n: 5, per: m.per, tol: m.tol}
		base := m.server(t, e)
		p := m.mustPool(t, poolCfg{}, ruleSpec{name: "r", limit: window.Limit{N: 5, Per: m.per}})
		checkEnforced(t, e, hammer(t, poolTransport(p, base), 40, 8), 40)
	})
}

// learnServer is an API server of fixed windows of per aligned to the
// epoch, n requests per window, that says so in X-RateLimit- headers (the
// reset as seconds to the window's end); a request beyond n is a violation,
// answered 429.
type learnServer struct {
	n   int
	per time.Duration

	mu         sync.Mutex
	window     int64
	count      int
	arrivals   int
	violations int
}

func (s *learnServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	s.mu.Lock()
	k := now.UnixNano() / int64(s.per)
	if k != s.window {
		s.window, s.count = k, 0
	}
	s.count++
	s.arrivals++
	count := s.count
	over := count > s.n
	if over {
		s.violations++
	}
	s.mu.Unlock()
	reset := time.Unix(0, (k+1)*int64(s.per)).Sub(now)
	h := w.Header()
	h.Set("X-RateLimit-Limit", strconv.Itoa(s.n))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(max(s.n-count, 0)))
	h.Set("X-RateLimit-Reset", fmt.Sprintf("%.3f", reset.Seconds()))
	if over {
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	io.WriteString(w, "ok")
}

// TestLearnPool: a rule that learns its limit from the server's headers
// (Rule.Learn, no limit given) sends no request the server refuses, in
// every mode.
func TestLearnPool(t *testing.T) {
	forModesRun(t, true, func(t *testing.T, m mode) {
		srv := &learnServer{n: 3, per: learnPer}
		base := m.server(t, srv)
		p := m.mustPool(t, poolCfg{}, ruleSpec{name: "r", limit: window.Limit{Per: learnPer}, learn: true})
		checkLearned(t, srv, hammer(t, poolTransport(p, base), learnCalls, 3))
	})
}

// The learn scenario: 9 requests from 3 goroutines, 3 per second at the
// server (the pool adds clientpool.ResetMargin, a second, to each window's
// end it learns).
const (
	learnPer   = time.Second
	learnCalls = 9
)

func checkLearned(t *testing.T, srv *learnServer, status map[int]int) {
	t.Helper()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.violations != 0 || status[http.StatusOK] != learnCalls {
		t.Errorf("%d violations at the server, %d arrivals, statuses %v; want 0 violations and %d answered 200",
			srv.violations, srv.arrivals, status, learnCalls)
	}
}
