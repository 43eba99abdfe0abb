package rstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratesem/ratesem/window"
)

// TestAdaptFleetCeilings: a ceiling set for the fleet (AdaptBounds.Set,
// SetLimit) is kept with the state: the level above it comes down to it
// at once and is stored as the limit; reports of another process with a
// higher Ceiling and no Set never raise the level above it; a later
// forced Set (the latest SetLimit) replaces it, up or down; an unforced
// Set never replaces a kept one; a learned limit (AdaptBounds.Learned)
// lowers the ceiling for every process, and a forced Set forgets it.
func TestAdaptFleetCeilings(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s, rdb := newStore(t, clk, time.Minute)
	per := 100 * time.Millisecond
	c := Charge{Rule: "r", Key: "k", Spec: spec(FixedWindow, 1, per)}
	other := AdaptBounds{Floor: 2, Ceiling: 1000, Start: 40} // a process that never set a ceiling
	n, err := s.Adapt(ctx, "sc", c, other, AdaptEvent{})
	if err != nil || n != 40 {
		t.Fatalf("new state: n=%d %v, want the start 40", n, err)
	}
	// climb well above 30
	climb := func(b AdaptBounds, rounds int) int64 {
		t.Helper()
		for range rounds {
			clk.add(per)
			if n, err = s.Adapt(ctx, "sc", c, b, AdaptEvent{Start: clk.t.Add(-per / 2), Count: n}); err != nil {
				t.Fatal(err)
			}
		}
		return n
	}
	if n = climb(other, 5); n <= 50 {
		t.Fatalf("after 5 clean windows: n=%d, want a climb above 50", n)
	}
	limit := func() string { v, _ := storedSpec(t, s, rdb, "sc", c); return v }
	// SetLimit(30) in one process: at once
	n, err = s.Adapt(ctx, "sc", c, AdaptBounds{Floor: 2, Ceiling: 30, Start: 30, Set: 30, Force: true}, AdaptEvent{})
	if err != nil || n != 30 {
		t.Fatalf("SetLimit 30: n=%d %v, want 30 at once", n, err)
	}
	if got, want := limit(), "4/30/100000/0/0"; got != want {
		t.Fatalf("the limit stored after SetLimit 30: %q, want %q", got, want)
	}
	// the other process's clean windows never raise it above 30
	if n = climb(other, 6); n != 30 {
		t.Fatalf("another process's reports after SetLimit 30: n=%d, want 30", n)
	}
	// an unforced Set (a process that set 25 earlier, reporting) does not replace it
	if n = climb(AdaptBounds{Floor: 2, Ceiling: 25, Set: 25}, 1); n != 30 {
		t.Fatalf("an unforced Set 25 over a kept 30: n=%d, want 30", n)
	}
	// the latest SetLimit wins, up
	if _, err = s.Adapt(ctx, "sc", c, AdaptBounds{Floor: 2, Ceiling: 50, Set: 50, Force: true}, AdaptEvent{}); err != nil {
		t.Fatal(err)
	}
	if n = climb(other, 8); n != 50 {
		t.Fatalf("after SetLimit 50 and clean windows: n=%d, want the ceiling 50", n)
	}
	// a learned (published) limit of 20 lowers it for everyone at once
	if n, err = s.Adapt(ctx, "sc", c, AdaptBounds{Floor: 2, Ceiling: 1000, Learned: 20}, AdaptEvent{}); err != nil || n != 20 {
		t.Fatalf("learned 20: n=%d %v, want 20", n, err)
	}
	if n = climb(other, 4); n != 20 {
		t.Fatalf("after learning 20: n=%d, want 20", n)
	}
	// a learned limit above the set ceiling does not lift it
	if _, err = s.Adapt(ctx, "sc", c, AdaptBounds{Floor: 2, Ceiling: 1000, Learned: 90}, AdaptEvent{}); err != nil {
		t.Fatal(err)
	}
	if n = climb(other, 8); n != 50 {
		t.Fatalf("learned 90 under a set 50: n=%d, want 50", n)
	}
	// a learned limit below the floor: the floor
	if n, err = s.Adapt(ctx, "sc", c, AdaptBounds{Floor: 2, Ceiling: 1000, Learned: 1}, AdaptEvent{}); err != nil || n != 2 {
		t.Fatalf("learned 1 over a floor of 2: n=%d %v, want 2", n, err)
	}
	// a forced Set forgets the learned limit
	if _, err = s.Adapt(ctx, "sc", c, AdaptBounds{Floor: 2, Ceiling: 1000, Set: 45, Force: true}, AdaptEvent{}); err != nil {
		t.Fatal(err)
	}
	if n = climb(other, 12); n != 45 {
		t.Fatalf("SetLimit 45 after learning 1: n=%d, want 45", n)
	}
	if got, want := limit(), "4/45/100000/0/0"; got != want {
		t.Fatalf("the limit stored: %q, want %q", got, want)
	}
	// a new key of a process that set a ceiling starts under it
	c2 := Charge{Rule: "r", Key: "k2", Spec: c.Spec}
	if n, err = s.Adapt(ctx, "sc", c2, AdaptBounds{Floor: 2, Ceiling: 10, Start: 10, Set: 10}, AdaptEvent{}); err != nil || n != 10 {
		t.Fatalf("a new key under a Set 10: n=%d %v", n, err)
	}
	if n, err = s.Adapt(ctx, "sc", c2, other, AdaptEvent{}); err != nil || n != 10 {
		t.Fatalf("another process on it: n=%d %v, want 10", n, err)
	}
	if n = func() int64 {
		for range 6 {
			clk.add(per)
			if n, err = s.Adapt(ctx, "sc", c2, other, AdaptEvent{Start: clk.t.Add(-per / 2), Count: n}); err != nil {
				t.Fatal(err)
			}
		}
		return n
	}(); n != 10 {
		t.Fatalf("another process's clean windows on a key set to 10: n=%d", n)
	}
}

