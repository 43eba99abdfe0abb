package clientpool

import (
	"testing"
	"time"

	"github.com/ratesem/ratesem/internal/rstore"
	"github.com/ratesem/ratesem/window"
)

// TestStraddles: a usage report of a call admitted in one aligned window
// and answered in the next is the previous window's count and is dropped
// (it would tighten the new window by a whole window's use: the fleet's
// first full window then lost up to 40% of its budget); one answered in
// its own window, or of a window that is not aligned, is kept.
func TestStraddles(t *testing.T) {
	minute := window.Limit{N: 6000, Per: time.Minute}
	fixed := &rstore.Spec{Kind: rstore.FixedCompletion, Limit: minute}
	sub := &rstore.Spec{Kind: rstore.SubWindowCounter, Limit: minute, Blocks: 6}
	comp := &rstore.Spec{Kind: rstore.Completion, Limit: minute}
	boundary := time.Unix(1_700_000_040, 0) // a whole minute
	for _, tc := range []struct {
		name     string
		spec     *rstore.Spec
		at       time.Time
		answered time.Duration // how long ago the admission came back
		want     bool
	}{
		{"same window", fixed, boundary.Add(time.Second), 0, false},
		{"admitted before the boundary, now after", fixed, boundary.Add(-100 * time.Millisecond), 200 * time.Millisecond, true},
		{"sub-window block crossed", sub, boundary.Add(9 * time.Second), 2 * time.Second, true},
		{"sub-window same block", sub, boundary.Add(time.Second), 2 * time.Second, false},
		{"completion is not aligned", comp, boundary.Add(-100 * time.Millisecond), 200 * time.Millisecond, false},
		{"fallback: no admission instant", fixed, time.Time{}, time.Hour, false},
		{"no spec", nil, boundary, time.Hour, false},
	} {
		// tc.at is Redis's instant of the admission; it came back
		// tc.answered ago, so Redis's clock now is about tc.at + answered.
		seen := time.Now().Add(-tc.answered)
		if got := straddles(tc.spec, tc.at, seen); got != tc.want {
			t.Errorf("%s: straddles = %v, want %v", tc.name, got, tc.want)
		}
	}
}
