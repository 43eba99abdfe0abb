package window_test

import (
	"testing"
	"time"

	"github.com/ratesem/ratesem/window"
)

// The wait of a token bucket is ceil(x/N) with x = (n − tokens)·Per −
// frac; when floor(x/N) is 2^64 − 1 with a remainder, the rounding up
// must saturate, not wrap to a wait of 0 (a refusal "at now": a waiter
// would spin).
func TestReviewTokenBucketWaitSaturates(t *testing.T) {
	const burst = 55340232224
	b := window.NewTokenBucket(window.Limit{N: 3, Per: time.Second}, burst)
	t0 := time.Unix(1_750_000_000, 0)
	if _, ok := b.Admit(t0, burst); !ok {
		t.Fatal("a full bucket refused its burst")
	}
	now := t0.Add(623781718) // refills 1 unit, frac 871345154
	at, ok := b.Admit(now, burst-1)
	if ok {
		t.Fatal("admitted")
	}
	if !at.After(now.Add(100 * 365 * 24 * time.Hour)) {
		t.Fatalf("refused with at = %v (wait %v): want the saturated wait", at, at.Sub(now))
	}
}
