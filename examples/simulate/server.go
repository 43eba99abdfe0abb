package main

import (
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// arrival is one request as the test server saw it.
type arrival struct {
	At       time.Time // when the handler ran, on the parent's monotonic clock
	Accepted bool      // false: answered 429
	Worker   string    // the X-Worker header: which child process sent it
	// Delay is the time from the worker's admission (the X-Admitted header,
	// Unix nanoseconds, read when Acquire returned) to the arrival, on the
	// machine's wall clock; 0 without the header.
	Delay time.Duration
}

// apiServer is the API the workers call: an HTTP server on loopback that
// enforces an exact sliding window on arrival and answers after a latency
// uniform in [latMin, latMax], as the ZSET throttler's perform_request sleeps 10–30 ms.
//
// A request arriving at t is accepted iff fewer than limit accepted arrivals
// lie in (t−period, t]; otherwise it is answered 429 Too Many Requests.
// Rejected arrivals do not count. Decisions are taken under one mutex with
// the clock read inside it, so arrivals are totally ordered and the log is
// sorted by time.
type apiServer struct {
	URL    string
	srv    *http.Server
	ln     net.Listener
	served chan struct{}

	latMin, latMax time.Duration

	mu     sync.Mutex
	limit  int
	period time.Duration
	ring   []time.Time // the last limit accepted arrivals, oldest at head once full
	head   int
	log    []arrival
}

// startServer starts the API server on 127.0.0.1 with a free port. Call
// reset before each row to set its rule and clear its log.
func startServer(latMin, latMax time.Duration) (*apiServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &apiServer{
		URL:    "http://" + ln.Addr().String() + "/api",
		ln:     ln,
		served: make(chan struct{}),
		latMin: latMin,
		latMax: latMax,
	}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// reset sets the rule the server enforces, limit per period, and forgets
// every arrival.
func (s *apiServer) reset(limit int, period time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limit, s.period = limit, period
	s.ring = make([]time.Time, 0, limit)
	s.head = 0
	s.log = nil
}

// admit decides for an arrival at now and records it when accepted. s.mu
// must be held.
func (s *apiServer) admit(now time.Time) bool {
	if len(s.ring) < s.limit {
		s.ring = append(s.ring, now)
		return true
	}
	// The ring is full: the oldest of the last limit accepted arrivals must
	// have left (now−period, now], that is, lie at or before now−period.
	if s.ring[s.head].After(now.Add(-s.period)) {
		return false
	}
	s.ring[s.head] = now
	s.head = (s.head + 1) % s.limit
	return true
}

// ServeHTTP decides on arrival, waits the latency, then answers 200 or 429.
func (s *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	now := time.Now()
	ok := s.admit(now)
	a := arrival{At: now, Accepted: ok, Worker: r.Header.Get("X-Worker")}
	if ns, err := strconv.ParseInt(r.Header.Get("X-Admitted"), 10, 64); err == nil {
		a.Delay = now.Round(0).Sub(time.Unix(0, ns))
	}
	s.log = append(s.log, a)
	s.mu.Unlock()

	lat := s.latMin
	if s.latMax > s.latMin {
		lat += rand.N(s.latMax - s.latMin + 1)
	}
	t := time.NewTimer(lat)
	select {
	case <-t.C:
	case <-r.Context().Done():
		t.Stop()
		return
	}
	if !ok {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "rate limit exceeded", http.StatusTooManyRequests)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// arrivals returns a copy of the log since the last reset, in time order.
func (s *apiServer) arrivals() []arrival {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]arrival(nil), s.log...)
}

// close stops the server and waits for its serving goroutine.
func (s *apiServer) close() {
	_ = s.srv.Close()
	<-s.served
}

// busiestWindow returns the most arrivals (all of them, accepted or not)
// that lie in one window (t−period, t], over every t: the figure the
// server's rule bounds by limit when no request was rejected. arr must be in
// time order.
func busiestWindow(arr []arrival, period time.Duration) int {
	most, lo := 0, 0
	for hi := range arr {
		for !arr[lo].At.After(arr[hi].At.Add(-period)) {
			lo++
		}
		most = max(most, hi-lo+1)
	}
	return most
}
