package rstore

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestWholeLossSettledCallsInFlight: calls in flight when Redis loses
// everything, ended after it by Settle (their weights known only then),
// count their ends from then with their actual weights, as a Release does
// with its estimate (TestWholeLossCallsInFlight): the completion window
// logs them, the fixed completion window counts them in the window they
// end in. Before: Settle found no lease and counted only a debit, so the
// window forgot the calls in flight at the loss.
func TestWholeLossSettledCallsInFlight(t *testing.T) {
	for _, k := range []Kind{Completion, FixedCompletion} {
		t.Run(k.String(), func(t *testing.T) {
			clk := newClock()
			clk.t = time.Unix(1_700_000_000, 0) // on a Per boundary
			s, rdb := newStore(t, clk, time.Minute)
			ctx := context.Background()
			cs := func(n int64) []Charge {
				return []Charge{{Rule: "r", Key: "k", Spec: spec(k, 4, time.Second), Weight: n}}
			}
			var toks []string
			for range 2 {
				d, err := s.Admit(ctx, "sc", cs(2))
				if err != nil || !d.OK {
					t.Fatal(d, err)
				}
				toks = append(toks, d.Token)
			}
			rdb.FlushAll(ctx)
			if d, _ := s.Admit(ctx, "sc", cs(1)); d.OK || !d.Lost {
				t.Fatalf("after FLUSHALL: %+v; want refused, lost", d)
			}
			clk.add(1500 * time.Millisecond) // after the hold (fixed: in the next window)
			for _, tok := range toks {
				if err := s.Settle(ctx, "sc", cs(2), tok, []int64{1}); !errors.Is(err, ErrNotInFlight) {
					t.Fatalf("settle of a call in flight at the loss: %v; want ErrNotInFlight", err)
				}
			}
			if d, _ := s.Admit(ctx, "sc", cs(3)); d.OK {
				t.Fatalf("right after the settled calls ended (2 units): %+v; want a weight of 3 refused", d)
			}
			if d, _ := s.Admit(ctx, "sc", cs(2)); !d.OK {
				t.Fatalf("2 of 4 units counted: %+v; want a weight of 2 admitted", d)
			}
		})
	}
}
