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

// floorDiv returns floor(a/b) for b > 0, rounding towards −∞ for negative
// a (instants before 1970).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// mulDiv returns q = (a·b + c)/d, rounded up when up, and r, the remainder
// of the division rounded down, for a, b, c ≥ 0 and d > 0: exact through a
// 128-bit sum of products (N·Per overflows int64 for 200000 per day), q
// saturating at math.MaxInt64 (r is then 0).
func mulDiv(a, b, c, d int64, up bool) (q, r int64) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	lo, carry := bits.Add64(lo, uint64(c), 0)
	hi += carry // a·b < 2^126: no wrap
	if hi >= uint64(d) {
		return math.MaxInt64, 0
	}
	uq, ur := bits.Div64(hi, lo, uint64(d))
	if uq >= math.MaxInt64 { // and uq++ could wrap at 2^64 − 1
		return math.MaxInt64, 0
	}
	if up && ur != 0 {
		uq++
	}
	return int64(uq), int64(ur)
}
