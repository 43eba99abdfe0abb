package rstore

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/ratesem/ratesem/internal/win"
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
				cl.win, cl.ended, _, _ = win.Mark(w, now)
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
				cur, _, _, _ := win.Mark(w, now)
				if marked && cl.win != cur {
					stale++
				}
				in, _ := win.Report(w, now, cl.win, used, cl.ended, cl.c.Weight, marked)
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

// TestReview4HonestServerModelRedis is window's
// TestFixedCompletionReportHonestModel over Redis: a fixed completion
// window in Redis against an honest server counting arrivals in the same
// aligned windows, with traffic from elsewhere, random latencies and
// replies taken in late and in any order. For every window the server's
// count is at most N plus the units from elsewhere the fleet could not
// know of at its last admission in that window.
func TestReview4HonestServerModelRedis(t *testing.T) {
	seeds := 12
	if testing.Short() {
		seeds = 3
	}
	clk := newClock()
	s, _ := newStore(t, clk, time.Minute)
	ctx := context.Background()
	for seed := range seeds {
		r := rand.New(rand.NewPCG(uint64(seed), 7))
		const per = 100 * time.Millisecond
		n := int64(5 + r.IntN(30))
		sp := &Spec{Kind: FixedCompletion, Limit: window.Limit{N: n, Per: per}}
		key := "m" + strconv.Itoa(seed)
		// Start at a window's start.
		clk.t = time.Unix(0, (clk.t.UnixNano()/int64(per)+10)*int64(per))
		lat := time.Duration(1+r.IntN(60)) * time.Millisecond
		foreignRate := r.Float64() * 0.3
		admitRate := 0.2 + r.Float64()*0.8
		type mcall struct {
			c                    Charge
			token, mark          string
			win                  int64
			arrive, done, reply  time.Time
			count                int64
			arrived, ended, seen bool
			foreign              int64
		}
		server, foreign, lastKnown := map[int64]int64{}, map[int64]int64{}, map[int64]int64{}
		topCount, topForeign := map[int64]int64{}, map[int64]int64{}
		var calls []*mcall
		winOf := func(t time.Time) int64 { return t.UnixNano() / int64(per) }
		const steps = 1500
		for range steps {
			clk.add(time.Millisecond)
			now := clk.t
			win := winOf(now)
			if r.Float64() < foreignRate {
				k := int64(1 + r.IntN(3))
				server[win] += k
				foreign[win] += k
			}
			var due []*mcall
			for _, c := range calls {
				if !c.arrived && !c.arrive.After(now) {
					c.arrived = true
					server[win] += c.c.Weight
					c.count, c.foreign = server[win], foreign[win]
					if win != c.win {
						c.count = -1 // counted in a later window than its admission's: its report is dropped
					}
				}
			}
			for _, c := range calls {
				if c.arrived && !c.ended && !c.done.After(now) {
					due = append(due, c)
				}
				if c.arrived && !c.seen && !c.reply.After(now) {
					due = append(due, c)
				}
			}
			r.Shuffle(len(due), func(i, j int) { due[i], due[j] = due[j], due[i] })
			for _, c := range due {
				if c.arrived && !c.ended && !c.done.After(now) {
					c.ended = true
					if err := s.Release(ctx, "", []Charge{c.c}, c.token); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if !c.seen {
					c.seen = true
					if c.count < 0 {
						continue
					}
					if _, err := s.ReconcileAt(ctx, "", c.c, c.count, Read{Seen: now, Mark: c.mark, Weight: c.c.Weight}); err != nil {
						t.Fatal(err)
					}
					if win == c.win && c.count > topCount[c.win] {
						topCount[c.win], topForeign[c.win] = c.count, c.foreign
					}
				}
			}
			if r.Float64() < admitRate {
				k := int64(1 + r.IntN(int(min(n, 6))))
				c := Charge{Rule: "w", Key: key, Spec: sp, Weight: k}
				d, err := s.Admit(ctx, "", []Charge{c})
				if err != nil {
					t.Fatal(err)
				}
				if d.OK {
					mc := &mcall{c: c, token: d.Token, mark: d.Marks[0], win: win}
					mc.arrive = now.Add(time.Millisecond + time.Duration(r.Int64N(int64(lat)+1)))
					mc.done = mc.arrive.Add(time.Millisecond + time.Duration(r.Int64N(int64(lat)+1)))
					mc.reply = mc.arrive.Add(time.Duration(r.Int64N(3*int64(lat) + 1)))
					calls = append(calls, mc)
					lastKnown[win] = topForeign[win]
				}
			}
		}
		last := winOf(clk.t)
		for win, cnt := range server {
			if win >= last {
				continue
			}
			if bound := n + foreign[win] - lastKnown[win]; cnt > bound {
				t.Fatalf("seed %d: N=%d: the server counted %d in a window, more than N + %d from elsewhere − %d known at the last admission",
					seed, n, cnt, foreign[win], lastKnown[win])
			}
		}
	}
}

// A count without a mark (a call's second report, Reconcile) leaves the
// bound the marked reports set as it was: N = 100, 40 from elsewhere; B
// (10) counted at 50, A (10) at 60; A's report (marked), C (10) admitted,
// A's count again without a mark, B's report (marked): 40 from elsewhere,
// 30 own, a call of 31 refused. On the base commit the count without a
// mark took C as counted and B's report gave back down to 30: the 31 was
// admitted.
func TestReview4UnmarkedCountKeepsTheBound(t *testing.T) {
	clk := newClock()
	clk.t = time.Unix(1_700_000_040, 0) // a minute's start
	s, _ := newStore(t, clk, time.Minute)
	ctx := context.Background()
	sp := &Spec{Kind: FixedCompletion, Limit: window.Limit{N: 100, Per: time.Minute}}
	admit := func(n int64) (Charge, Decision) {
		c := Charge{Rule: "ip", Key: "k", Spec: sp, Weight: n}
		d, err := s.Admit(ctx, "", []Charge{c})
		if err != nil {
			t.Fatal(err)
		}
		return c, d
	}
	report := func(c Charge, used int64, d *Decision) {
		r := Read{Seen: clk.t}
		if d != nil {
			r.Mark, r.Weight = d.Marks[0], c.Weight
		}
		if _, err := s.ReconcileAt(ctx, "", c, used, r); err != nil {
			t.Fatal(err)
		}
	}
	a, da := admit(10)
	b, db := admit(10)
	report(a, 60, &da)
	_, dc := admit(10)
	report(a, 60, nil)
	report(b, 50, &db)
	if !da.OK || !db.OK || !dc.OK {
		t.Fatal("refused a call of 10")
	}
	if _, d := admit(31); d.OK {
		t.Fatal("admitted 31 with 30 own and 40 from elsewhere of 100")
	}
}
