package window_test

import (
	"testing"
	"time"

	"github.com/ratesem/ratesem/window"
)

// A Cancel that changes nothing (n ≤ 0, or a GCRA that admitted nothing
// yet) must not fix the window's epoch: Policy documents "n ≤ 0 changes
// nothing". Fixed at the zero time.Time, every later instant is more than
// 292 years after it, saturates, and time stops for the window: it then
// admits without limit (GCRA) or refuses for ever with a wait of 0.
func TestReviewCancelNoopKeepsEpoch(t *testing.T) {
	l := window.Limit{N: 1, Per: time.Second}
	cases := []struct {
		name   string
		p      func() window.Policy
		cancel int64
	}{
		{"GCRA n=1 before any Admit", func() window.Policy { return window.NewGCRA(l, 1) }, 1},
		{"GCRA n=0", func() window.Policy { return window.NewGCRA(l, 1) }, 0},
		{"TokenBucket n=0", func() window.Policy { return window.NewTokenBucket(l, 1) }, 0},
		{"SlidingLog n=0", func() window.Policy { return window.NewSlidingLog(l, 0) }, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := c.p()
			p.Cancel(time.Time{}, c.cancel)
			now := time.Unix(1_750_000_000, 0)
			if _, ok := p.Admit(now, 1); !ok {
				t.Fatal("first Admit refused")
			}
			at, ok := p.Admit(now, 1)
			if ok {
				t.Fatal("second Admit of 1 unit within the same instant admitted: N=1 per 1s exceeded")
			}
			if !at.After(now) {
				t.Fatalf("refused with at = %v, not after now %v (a waiter would spin)", at, now)
			}
			later := now.Add(2 * time.Second)
			if _, ok := p.Admit(later, 1); !ok {
				t.Fatal("Admit 2 s later refused: the window no longer sees time pass")
			}
		})
	}
}
