package exchangetest

import (
	"net/http"
	"slices"
	"time"
)

// Key identifies the bucket a rate-limit rule counts a request in. For OKX's
// funding-rate-history endpoint the rule is "IP + Instrument ID", so a Key is
// the client IP together with the instId query parameter.
type Key struct {
	IP     string // host part of the request's RemoteAddr, e.g. "127.0.0.1"
	InstID string // instId query parameter; "" when the request had none
}

// Arrival is the server's record of one request.
type Arrival struct {
	// At is the moment the server counted the request: read once at handler
	// entry, under the server's lock, before any configured latency. It is the
	// time the rate-limit decision was made for, and it carries a monotonic
	// clock reading when it comes from time.Now.
	At time.Time
	// IP is the host part of the request's RemoteAddr.
	IP string
	// InstID is the instId query parameter ("" if absent).
	InstID string
	// Status is the HTTP status the server decided to answer:
	// 200 (accepted), 429 (over the limit), 400 (missing instId),
	// 404 (unknown path) or 405 (wrong method). It is recorded even if the
	// client went away before the answer was written.
	Status int
}

// Key returns the rate-limit key of the arrival: its IP and InstID.
func (a Arrival) Key() Key { return Key{IP: a.IP, InstID: a.InstID} }

// Accepted reports whether the server admitted the request (Status 200).
func (a Arrival) Accepted() bool { return a.Status == http.StatusOK }

// MaxInWindow returns, for each Key present in arrivals, the largest number of
// arrivals of that key inside any half-open window (t−window, t] on the time
// axis. This is exactly the quantity OKX's rule "at most N requests in any
// window of T" bounds; an arrival at exactly t−window is not inside the window
// ending at t, and arrivals with equal At are all counted.
//
// If accepted is true only arrivals with Status 200 are counted, otherwise
// every arrival in the slice is (filter the slice first to restrict it, e.g.
// to requests subject to the rule). Keys with no counted arrival are absent
// from the result. The arrivals need not be sorted; the slice is not modified.
// The computation is exact and takes O(n log n) time.
//
// MaxInWindow panics if window <= 0.
func MaxInWindow(arrivals []Arrival, window time.Duration, accepted bool) map[Key]int {
	if window <= 0 {
		panic("exchangetest: MaxInWindow: window must be positive")
	}
	byKey := make(map[Key][]time.Time)
	for _, a := range arrivals {
		if accepted && !a.Accepted() {
			continue
		}
		k := a.Key()
		byKey[k] = append(byKey[k], a.At)
	}
	out := make(map[Key]int, len(byKey))
	for k, ts := range byKey {
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		// The maximum over all t is reached at some arrival time t = ts[j]:
		// count ts[i..j] with ts[j]-ts[i] < window. Equal timestamps after j
		// are counted when j reaches the last of them.
		best, i := 0, 0
		for j := range ts {
			for ts[j].Sub(ts[i]) >= window {
				i++
			}
			best = max(best, j-i+1)
		}
		out[k] = best
	}
	return out
}
