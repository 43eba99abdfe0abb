package win

import (
	"math"
	"math/bits"
)

// ceilDiv returns ceil(a/b) for a ≥ 0 and b > 0, without the overflow of
// (a+b−1)/b.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

// mulDiv returns floor(a·b/c) for a, b ≥ 0 and c > 0, exact through a
// 128-bit product, saturating at math.MaxInt64.
func mulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// u128 is an unsigned 128-bit integer, for products of a count of units and
// a duration in nanoseconds (N·Per overflows int64 for 200000 per day).
type u128 struct{ hi, lo uint64 }

func mul128(a, b int64) u128 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	return u128{hi, lo}
}

func (x u128) add(y u128) u128 {
	lo, c := bits.Add64(x.lo, y.lo, 0)
	hi, _ := bits.Add64(x.hi, y.hi, c)
	return u128{hi, lo}
}

func (x u128) lessEq(y u128) bool {
	return x.hi < y.hi || x.hi == y.hi && x.lo <= y.lo
}

// floorDiv returns floor(a/b) for b > 0, rounding towards −∞ for negative
// a (instants before 1970).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// sub returns x − y for y ≤ x.
func (x u128) sub(y u128) u128 {
	lo, b := bits.Sub64(x.lo, y.lo, 0)
	hi, _ := bits.Sub64(x.hi, y.hi, b)
	return u128{hi, lo}
}

// divCeil returns ceil(x/c) for c > 0, saturating at math.MaxInt64.
func (x u128) divCeil(c int64) int64 {
	if x.hi >= uint64(c) {
		return math.MaxInt64
	}
	q, r := bits.Div64(x.hi, x.lo, uint64(c))
	if r != 0 {
		q++
	}
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}
