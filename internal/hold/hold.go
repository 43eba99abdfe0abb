// Package hold decides how long a call that ended without any reply keeps
// its units. A call that got a reply (a status line, a header, a message)
// was read by the server before its end, so a window that counts ends (the
// completion window) holds at a server that counts arrivals, whatever the
// latency. A call that ends without one, cancelled by its caller while its
// request was still in a writer's queue or on the wire, may reach the
// server after its end; its release is held until its end plus Factor
// times the longest time to a first reply among the last Samples calls
// that got one (a request reaches the server before its reply leaves it),
// at most Max, or Default before any call got a reply. This covers a
// request delayed up to Factor times what the caller has seen, not an
// unbounded one. The hold counts from the end, not the start: a call
// writes its request only after it got a connection (a dial, a TLS
// handshake, several round trips) or a stream, any time up to its end.
package hold

import (
	"sync"
	"sync/atomic"
	"time"
)

const (
	Samples = 64               // the times to a first reply kept
	Factor  = 2                // the hold is Factor × the longest of them
	Default = time.Second      // the hold before any call got a reply
	Max     = 10 * time.Second // the longest hold
)

// Latency keeps the last Samples times to a first reply. The zero value
// has none; it is safe for concurrent use and takes no lock.
type Latency struct {
	// ring holds each sample's nanoseconds plus 1, at most Max's: 0 is a
	// slot an Add has taken (next) but not stored yet, which Hold skips.
	ring [Samples]atomic.Int64
	next atomic.Uint64 // samples added
}

// Add records d, the time from a call's start to its first reply (a
// negative d, from a clock step, as 0; one above Max as Max).
func (l *Latency) Add(d time.Duration) {
	i := l.next.Add(1) - 1
	l.ring[i%Samples].Store(int64(min(max(d, 0), Max)) + 1)
}

// Hold returns how long after its end a call without a reply keeps its
// units: Factor × the longest sample kept, at most Max; Default with none.
func (l *Latency) Hold() time.Duration {
	n := min(l.next.Load(), Samples)
	if n == 0 {
		return Default
	}
	var most time.Duration
	stored := false
	for i := range n {
		if v := l.ring[i].Load(); v > 0 {
			most, stored = max(most, time.Duration(v-1)), true
		}
	}
	if !stored { // Adds under way, none stored yet
		return Default
	}
	if most >= Max/Factor {
		return Max
	}
	return Factor * most
}

// Release calls release now when the call got a reply (answered), else on
// a timer, Hold from now (the call's end); it never waits. A panic of
// release called now goes on to the caller; one on the timer's goroutine,
// where no caller could recover it and it would end the program, is
// recovered and dropped.
func (l *Latency) Release(answered bool, release func()) {
	if answered {
		release()
		return
	}
	time.AfterFunc(l.Hold(), func() {
		defer func() { _ = recover() }()
		release()
	})
}

// MaxKeys is the most keys (hosts, gRPC targets) a ByKey keeps a Latency
// for.
const MaxKeys = 1024

// ByKey keeps a Latency per key (a host, a gRPC target), so that a near
// key's fast replies do not push a far one's out of the ring: for the
// first MaxKeys keys; a call to a key past them gets a fresh Latency each
// time (held Default). The zero value is empty and ready; it is safe for
// concurrent use and never blocks.
type ByKey struct {
	m sync.Map // string -> *Latency
	n atomic.Int64
}

// For returns key's Latency (see ByKey).
func (b *ByKey) For(key string) *Latency {
	if v, ok := b.m.Load(key); ok {
		return v.(*Latency)
	}
	if b.n.Load() >= MaxKeys {
		return new(Latency)
	}
	v, loaded := b.m.LoadOrStore(key, new(Latency))
	if !loaded {
		b.n.Add(1)
	}
	return v.(*Latency)
}
