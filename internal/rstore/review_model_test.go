package rstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratesem/ratesem/window"
)

// reviewCall is one admitted call in the model: [start, end) in µs of the
// virtual clock; end < 0 while in flight; cancelled calls are dropped.
type reviewCall struct {
	tok        string
	w          []int64 // weight per charge
	start, end int64
}

// TestReviewRandomModelCompletionAndFixed drives one Store on a virtual
// clock with random multi-charge calls (a completion window, a fixed
// completion window and a concurrency-capped completion window in every
// call, random weights), random releases, cancels and lease run-outs, and
// checks every rule's documented guarantee at every admission:
//   - completion: units in flight + units ended in the last Per ≤ N
//     (a call whose lease ran out counts as ended at the lease's end);
//   - fixed completion: calls whose [start, end] touch an aligned window ≤ N;
//   - concurrency cap: units in flight ≤ cap.
func TestReviewRandomModelCompletionAndFixed(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		reviewRunModel(t, seed)
	}
}

func reviewRunModel(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 42))
	clk := newClock()
	const lease = 700 * time.Millisecond
	s, _ := newStore(t, clk, lease)
	ctx := context.Background()
	per := time.Second
	comp := &Spec{Kind: Completion, Limit: window.Limit{N: 10, Per: per}}
	fixed := &Spec{Kind: FixedCompletion, Limit: window.Limit{N: 7, Per: per}}
	capd := &Spec{Kind: Completion, Limit: window.Limit{N: 12, Per: 2 * per}, Concurrency: 3}
	specs := []*Spec{comp, fixed, capd}
	key := func(i int) string { return string(rune('a' + i)) }
	var calls []*reviewCall
	leaseUS := lease.Microseconds()
	perUS := per.Microseconds()
	endOf := func(c *reviewCall) int64 { // effective end, or -1 in flight at now
		now := clk.t.UnixMicro()
		if c.end >= 0 {
			return c.end
		}
		if c.start+leaseUS <= now {
			return c.start + leaseUS
		}
		return -1
	}
	check := func(now int64) {
		var compU, capInflight, capU int64
		for _, c := range calls {
			e := endOf(c)
			if c.start <= now && (e < 0 || e+perUS > now) {
				compU += c.w[0]
			}
			if c.start <= now && (e < 0 || e+2*perUS > now) {
				capU += c.w[2]
			}
			if e < 0 {
				capInflight += c.w[2]
			}
		}
		if compU > 10 {
			t.Fatalf("seed %d at %d: completion counts %d > 10", seed, now, compU)
		}
		if capU > 12 {
			t.Fatalf("seed %d at %d: capped completion counts %d > 12", seed, now, capU)
		}
		if capInflight > 3 {
			t.Fatalf("seed %d at %d: %d units in flight > cap 3", seed, now, capInflight)
		}
		win := now / perUS
		var fx int64
		for _, c := range calls {
			e := endOf(c)
			if e < 0 {
				e = now
			}
			if c.start/perUS <= win && e/perUS >= win {
				fx += c.w[1]
			}
		}
		if fx > 7 {
			t.Fatalf("seed %d at %d: fixed completion window %d touched by %d units > 7", seed, now, win, fx)
		}
	}
	for step := 0; step < 400; step++ {
		clk.add(time.Duration(rng.IntN(250_000)) * time.Microsecond)
		now := clk.t.UnixMicro()
		switch op := rng.IntN(10); {
		case op < 5:
			cs := make([]Charge, 3)
			w := make([]int64, 3)
			for i, sp := range specs {
				w[i] = 1 + rng.Int64N(3)
				cs[i] = Charge{Rule: "r" + key(i), Key: "k", Spec: sp, Weight: w[i]}
			}
			d, err := s.Admit(ctx, "sc", cs)
			if err != nil {
				t.Fatalf("seed %d: admit: %v", seed, err)
			}
			if d.OK {
				calls = append(calls, &reviewCall{tok: d.Token, w: w, start: now, end: -1})
				check(now)
			}
		case op < 8 || op == 9:
			var live []int
			for i, c := range calls {
				if endOf(c) < 0 {
					live = append(live, i)
				}
			}
			if len(live) == 0 {
				continue
			}
			i := live[rng.IntN(len(live))]
			c := calls[i]
			cs := make([]Charge, 3)
			for j, sp := range specs {
				cs[j] = Charge{Rule: "r" + key(j), Key: "k", Spec: sp, Weight: c.w[j]}
			}
			if op == 9 {
				if err := s.Cancel(ctx, "sc", cs, c.tok); err != nil && !errors.Is(err, ErrNotInFlight) {
					t.Fatalf("cancel: %v", err)
				}
				calls = append(calls[:i], calls[i+1:]...)
			} else {
				if err := s.Release(ctx, "sc", cs, c.tok); err != nil && !errors.Is(err, ErrNotInFlight) {
					t.Fatalf("release: %v", err)
				}
				c.end = now
			}
		}
	}
}
