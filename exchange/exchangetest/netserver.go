package exchangetest

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"time"
)

// remoteIP returns the host part of r.RemoteAddr (all of it if it has no
// port).
func remoteIP(r *http.Request) string {
	ip, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return ip
}

// reply is an answer decided under a server's lock and written after the
// configured latency.
type reply struct {
	status int
	header map[string]string
	body   []byte // JSON unless text is set
	text   bool
	code   string // the exchange's code in body, for the log

	// Set by the hostile mode (hostile.alter).
	hostile    bool
	extra      http.Header   // set after header; a key without values deletes
	stall      time.Duration // stall the body after stallAfter bytes; < 0: until the end
	stallAfter int
}

// sleepLatency sleeps for latency() if latency is set, and reports false if
// the request's context ended first (the client is gone).
func sleepLatency(ctx context.Context, latency func() time.Duration) bool {
	if latency == nil {
		return true
	}
	d := latency()
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// write answers rp on w; a stalled body (hostile mode) ends early when ctx
// ends or stop is closed.
func (rp reply) write(ctx context.Context, w http.ResponseWriter, stop <-chan struct{}) {
	h := w.Header()
	for k, v := range rp.header {
		h.Set(k, v)
	}
	if rp.text {
		h.Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		h.Set("Content-Type", "application/json")
	}
	h.Set("Content-Length", strconv.Itoa(len(rp.body)))
	for k, vs := range rp.extra {
		if len(vs) == 0 {
			delete(h, k)
		} else {
			h[k] = vs
		}
	}
	w.WriteHeader(rp.status)
	rp.writeBody(ctx, w, stop)
}
