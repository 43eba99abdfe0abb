package backoff

import (
	"math"
	"testing"
	"time"
)

func TestExpBounds(t *testing.T) {
	const limit = 5 * time.Minute
	for attempt := -1; attempt < 200; attempt++ {
		want := limit
		if attempt >= 0 && attempt < 62 && DefaultMin<<attempt < limit && DefaultMin<<attempt > 0 {
			want = DefaultMin << attempt
		}
		for range 50 {
			d := Exp(attempt, 0, 0)
			if d < want/2 || d > want {
				t.Fatalf("Exp(%d) = %v, want in [%v, %v]", attempt, d, want/2, want)
			}
		}
	}
	if d := Exp(math.MaxInt, time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)); d < time.Duration(math.MaxInt64)/2 || d < 0 {
		t.Fatalf("Exp(huge) = %v", d)
	}
	if d := Exp(3, time.Hour, time.Second); d > time.Second || d < time.Second/2 {
		t.Fatalf("Exp with start above the cap = %v, want within (0.5s, 1s]", d)
	}
}

func TestExpSpreads(t *testing.T) {
	seen := map[time.Duration]bool{}
	for range 100 {
		seen[Exp(4, 0, 0)] = true
	}
	if len(seen) < 50 {
		t.Fatalf("Exp(4) gave %d distinct pauses in 100 draws: no jitter", len(seen))
	}
}

func TestSpread(t *testing.T) {
	for _, tc := range []struct{ d, limit, lo, hi time.Duration }{
		{0, time.Minute, 0, 50 * time.Millisecond},
		{-time.Second, time.Minute, 0, 50 * time.Millisecond},
		{10 * time.Second, time.Minute, 10 * time.Second, 11*time.Second + 50*time.Millisecond},
		{time.Minute, time.Minute, 54 * time.Second, time.Minute},
		{time.Duration(math.MaxInt64), time.Minute, 54 * time.Second, time.Minute},
		{59990 * time.Millisecond, time.Minute, 59990 * time.Millisecond, time.Minute},
		{time.Hour, 0, DefaultMaxPause * 9 / 10, DefaultMaxPause},
	} {
		for range 200 {
			if got := Spread(tc.d, tc.limit); got < tc.lo || got > tc.hi {
				t.Fatalf("Spread(%v, %v) = %v, want in [%v, %v]", tc.d, tc.limit, got, tc.lo, tc.hi)
			}
		}
	}
}
