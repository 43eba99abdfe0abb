package win

import (
	"fmt"
	"math"
	"time"

	"github.com/ratesem/ratesem/internal/sat"
)

// TokenBucket is the token bucket: a bucket of Burst units, full at first,
// refilled lazily at N units per Per; a call of n units is admitted when the
// bucket holds n, and takes them. The refill is computed exactly, in integer
// arithmetic with the remainder carried, so it never drifts.
//
// Exact guarantee: at most Burst + N − 1 units start in any window of length
// Per (a full bucket, then the refill during the window), so with Burst = N
// a server counting N per Per can see 2N−1: the token bucket limits the
// average rate, not the count in every window. Burst 1 paces calls one by
// one, N/Per apart. Over a long run the rate is N per Per. It counts at the
// client.
//
// Memory: 112 bytes, whatever N. The zero TokenBucket is not usable;
// call NewTokenBucket. A TokenBucket is not safe for concurrent use (see
// Policy).
type TokenBucket struct {
	base
	limited
	burst    int64
	burstSet bool  // burst given to NewTokenBucket; else it follows N
	tokens   int64 // whole units in the bucket at last; < 0 after SetLimit lowered the burst below the debt
	frac     int64 // the next unit's refill so far, in units·ns: 0 ≤ frac < Per
	last     int64 // offset of the latest instant seen
	admitted int64 // offset of the latest admission, for Cancel
	started  bool
}

// NewTokenBucket returns a full token bucket that holds burst units and
// refills at l.N units per l.Per. A burst of 0 means l.N (and then follows N
// through SetLimit). It panics if l.N, l.Per or burst is negative. With Per 0
// the refill is instant (no rate): every call of at most burst units is
// admitted. With N 0 and Per > 0 the bucket never refills.
func NewTokenBucket(l Limit, burst int64) *TokenBucket {
	l.check("NewTokenBucket")
	if burst < 0 {
		panic(fmt.Sprintf("ratesem: NewTokenBucket: negative burst %d", burst))
	}
	b := &TokenBucket{limited: limited{l}, burst: burst, burstSet: burst > 0}
	if !b.burstSet {
		b.burst = l.N
	}
	b.tokens = b.burst
	return b
}

// Burst returns the bucket's size in units.
func (b *TokenBucket) Burst() int64 { return b.burst }

// Capacity implements Policy: it returns the burst.
func (b *TokenBucket) Capacity() int64 { return b.burst }

// refill brings the bucket up to now and returns now's offset.
func (b *TokenBucket) refill(now time.Time) int64 { return b.refillNs(b.ns(now)) }

// refillNs is refill at an offset: it brings the bucket up to now (or the
// latest instant seen, if later) and returns that instant.
func (b *TokenBucket) refillNs(now int64) int64 {
	t := b.clampNs(now)
	if !b.started {
		b.last, b.admitted, b.started = t, t, true
	}
	if t == b.last {
		return t
	}
	e := t - b.last
	b.last = t
	if b.tokens < b.burst && b.limit.Per > 0 {
		// (e·N + frac) / Per new units, the remainder carried in frac.
		q, r := mulDiv(e, b.limit.N, b.frac, int64(b.limit.Per), false)
		if q < b.burst-b.tokens {
			b.tokens += q
			b.frac = r
			return t
		}
	}
	b.fill() // full already, an instant refill (no rate), or the refill fills it
	return t
}

func (b *TokenBucket) fill() { b.tokens, b.frac = b.burst, 0 }

// SetLimit implements Policy: the bucket is refilled to now at the old rate,
// then refills at the new one. Its debt (burst − tokens, the units taken and
// not yet refilled) is kept, so what was admitted still counts: lowering the
// burst may leave the bucket below empty until the refill pays the debt,
// and raising it adds the difference at once. Below empty it goes at most
// one Per's refill at the new rate (N units) deep, as a debit does (see
// Settle): a limit lowered a thousandfold keeps the bucket refusing until
// the window moves, not for a thousand windows. A burst left at 0 in
// NewTokenBucket follows the new N. It panics on a negative limit.
func (b *TokenBucket) SetLimit(now time.Time, l Limit) { b.setLimit(b.ns(now), l) }

func (b *TokenBucket) setLimit(now int64, l Limit) {
	l.check("TokenBucket.SetLimit")
	b.refillNs(now)
	debt := b.burst - b.tokens
	if l.Per != b.limit.Per {
		// The fraction of a unit refilled so far is kept, rounded down.
		if l.Per > 0 && b.limit.Per > 0 {
			b.frac, _ = mulDiv(b.frac, int64(l.Per), 0, int64(b.limit.Per), false)
		} else {
			b.frac = 0
		}
	}
	b.limit = l
	if !b.burstSet {
		b.burst = l.N
	}
	b.tokens = b.burst - debt
	if b.tokens >= b.burst {
		b.fill()
	}
	// A debt deeper than one Per's refill at the new rate (a limit learned
	// from a server's headers lowered a busy bucket's N a thousandfold) is
	// kept at that: "full until the window moves", never a wait of many
	// windows. burst − tokens still fits an int64.
	if floor := b.floor(); b.tokens < floor {
		b.tokens, b.frac = floor, 0
	}
}

