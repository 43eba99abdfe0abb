package rstore

import (
	"context"
	"testing"
	"time"

	"github.com/ratesem/ratesem/window"
)

// TestCarry: every window counts a call carried as ended (Carry, ended)
// from the carry on, whatever it held: a limiter already holding N units
// takes it over its limit and admits nothing until enough left it; a call
// carried in flight holds a lease (for the windows that lease) that Release
// ends; a weight of 0 changes nothing; a spec stored by another process is
// a mismatch. Under the completion window the carried units leave one Per
// after the carry.
func TestCarry(t *testing.T) {
	clk := newClock()
	s, _ := newStore(t, clk, time.Minute)
	ctx := context.Background()
	per := time.Second
	l := window.Limit{N: 4, Per: per}
	for name, sp := range map[string]*Spec{
		"completion":       {Kind: Completion, Limit: l},
		"fixed-completion": {Kind: FixedCompletion, Limit: l},
		"sliding-log":      {Kind: SlidingLog, Limit: l, Margin: time.Millisecond},
		"fixed":            {Kind: FixedWindow, Limit: l},
		"sliding-counter":  {Kind: SlidingWindowCounter, Limit: l},
		"sub-window":       {Kind: SubWindowCounter, Limit: l, Blocks: 4},
		"token-bucket":     {Kind: TokenBucket, Limit: l, Burst: 4},
		"leaky-bucket":     {Kind: LeakyBucket, Limit: l, Burst: 4},
		"gcra":             {Kind: GCRA, Limit: l, Burst: 4},
		"capped":           {Kind: Completion, Limit: l, Concurrency: 2},
	} {
		t.Run(name, func(t *testing.T) {
			c := []Charge{{Rule: name, Key: "k", Spec: sp, Weight: 1}}
			if _, err := s.Carry(ctx, "sc", []Charge{{Rule: name, Key: "k", Spec: sp}}, true); err != nil {
				t.Fatal(err)
			}
			d, err := s.Admit(ctx, "sc", c)
			if err != nil || !d.OK {
				t.Fatalf("a carry of weight 0 changed the window: %+v %v", d, err)
			}
			if err := s.Release(ctx, "sc", c, d.Token); err != nil {
				t.Fatal(err)
			}
			full := []Charge{{Rule: name, Key: "k", Spec: sp, Weight: sp.Capacity()}}
			for range 2 { // twice the capacity: beyond the limit
				if _, err := s.Carry(ctx, "sc", full, true); err != nil {
					t.Fatal(err)
				}
			}
			if d, err := s.Admit(ctx, "sc", c); err != nil || d.OK {
				t.Fatalf("admitted over carried calls: %+v %v", d, err)
			}
			in, err := s.Carry(ctx, "sc", c, false)
			if err != nil || !in.OK || in.Token == "" {
				t.Fatalf("%+v %v", in, err)
			}
			if err := s.Release(ctx, "sc", c, in.Token); err != nil {
				t.Fatalf("release of a call carried in flight: %v", err)
			}
			other := *sp
			other.Limit.N = 5
			if _, err := s.Carry(ctx, "sc", []Charge{{Rule: name, Key: "k", Spec: &other, Weight: 1}}, true); err == nil {
				t.Fatal("a carry under another limit: no mismatch")
			}
		})
	}
	// The completion window: the carried units leave a Per after the carry.
	sp := spec(Completion, 3, per)
	c := []Charge{{Rule: "late", Key: "k", Spec: sp, Weight: 1}}
	if _, err := s.Carry(ctx, "sc", []Charge{{Rule: "late", Key: "k", Spec: sp, Weight: 3}}, true); err != nil {
		t.Fatal(err)
	}
	clk.add(per - time.Millisecond)
	if d, _ := s.Admit(ctx, "sc", c); d.OK {
		t.Fatal("admitted before the carried units left")
	}
	clk.add(2 * time.Millisecond)
	if d, _ := s.Admit(ctx, "sc", c); !d.OK {
		t.Fatalf("refused a Per after the carry: %+v", d)
	}
}