// TestAdaptBuckets: an adaptive token bucket, leaky bucket or GCRA in
// Redis: the level is stored as the bucket's N with its burst kept
// (as win.TokenBucket's and win.GCRA's SetLimit keep a burst given in
// process), admissions refill at the level's rate, and the state is
// carried to a new level (an empty bucket stays empty: its debt kept in
// units, as SetLimit carries it).
func TestAdaptBuckets(t *testing.T) {
	ctx := context.Background()
	for _, k := range []Kind{TokenBucket, LeakyBucket, GCRA} {
		t.Run(k.String(), func(t *testing.T) {
			clk := newClock()
			s, rdb := newStore(t, clk, time.Minute)
			s2, _ := New(rdb, s.prefix, Options{Now: clk.now, Lease: time.Minute})
			per := time.Second
			sp := &Spec{Kind: k, Limit: window.Limit{N: 40, Per: per}, Burst: 4}
			c := Charge{Rule: "r", Key: "k", Spec: sp}
			b := AdaptBounds{Floor: 2, Ceiling: 100, Start: 40}
			n, err := s.Adapt(ctx, "sc", c, b, AdaptEvent{})
			if err != nil || n != 40 {
				t.Fatalf("new state: n=%d %v, want 40", n, err)
			}
			if got, _ := storedSpec(t, s, rdb, "sc", c); got != fmt.Sprintf("%d/40/1000000/4/0", k) {
				t.Fatalf("stored %q", got)
			}
			admit := func() bool {
				t.Helper()
				// another process's stale idea of the limit: N 40
				d, err := s2.Admit(ctx, "sc", []Charge{{Rule: "r", Key: "k", Spec: sp, Weight: 1}})
				if err != nil {
					t.Fatal(err)
				}
				if d.OK && k == LeakyBucket {
					_ = s2.Release(ctx, "sc", []Charge{{Rule: "r", Key: "k", Spec: sp, Weight: 1}}, d.Token)
				}
				return d.OK
			}
			for i := range 4 {
				if !admit() {
					t.Fatalf("admission %d of a full burst of 4: refused", i+1)
				}
			}
			if admit() {
				t.Fatal("a 5th admission from an empty bucket: admitted")
			}
			clk.add(10 * time.Millisecond)
			// a throttle cuts to the floor 2 (no success in the last Per)
			if n, err = s.Adapt(ctx, "sc", c, b, AdaptEvent{Throttled: true, Start: clk.t.Add(-5 * time.Millisecond)}); err != nil || n != 2 {
				t.Fatalf("throttle: n=%d %v, want the floor 2", n, err)
			}
			if got, _ := storedSpec(t, s, rdb, "sc", c); got != fmt.Sprintf("%d/2/1000000/4/0", k) {
				t.Fatalf("stored after the cut %q", got)
			}
			// at 40/s a unit would be back after 25 ms; at 2/s after 500
			clk.add(100 * time.Millisecond)
			if admit() {
				t.Fatal("100 ms after the cut to 2/s: admitted (the old rate)")
			}
			clk.add(450 * time.Millisecond)
			if !admit() {
				t.Fatal("550 ms after the cut to 2/s: refused")
			}
		})
	}
}
