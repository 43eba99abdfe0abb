package redis

import (
	"errors"
	"math"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/window"
)

// TestWeightsFromCallers: a negative weight is an error matching
// window.ErrNegativeWeight, a weight over the capacity (2^50 at most, so
// every sum the scripts make stays below 2^53, where Lua's doubles are
// exact) one matching window.ErrWeightTooLarge, both without a round trip;
// limits beyond 2^50 are refused by the constructors.
func TestWeightsFromCallers(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { _ = c.Close() })
	ctx := ctxT(t)
	w, err := NewCompletion(c, "w", Limit{N: maxMicros, Per: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int64{-1, math.MinInt64} {
		if _, err := w.Admit(ctx, n); !errors.Is(err, window.ErrNegativeWeight) {
			t.Errorf("Admit(%d): %v; want ErrNegativeWeight", n, err)
		}
	}
	for _, n := range []int64{maxMicros + 1, 1<<53 + 1, math.MaxInt64} {
		if _, err := w.Admit(ctx, n); !errors.Is(err, window.ErrWeightTooLarge) {
			t.Errorf("Admit(%d): %v; want ErrWeightTooLarge", n, err)
		}
	}
	for _, n := range []int64{maxMicros + 1, 1 << 53, math.MaxInt64} {
		if _, err := NewCompletion(c, "w", Limit{N: n, Per: time.Second}); !errors.Is(err, window.ErrInvalidLimit) {
			t.Errorf("NewCompletion(N = %d): %v; want ErrInvalidLimit", n, err)
		}
		if _, err := NewGCRA(c, "w", Limit{N: 1, Per: time.Second}, n); err == nil {
			t.Errorf("NewGCRA(burst = %d) accepted", n)
		}
	}
	g, _ := NewGCRA(c, "g", Limit{N: 5, Per: time.Second}, 0)
	if err := g.Cancel(ctx, "9007199254740993:1"); err == nil {
		t.Error("Cancel of a forged token of 2^53+1 units accepted")
	}
}
