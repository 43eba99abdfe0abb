package rstore

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratesem/ratesem/internal/winfast"
	"github.com/ratesem/ratesem/window"
)

// TestReview4DifferentialHostileReports extends
// TestDifferentialUsageReports with what a hostile or broken server sends
// and what a caller does between reports: counts of 0, N, N+1, 2^53+1 and
// math.MaxInt64, counts going up and down, marked reports of calls of an
// earlier window, reports after the call's end, cancelled admissions,
// SetLimit (calls released under the limit they were admitted at, reports
// sent under the limit now, as clientpool does), and more seeds and limits. In process and in Redis every report changes the
// window by the same units and every admission is decided alike.
func TestReview4DifferentialHostileReports(t *testing.T) {
	var took, gave, stale, cancels, setLimits int
	for seed := uint64(1); seed <= 12; seed++ {
		clk := newClock()
		s, _ := newStore(t, clk, time.Minute)
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(seed, 404))
		l := window.Limit{N: 1 + rng.Int64N(80), Per: time.Second}
		sp := &Spec{Kind: FixedCompletion, Limit: l}
		w := window.NewFixedCompletion(l)
		type call struct {
			c              Charge
			token, mark    string
			win, ended, at int64
			done, reported bool
		}
		var calls []*call
		key := "h" + string(rune('a'+seed))
		counts := []int64{0, l.N, l.N + 1, 1<<53 + 1, math.MaxInt64}
		for step := range 700 {
			clk.add(time.Duration(rng.IntN(30)) * time.Millisecond)
			now := clk.t
			if rng.IntN(60) == 0 { // SetLimit, adopted by both
				l = window.Limit{N: 1 + rng.Int64N(80), Per: time.Second}
				sp = &Spec{Kind: FixedCompletion, Limit: l}
				w.SetLimit(now, l)
				if err := s.SetLimit(ctx, "", Charge{Rule: "w", Key: key, Spec: sp}); err != nil {
					t.Fatal(err)
				}
				setLimits++
			}
			switch op := rng.IntN(12); {
			case op < 4: // admit
				n := 1 + rng.Int64N(l.N)
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
				cl := &call{c: c, token: d.Token, mark: d.Marks[0], at: now.UnixNano()}
				cl.win, cl.ended, _, _ = winfast.Mark(w, now)
				calls = append(calls, cl)
			case op < 6: // end a call in flight
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
			case op < 7: // cancel the latest call in flight (admitted, never sent)
				if len(calls) == 0 {
					continue
				}
				cl := calls[len(calls)-1]
				if cl.done || cl.reported {
					continue
				}
				cl.done = true
				cancels++
				w.Cancel(time.Unix(0, cl.at), cl.c.Weight)
				if err := s.Cancel(ctx, "", []Charge{cl.c}, cl.token); err != nil {
					t.Fatal(err)
				}
				calls = calls[:len(calls)-1]
			default: // a report
				if len(calls) == 0 {
					continue
				}
				cl := calls[rng.IntN(len(calls))]
				used := rng.Int64N(l.N + 5)
				if rng.IntN(3) == 0 {
					used = counts[rng.IntN(len(counts))]
				}
				marked := !cl.reported && rng.IntN(5) > 0
				r := Read{Seen: now}
				if marked {
					cl.reported = true
					r.Mark, r.Weight = cl.mark, cl.c.Weight
				}
				cur, _, _, _ := winfast.Mark(w, now)
				if marked && cl.win != cur {
					stale++
				}
				in, _ := winfast.Report(w, now, cl.win, used, cl.ended, cl.c.Weight, marked)
				rc := cl.c
				rc.Spec = sp // clientpool sends a report under the rule's limit now
				red, err := s.ReconcileAt(ctx, "", rc, used, r)
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
	if took == 0 || gave == 0 || stale == 0 || cancels == 0 || setLimits == 0 {
		t.Fatalf("%d reports took units in, %d gave some back, %d were of an earlier window: the test tries too little", took, gave, stale)
	}
	t.Logf("%d reports took units in, %d gave back, %d marked reports of an earlier window, %d cancels, %d SetLimits", took, gave, stale, cancels, setLimits)
}
