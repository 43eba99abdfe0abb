package rstore

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratesem/ratesem/internal/win"
	"github.com/ratesem/ratesem/window"
)

// TestDifferentialUsageReports: the usage reconcile of a fixed completion
// window is the same bound in process (win.FixedWindow through
// win.Report, as clientpool uses it) and in Redis (ReconcileAt): random
// admissions, ends, marked reports (once per call, of calls in flight or
// ended, counts from 0 to beyond N), reports without a mark and window
// boundaries give the same change in units at every report and the same
// admission decisions.
func TestDifferentialUsageReports(t *testing.T) {
	var took, gave int
	for seed := uint64(1); seed <= 4; seed++ {
		clk := newClock()
		s, _ := newStore(t, clk, time.Minute)
		ctx := context.Background()
		l := window.Limit{N: 60, Per: time.Second}
		sp := &Spec{Kind: FixedCompletion, Limit: l}
		w := window.NewFixedCompletion(l)
		rng := rand.New(rand.NewPCG(seed, 7))
		type call struct {
			c              Charge
			token, mark    string
			win, ended     int64
			done, reported bool
		}
		var calls []*call
		key := "ip" + string(rune('0'+seed))
		for step := range 600 {
			clk.add(time.Duration(rng.IntN(40)) * time.Millisecond)
			now := clk.t
			switch op := rng.IntN(10); {
			case op < 4: // admit
				n := 1 + rng.Int64N(20)
				c := Charge{Rule: "w", Key: key, Spec: sp, Weight: n}
				_, okIn := w.Admit(now, n)
				d, err := s.Admit(ctx, "", []Charge{c})
				if err != nil {
					t.Fatal(err)
				}
				if okIn != d.OK {
					t.Fatalf("seed %d step %d: admit %d: in process %v, Redis %v", seed, step, n, okIn, d.OK)
				}
				if !d.OK {
					continue
				}
				cl := &call{c: c, token: d.Token, mark: d.Marks[0]}
				// Mark after Admit counts the call: its own admission's
				// window and ended units are what Admit's mark holds.
				cl.win, cl.ended, _, _ = win.Mark(w, now)
				calls = append(calls, cl)
			case op < 7: // end a call in flight
				for _, cl := range calls {
					if !cl.done {
						cl.done = true
						w.Done(now, cl.c.Weight)
						if err := s.Release(ctx, "", []Charge{cl.c}, cl.token); err != nil {
							t.Fatal(err)
						}
						break
					}
				}
			default: // a report, marked once per call, or without a mark
				if len(calls) == 0 {
					continue
				}
				cl := calls[rng.IntN(len(calls))]
				used := rng.Int64N(l.N + 20)
				marked := !cl.reported && rng.IntN(5) > 0
				r := Read{Seen: now}
				if marked {
					cl.reported = true
					r.Mark, r.Weight = cl.mark, cl.c.Weight
				}
				in, _ := win.Report(w, now, cl.win, used, cl.ended, cl.c.Weight, marked)
				red, err := s.ReconcileAt(ctx, "", cl.c, used, r)
				if err != nil {
					t.Fatal(err)
				}
				if in != red {
					t.Fatalf("seed %d step %d: report %d (marked %v, weight %d): in process %+d units, Redis %+d",
						seed, step, used, marked, cl.c.Weight, in, red)
				}
				if in > 0 {
					took++
				} else if in < 0 {
					gave++
				}
			}
		}
	}
	if took == 0 || gave == 0 {
		t.Fatalf("%d reports took units in and %d gave some back: the test tries neither", took, gave)
	}
}
