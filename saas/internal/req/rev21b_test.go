package req

import (
	"math"
	"testing"
	"time"
)

// Scaled never shortens a minute for f < 1 however small f is (a float
// beyond int64 saturates instead of wrapping), and stays at least 1 µs.
func TestRev21bScaledSaturates(t *testing.T) {
	for _, c := range []struct {
		f    float64
		want time.Duration
	}{
		{1, time.Minute}, {60, time.Second}, {0.5, 2 * time.Minute},
		{1e-9, math.MaxInt64}, {1e-300, math.MaxInt64}, {math.SmallestNonzeroFloat64, math.MaxInt64},
		{1e300, time.Microsecond}, {0, time.Minute}, {-1, time.Minute}, {math.NaN(), time.Minute}, {math.Inf(1), time.Minute},
	} {
		if got := Scaled(time.Minute, c.f); got != c.want {
			t.Errorf("Scaled(minute, %g) = %v, want %v", c.f, got, c.want)
		}
	}
}

// mulDivUp saturates when ⌈a·b/c⌉ does not fit in 63 bits, and rounds up
// otherwise.
func TestRev21bMulDivUp(t *testing.T) {
	for _, c := range []struct {
		a, b, c uint64
		want    int64
	}{
		{7, 3, 2, 11}, {6, 3, 2, 9}, {math.MaxInt64, 1, 1, math.MaxInt64}, {math.MaxInt64, 2, 1, math.MaxInt64},
		{math.MaxInt64, 60, 59, math.MaxInt64}, {math.MaxUint64, math.MaxUint64, 1, math.MaxInt64},
		{math.MaxInt64 - 1, 3, 3, math.MaxInt64 - 1}, {math.MaxInt64 - 1, 1<<62 + 1, 1 << 62, math.MaxInt64},
	} {
		if got := mulDivUp(c.a, c.b, c.c); got != c.want {
			t.Errorf("mulDivUp(%d, %d, %d) = %d, want %d", c.a, c.b, c.c, got, c.want)
		}
	}
}
