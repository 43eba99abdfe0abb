package rstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratesem/ratesem/window"
)

// Pipe ends calls (releases and settlements, of any scope) and then
// decides admissions in one round trip: the admissions see the room the
// ends made; an end of a call Redis no longer holds matches
// ErrNotInFlight; a malformed token fails its end alone, before the round
// trip; scripts flushed cost one more round trip.
func TestPipeEndsThenAdmits(t *testing.T) {
	clk := newClock()
	s, c := newStore(t, clk, time.Minute)
	ctx := context.Background()
	var trips int
	c.AddHook(countHook{&trips})
	capped := &Spec{Kind: FixedWindow, Limit: window.Limit{N: 100, Per: time.Second}, Concurrency: 1}
	fw := &Spec{Kind: FixedWindow, Limit: window.Limit{N: 10, Per: time.Second}}
	one := func(sp *Spec, key string, w int64) []Charge {
		return []Charge{{Rule: "r", Key: key, Spec: sp, Weight: w}}
	}
	// warm up: the release script loaded
	if w, err := s.Admit(ctx, "sc", one(fw, "warm", 1)); err != nil || s.Release(ctx, "sc", one(fw, "warm", 1), w.Token) != nil {
		t.Fatal(w, err)
	}
	a, err := s.Admit(ctx, "sc", one(capped, "a", 1))
	if err != nil || !a.OK {
		t.Fatal(a, err)
	}
	b, err := s.Admit(ctx, "other", one(fw, "b", 4))
	if err != nil || !b.OK {
		t.Fatal(b, err)
	}
	if d, _ := s.Admit(ctx, "sc", one(capped, "a", 1)); d.OK {
		t.Fatalf("the cap of 1 admitted a second call: %+v", d)
	}
	trips = 0
	ends := []End{
		{Scope: "sc", Charges: one(capped, "a", 1), Token: a.Token},
		{Scope: "other", Charges: one(fw, "b", 4), Token: b.Token, Actual: []int64{1}}, // a refund of 3
		{Scope: "sc", Charges: one(capped, "a", 1), Token: "bad"},
	}
	eerrs, ds, errs, err := s.Pipe(ctx, ends, "sc", [][]Charge{one(capped, "a", 1), one(capped, "a", 1)}, nil)
	if err != nil || trips != 1 {
		t.Fatalf("%v, %d round trips; want 1", err, trips)
	}
	if eerrs[0] != nil || eerrs[1] != nil || eerrs[2] == nil {
		t.Fatalf("ends: %v", eerrs)
	}
	if errs[0] != nil || errs[1] != nil || !ds[0].OK || ds[1].OK {
		t.Fatalf("admissions after the release: %+v %v; want the first only", ds, errs)
	}
	// The settlement refunded 3 of 4: 9 units left in the window.
	if d, _ := s.Admit(ctx, "other", one(fw, "b", 9)); !d.OK {
		t.Fatalf("after the settlement: %+v, want room for 9", d)
	}
	// Ending again: the lease is gone.
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	trips = 0
	eerrs, _, _, err = s.Pipe(ctx, ends[:1], "", nil, nil)
	if err != nil || !errors.Is(eerrs[0], ErrNotInFlight) || trips != 2 {
		t.Fatalf("a second end after SCRIPT FLUSH: %v %v, %d round trips; want ErrNotInFlight in 2", eerrs, err, trips)
	}
	// An answer-by instant already passed refuses that admission alone.
	clk.add(2 * time.Second)
	_, ds, errs, err = s.Pipe(ctx, nil, "other", [][]Charge{one(fw, "b", 1), one(fw, "b", 1)}, []time.Time{{}, time.Now().Add(-time.Second)})
	if err != nil || errs[0] != nil || errs[1] != nil || !ds[0].OK || ds[1].OK || !ds[1].Late {
		t.Fatalf("answer-by: %+v %v %v", ds, errs, err)
	}
}
