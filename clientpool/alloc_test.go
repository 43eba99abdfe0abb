package clientpool_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/window"
)

// plainCallAllocs is what an admitted Acquire and Release of one charge on
// a rule without Learn or Settle allocates. Measured with this test on the
// code before settling and learning existed (f401a47): 4 as well.
const plainCallAllocs = 4

// Settling and learning add no allocation to a call that does not use
// them.
func TestPlainCallAllocations(t *testing.T) {
	p, err := clientpool.New(clientpool.Table{Rules: []clientpool.Rule{{Name: "r", Limit: window.Limit{N: 1 << 40, Per: time.Millisecond}}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := clientpool.Charge{Rule: "r", Weight: 1}
	for range 10000 { // the window's log reaches its steady size
		tk, _ := p.Acquire(ctx, c)
		tk.Release()
	}
	allocs := testing.AllocsPerRun(1000, func() {
		tk, err := p.Acquire(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		tk.Release()
	})
	if allocs != plainCallAllocs {
		t.Fatalf("an admitted call allocates %v times, want %d", allocs, plainCallAllocs)
	}
}
