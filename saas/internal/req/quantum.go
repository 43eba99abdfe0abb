package req

import (
	"math/bits"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/window"
)

// Quantum returns the limit that enforces n units per per over a 60th of
// per (a vendor's "60 requests per minute may be enforced as 1 request per
// second"): q = max(1, ⌊n/60⌋) units per ⌈per·q/n⌉ (nanoseconds), a token
// bucket of capacity q refilled at n per per, rounded on the safe side (q
// down, the period up). n ≤ 0 or per ≤ 0 gives the zero Limit. Computed in
// 128 bits: no overflow for any n and per.
func Quantum(n int64, per time.Duration) window.Limit {
	if n <= 0 || per <= 0 {
		return window.Limit{}
	}
	q := max(1, n/60)
	return window.Limit{N: q, Per: time.Duration(mulDivUp(uint64(per), uint64(q), uint64(n)))}
}

// mulDivUp returns ⌈a·b/c⌉ (c > 0), saturating at math.MaxInt64 when it
// does not fit in 63 bits (a padded quantum of a minute scaled to
// centuries with a margin as long).
func mulDivUp(a, b, c uint64) int64 {
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return 1<<63 - 1 // the quotient needs more than 64 bits
	}
	d, rem := bits.Div64(hi, lo, c)
	if d >= 1<<63-1 {
		return 1<<63 - 1
	}
	if rem != 0 {
		d++
	}
	return int64(d)
}

// unpadded is the charge of a call classified under a padded quantum whose
// limit (so pad) is not known yet: heavier than any limit learned, so
// the pool admits it alone once the limit is known, charged the whole
// capacity (clientpool's learned-limit rule), never short at the server.
const unpadded = 1 << 40 // engine.MaxLearnedN: no learned limit is larger

// DefaultQuantumMargin is the presets' default margin of their quantum
// rules (QuantumStarts, QuantumPadded): the spread of one-way latency
// (jitter) between the client and the API they absorb, 20 ms.
const DefaultQuantumMargin = 20 * time.Millisecond

// QuantumKind says how a quantum rule keeps a server's quantum (a token
// bucket of Quantum(n, per)) from being short of a call's charge while the
// jitter of one-way latency is at most the margin m; both are exact.
type QuantumKind int

const (
	// QuantumStarts is a start window with margin (window.NewSlidingLog)
	// of Quantum(n, per): at most q units start in any window of Per + m,
	// which never overruns a token bucket of capacity q refilled at q per
	// Per. It reaches a fraction Per/(Per + m) of the rate, less when calls
	// are heavy next to q (a window holds only whole calls): right for
	// requests (weight 1). A learned limit keeps the starts recorded
	// before it.
	QuantumStarts QuantumKind = iota
	// QuantumPadded is a token bucket of the server's rate whose capacity
	// and every charge are padded by p = ⌈n·m/per⌉ units (the refill of m):
	// capacity q + p, a call charged min(charge, q) + p. Units started in
	// any window of length L then come to at most q + n·L/per − (k−1)·p for
	// k calls, so the server's bucket, which sees them within L − m of
	// one another at worst, never runs short. It costs p per call, a
	// fraction p/(charge + p): right for tokens, whose charges are large
	// next to p. Until the first reply names the limit (n 0), the pad is
	// unknown: a call classified then is charged as heavier than any
	// limit, so once the limit is known it goes alone, charged the whole
	// capacity (the pool's learned-limit rule); and the first learned
	// report empties the bucket (Learned.Remaining 0): the server's
	// quantum holds the first call's charge.
	QuantumPadded
)

// QuantumRule returns the quantum rule of a limit of n units per per (N 0
// when n is 0: learned): kind decides the window (see QuantumKind), margin
// m ≥ 0 the jitter absorbed (at most per). It is learned from limitHeader
// (the Quantum of the count it names; not what remains, the headers' is the
// minute's), not settled, PauseOnThrottle, from source. weight is the
// call's charge; when capped, a charge above the quantum's q (of n given,
// then of the last limit learned; math.MaxInt64 excepted) counts as q: it
// waits for a full quantum and empties it, never refused for good.
func QuantumRule(name string, kind QuantumKind, n int64, per, margin time.Duration, key func(*http.Request) (string, bool),
	weight func(*http.Request) int64, capped bool, limitHeader, source string) clientpool.Rule {
	margin = min(max(margin, 0), per)
	// limit returns the rule's limit for n per per, with its q and pad.
	limit := func(n int64) (window.Limit, int64, int64) {
		l := Quantum(n, per)
		if kind != QuantumPadded || margin == 0 {
			return l, l.N, 0
		}
		pad := mulDivUp(uint64(n), uint64(margin), uint64(per)) // ≤ n
		if l.N > 1<<62 || pad > 1<<62 {
			// Absurd limits: no pad fits; the engine caps N anyway.
			return l, l.N, 0
		}
		// q + pad per Per·(q + pad)/q: the same rate, p more burst.
		return window.Limit{N: l.N + pad, Per: time.Duration(mulDivUp(uint64(l.Per), uint64(l.N+pad), uint64(l.N)))}, l.N, pad
	}
	lim := window.Limit{Per: per}
	var qcap, pcap atomic.Int64 // q and pad of the known limit; 0: unknown
	if n > 0 {
		var q, p int64
		lim, q, p = limit(n)
		qcap.Store(q)
		pcap.Store(p)
	}
	w := func(r *http.Request) int64 {
		c := weight(r)
		q := qcap.Load()
		if c == 1<<63-1 {
			return c
		}
		if q == 0 {
			if kind == QuantumPadded && margin > 0 {
				// The pad is not known before the first reply: the call
				// goes alone once the limit is known (learnedFit).
				return unpadded
			}
			return c
		}
		if capped {
			c = min(c, q)
		}
		return c + pcap.Load() // c ≤ q ≤ 2^62 and pad ≤ 2^62: no wrap
	}
	win := func(l window.Limit) window.Policy { return window.NewSlidingLog(l, margin) }
	if kind == QuantumPadded {
		win = func(l window.Limit) window.Policy { return window.NewTokenBucket(l, 0) }
	}
	return clientpool.Rule{
		Name:   name,
		Limit:  lim,
		Window: win,
		Key:    key,
		Weight: w,
		Learn: func(h http.Header, _ time.Time) (clientpool.Learned, bool) {
			c, ok := Count(h.Get(limitHeader))
			if !ok || c == 0 {
				return clientpool.Learned{}, false
			}
			l, q, p := limit(c)
			pcap.Store(p)
			in := clientpool.Learned{Limit: l, Remaining: -1}
			if qcap.Swap(q) == 0 && kind == QuantumPadded {
				in.Remaining = 0
			}
			return in, true
		},
		PauseOnThrottle: true,
		Source:          source,
	}
}
