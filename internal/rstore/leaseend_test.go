package rstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// checkLeaseEnd fails unless the hash field o of the limiter of c, when
// set, is at most the end of every lease in its sorted set F: the fast
// release skips ZSCORE on a limiter whose o is after now, trusting that
// no lease there ran out.
func checkLeaseEnd(t *testing.T, s *Store, scope string, c Charge, step string) {
	t.Helper()
	ctx := context.Background()
	k := s.Keys(scope, c)
	o, err := s.c.HGet(ctx, k[0], "o").Result()
	if err != nil {
		return // no o: the fast release reads the lease's end
	}
	ov, err := strconv.ParseFloat(o, 64)
	if err != nil {
		t.Fatalf("%s: o = %q", step, o)
	}
	first, err := s.c.ZRangeWithScores(ctx, k[1], 0, 0).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(first) == 1 && first[0].Score < ov {
		t.Fatalf("%s: o = %v after the earliest lease's end %v (%s)", step, ov, first[0].Score, first[0].Member)
	}
}

// TestLeaseEndLowerBound: through admissions under two leases (from two
// stores), extensions that shorten and lengthen leases, releases, leases
// that run out and the full path's sweeps, the stored earliest lease end
// (o) of a completion window and of a fixed completion window stays a
// lower bound of the ends of the leases in F, and every release reports
// a lease ran out exactly when the clock passed its end.
func TestLeaseEndLowerBound(t *testing.T) {
	for _, k := range []Kind{Completion, FixedCompletion} {
		t.Run(k.String(), func(t *testing.T) {
			clk := newClock()
			long, rdb := newStore(t, clk, time.Minute)
			short, err := New(rdb, "rstest:"+t.Name(), Options{Lease: 300 * time.Millisecond, Now: clk.now})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			c := Charge{Rule: "r", Key: "k", Spec: spec(k, 1<<30, time.Second), Weight: 1}
			cs := []Charge{c}
			type call struct {
				s   *Store
				tok string
				end time.Time
			}
			var live []call
			rng := rand.New(rand.NewPCG(7, uint64(k)))
			for i := range 3000 {
				step := "step " + strconv.Itoa(i)
				switch r := rng.IntN(10); {
				case r < 4:
					st, l := long, time.Minute
					if rng.IntN(2) == 0 {
						st, l = short, 300*time.Millisecond
					}
					d, err := st.Admit(ctx, "sc", cs)
					if err != nil || !d.OK {
						t.Fatalf("%s: admit %+v %v", step, d, err)
					}
					live = append(live, call{st, d.Token, clk.t.Add(l)})
				case r < 5 && len(live) > 0:
					j := rng.IntN(len(live))
					e := time.Duration(1+rng.IntN(500)) * time.Millisecond
					err := live[j].s.Extend(ctx, "sc", cs, live[j].tok, e)
					if clk.t.Before(live[j].end) {
						if err != nil {
							t.Fatalf("%s: extend: %v", step, err)
						}
						live[j].end = clk.t.Add(e)
					} else if !errors.Is(err, ErrNotInFlight) {
						t.Fatalf("%s: extend of a lease that ran out: %v", step, err)
					}
				case r < 8 && len(live) > 0:
					j := rng.IntN(len(live))
					err := live[j].s.Release(ctx, "sc", cs, live[j].tok)
					if clk.t.Before(live[j].end) != (err == nil) {
						t.Fatalf("%s: release at %v of a lease ending %v: %v", step, clk.t, live[j].end, err)
					}
					live = append(live[:j], live[j+1:]...)
				default:
					clk.add(time.Duration(rng.IntN(80)) * time.Millisecond)
				}
				checkLeaseEnd(t, long, "sc", c, step)
			}
		})
	}
}

// TestFastReleaseLostLease: a multi-charge release whose fast path finds
// a lease gone part-way (o says none ran out, ZREM finds none) ends the
// charges before it as the full path would, and the full path ends the
// rest: one charge reported not in flight, the others' units freed.
func TestFastReleaseLostLease(t *testing.T) {
	clk := newClock()
	clk.t = time.Unix(1_700_000_000, 0)
	s, rdb := newStore(t, clk, time.Minute)
	ctx := context.Background()
	cs := binanceOrder()
	for lost := range cs {
		scope := "acct" + strconv.Itoa(lost)
		// a first order and its release: the full path sets o on every limiter
		d, err := s.Admit(ctx, scope, cs)
		if err != nil || !d.OK {
			t.Fatalf("%+v %v", d, err)
		}
		if err := s.Release(ctx, scope, cs, d.Token); err != nil {
			t.Fatal(err)
		}
		d, err = s.Admit(ctx, scope, cs)
		if err != nil || !d.OK {
			t.Fatalf("%+v %v", d, err)
		}
		k := s.Keys(scope, cs[lost])
		tok, _, _ := splitToken(d.Token)
		if o, err := rdb.HGet(ctx, k[0], "o").Float64(); err != nil || o <= float64(clk.t.UnixMicro()) {
			t.Fatalf("charge %d: o = %v %v, want one after now", lost, o, err)
		}
		if n, err := rdb.ZRem(ctx, k[1], tok+":1").Result(); err != nil || n != 1 {
			t.Fatalf("charge %d: ZREM %v %v", lost, n, err)
		}
		clk.add(time.Millisecond)
		err = s.Release(ctx, scope, cs, d.Token)
		if !errors.Is(err, ErrNotInFlight) || err.Error() != "ratesem: redis release: "+ErrNotInFlight.Error()+" (1 of 3 charges)" {
			t.Fatalf("charge %d lost: release %v, want 1 of 3 not in flight", lost, err)
		}
		for i := range cs {
			k := s.Keys(scope, cs[i])
			f, _ := rdb.HGet(ctx, k[0], "f").Int64()
			n, _ := rdb.ZCard(ctx, k[1]).Result()
			if n != 0 || (i != lost && f != 0) {
				t.Fatalf("charge %d lost: charge %d has f = %d, %d leases after the release", lost, i, f, n)
			}
		}
	}
}