// floor is the most a debt may take the bucket below empty: one Per's
// refill, N units ("full until the window moves"), and never so far that
// burst − tokens would wrap. A limit of 0 refills nothing and refuses
// every call: its debt is kept whole, so that a limit set to 0 and back
// still counts the calls of before.
func (b *TokenBucket) floor() int64 {
	if b.limit.N == 0 {
		return b.burst - math.MaxInt64
	}
	return -min(b.limit.N, math.MaxInt64-b.burst)
}

// debit takes n > 0 units out of the bucket, refilled to now, below empty
// if need be but never below floor; a bucket already below it stays.
func (b *TokenBucket) debit(n int64) {
	floor := b.floor()
	switch {
	case b.tokens <= floor:
	case n >= sat.Add(b.tokens, -floor):
		b.tokens = floor
	default:
		b.tokens -= n
	}
}

// Admit implements Policy. A call of n units is admitted at now when the
// bucket, refilled to now, holds n units. Otherwise the instant returned is
// when the refill will have brought it to n; it is the zero time.Time when
// n exceeds the burst or N is 0.
func (b *TokenBucket) Admit(now time.Time, n int64) (time.Time, bool) {
	t := b.ns(now)
	at, ok := b.admit(t, n)
	return timeOf(now, t, at), ok
}

func (b *TokenBucket) admit(now, n int64) (int64, bool) {
	if done, ok := trivial(n, b.burst, b.limit.Per); done {
		return None, ok
	}
	t := b.refillNs(now)
	if n <= b.tokens {
		b.tokens -= n
		b.admitted = t
		return None, true
	}
	if b.limit.N == 0 {
		return None, false
	}
	// The smallest e with e·N + frac ≥ (n − tokens)·Per, written with
	// n − tokens ≥ 1 and frac < Per so that every term is non-negative.
	per := int64(b.limit.Per)
	e, _ := mulDiv(n-b.tokens-1, per, per-b.frac, b.limit.N, true)
	return sat.Add(t, e), false
}

// Cancel implements Policy: the n units go back into the bucket (up to the
// burst) when no admission came after at, which makes the bucket exactly as
// if that Admit had not happened. After a later admission the units are
// not given back: whether the bucket would have overflowed meanwhile is not
// recorded, so giving them back could admit more than the rule allows.
func (b *TokenBucket) Cancel(at time.Time, n int64) {
	if n > 0 { // else nothing to undo: at must not fix the epoch
		b.cancel(b.ns(at), n)
	}
}

func (b *TokenBucket) cancel(at, n int64) {
	if n > 0 && at >= b.admitted {
		b.give(n)
	}
}

// give puts n > 0 units back into the bucket, never beyond full.
func (b *TokenBucket) give(n int64) {
	b.tokens += min(n, b.burst-b.tokens) // tokens ≥ −N: no wrap
	if b.tokens == b.burst {
		b.frac = 0
	}
}

// Done implements Policy. It does nothing: the bucket counts starts only.
func (b *TokenBucket) Done(time.Time, int64) {}
func (b *TokenBucket) done(int64, int64)     {}

// LeakyBucket is the leaky bucket as a meter: a bucket of Capacity units
// that leaks at N units per Per; a call of n units pours n units in, and is
// admitted only if they fit (level + n ≤ Capacity). Standalone (see
// Limiter.AllowN) it rejects when full; as the policy of a RateSemaphore the
// call waits until the leak makes room.
//
// It is the token bucket seen from the other side, level = Capacity −
// tokens, and makes the same decisions, so it embeds one; its exact
// guarantee is the token bucket's: at most Capacity + N − 1 units in any
// window of length Per. For the leaky bucket as a queue that spaces calls
// evenly, see NewPacer.
//
// The zero LeakyBucket is not usable; call NewLeakyBucket. A LeakyBucket is
// not safe for concurrent use (see Policy).
type LeakyBucket struct {
	TokenBucket
}

// NewLeakyBucket returns an empty leaky bucket of capacity units that leaks
// l.N units per l.Per. A capacity of 0 means l.N. It panics if l.N, l.Per or
// capacity is negative.
func NewLeakyBucket(l Limit, capacity int64) *LeakyBucket {
	return &LeakyBucket{*NewTokenBucket(l, capacity)}
}
