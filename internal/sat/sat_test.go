package sat

import (
	"math"
	"math/big"
	"testing"
)

// Each function against big.Int arithmetic clamped to the int64 range.
func clamp(x *big.Int) int64 {
	if x.Cmp(big.NewInt(math.MaxInt64)) > 0 {
		return math.MaxInt64
	}
	if x.Cmp(big.NewInt(math.MinInt64)) < 0 {
		return math.MinInt64
	}
	return x.Int64()
}

var edges = []int64{math.MinInt64, math.MinInt64 + 1, -1 << 40, -2, -1, 0, 1, 2, 1 << 40, math.MaxInt64 - 1, math.MaxInt64}

func TestAddSub(t *testing.T) {
	for _, a := range edges {
		for _, b := range edges {
			want := clamp(new(big.Int).Add(big.NewInt(a), big.NewInt(b)))
			if got := Add(a, b); got != want {
				t.Errorf("Add(%d, %d) = %d, want %d", a, b, got, want)
			}
			want = clamp(new(big.Int).Sub(big.NewInt(a), big.NewInt(b)))
			if got := Sub(a, b); got != want {
				t.Errorf("Sub(%d, %d) = %d, want %d", a, b, got, want)
			}
		}
	}
}

func TestMul(t *testing.T) {
	for _, a := range edges {
		for _, b := range edges {
			if a < 0 || b < 0 {
				continue
			}
			want := clamp(new(big.Int).Mul(big.NewInt(a), big.NewInt(b)))
			if got := Mul(a, b); got != want {
				t.Errorf("Mul(%d, %d) = %d, want %d", a, b, got, want)
			}
		}
	}
}

func FuzzAddSub(f *testing.F) {
	f.Add(int64(math.MaxInt64), int64(1))
	f.Add(int64(math.MinInt64), int64(-1))
	f.Fuzz(func(t *testing.T, a, b int64) {
		if got, want := Add(a, b), clamp(new(big.Int).Add(big.NewInt(a), big.NewInt(b))); got != want {
			t.Fatalf("Add(%d, %d) = %d, want %d", a, b, got, want)
		}
		if got, want := Sub(a, b), clamp(new(big.Int).Sub(big.NewInt(a), big.NewInt(b))); got != want {
			t.Fatalf("Sub(%d, %d) = %d, want %d", a, b, got, want)
		}
	})
}
