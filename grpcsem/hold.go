package grpcsem

import (
	"sync"
	"time"

	"github.com/ratesem/ratesem/clientpool"
)

// An RPC that got a reply (a message, a header or a status from the server)
// was read by the server before its end, so a window that counts ends (the
// completion window) holds at a server that counts arrivals. An RPC that
// ends without one, cancelled by its caller while its request was still in
// grpc-go's writer or on the wire, may reach the server after its end: its
// release is held until its start plus holdFactor times the longest time
// to a first reply among the interceptor's last latencySamples RPCs that
// got one (a request reaches the server before its reply leaves it), at
// most maxHold, or defaultHold before any RPC got a reply.
const (
	latencySamples = 64
	holdFactor     = 2
	defaultHold    = time.Second
	maxHold        = 10 * time.Second
)

// latency keeps an interceptor's last times to a first reply.
type latency struct {
	mu   sync.Mutex
	ring [latencySamples]time.Duration
	n    int // samples added, at most latencySamples counted
	next int // where the next sample goes
}

// add records d, the time from an RPC's start to its first reply.
func (l *latency) add(d time.Duration) {
	l.mu.Lock()
	l.ring[l.next] = max(d, 0)
	l.next = (l.next + 1) % latencySamples
	l.n = min(l.n+1, latencySamples)
	l.mu.Unlock()
}

// hold returns how long after its start an RPC without a reply keeps its
// charges (see the constants above).
func (l *latency) hold() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == 0 {
		return defaultHold
	}
	var most time.Duration
	for _, d := range l.ring[:l.n] {
		most = max(most, d)
	}
	if most >= maxHold/holdFactor {
		return maxHold
	}
	return holdFactor * most
}

// release releases t, an RPC's ticket acquired at start, now when the RPC
// got a reply (answered) or its hold has passed, else when it passes (a
// timer; the caller never waits).
func (l *limiter) release(t *clientpool.Ticket, start time.Time, answered bool) {
	if answered {
		t.Release()
		return
	}
	if wait := l.lat.hold() - time.Since(start); wait > 0 {
		time.AfterFunc(wait, t.Release)
		return
	}
	t.Release()
}
