package exchangetest_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// fakeClock is a settable ratesem.Clock for the servers' Clock: tests place arrivals at exact
// instants and call the handler directly, so decisions do not depend on
// scheduling.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock(t time.Time) *fakeClock { return &fakeClock{now: t} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After is the real timer: the servers read only Now.
func (c *fakeClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// call is one request driven straight through a server's handler.
type call struct {
	method, target string
	body           string
	ip             string            // default 127.0.0.1
	header         map[string]string // e.g. the API key
}

func (c call) serve(h http.Handler) *httptest.ResponseRecorder {
	var body *strings.Reader
	if c.body != "" {
		body = strings.NewReader(c.body)
	}
	var req *http.Request
	if body != nil {
		req = httptest.NewRequest(c.method, c.target, body)
	} else {
		req = httptest.NewRequest(c.method, c.target, nil)
	}
	ip := c.ip
	if ip == "" {
		ip = "127.0.0.1"
	}
	if strings.Contains(ip, ":") {
		req.RemoteAddr = "[" + ip + "]:4321"
	} else {
		req.RemoteAddr = ip + ":4321"
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	if c.method == http.MethodPost && c.header["Content-Type"] == "" && strings.HasPrefix(c.target, "/api/v3/") {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}
