// Package sat holds the saturating int64 arithmetic that ratesem uses
// wherever a count of units or a duration comes from a caller or a server:
// a sum, difference or product that does not fit sticks at math.MaxInt64 or
// math.MinInt64 instead of wrapping (a usage header of MaxInt64 must mean
// "full", never a negative count). The functions are pure and safe for
// concurrent use.
package sat

import (
	"math"
	"math/bits"
)

// Add returns a+b, saturating at math.MaxInt64 and math.MinInt64.
func Add(a, b int64) int64 {
	s := a + b
	if (b > 0 && s < a) || (b < 0 && s > a) {
		if b > 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return s
}

// Sub returns a−b, saturating at math.MaxInt64 and math.MinInt64.
func Sub(a, b int64) int64 {
	d := a - b
	if (b > 0 && d > a) || (b < 0 && d < a) {
		if b > 0 {
			return math.MinInt64
		}
		return math.MaxInt64
	}
	return d
}

// Mul returns a·b for a, b ≥ 0, saturating at math.MaxInt64.
func Mul(a, b int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}
