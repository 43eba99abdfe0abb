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
	// per·q/n ≤ per, so the quotient fits and hi < n.
	hi, lo := bits.Mul64(uint64(per), uint64(q))
	d, rem := bits.Div64(hi, lo, uint64(n))
	if rem != 0 {
		d++
	}
	return window.Limit{N: q, Per: time.Duration(d)}
}

// QuantumRule returns a quantum rule: a token bucket of Quantum(n, per)
// (N 0 over per when n is 0: learned), learned from the limit header as
// the Quantum of the count it names (nothing of what remains: the
// headers' remaining is the minute's), not settled, PauseOnThrottle, from
// source. weight is the call's charge; when capped, a charge above the
// quantum's N (of n given, then of the last limit learned; math.MaxInt64
// excepted) is charged N: it waits for a full bucket and empties it.
func QuantumRule(name string, n int64, per time.Duration, key func(*http.Request) (string, bool),
	weight func(*http.Request) int64, capped bool, limitHeader, source string) clientpool.Rule {
	lim := window.Limit{Per: per}
	if n > 0 {
		lim = Quantum(n, per)
	}
	var qcap atomic.Int64 // the quantum's N; 0: unknown
	qcap.Store(lim.N)
	w := weight
	if capped {
		w = func(r *http.Request) int64 {
			c := weight(r)
			if q := qcap.Load(); q > 0 && c != 1<<63-1 {
				return min(c, q)
			}
			return c
		}
	}
	return clientpool.Rule{
		Name:   name,
		Limit:  lim,
		Window: func(l window.Limit) window.Policy { return window.NewTokenBucket(l, 0) },
		Key:    key,
		Weight: w,
		Learn: func(h http.Header, _ time.Time) (clientpool.Learned, bool) {
			c, ok := Count(h.Get(limitHeader))
			if !ok || c == 0 {
				return clientpool.Learned{}, false
			}
			l := Quantum(c, per)
			qcap.Store(l.N)
			return clientpool.Learned{Limit: l, Remaining: -1}, true
		},
		PauseOnThrottle: true,
		Source:          source,
	}
}
