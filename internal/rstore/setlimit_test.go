package rstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratesem/ratesem/window"
)

// TestDifferentialSetLimit: the buckets and GCRA under SetLimit, Redis
// against the in-process twin (one product): a random schedule of
// admissions, releases, idle spells and limit changes (N from 1 to 50,
// Per 50, 100 or 200 ms, the burst fixed or following N) decides the
// same everywhere: admitted or not, and the wait to the µs. In process the
// debt is kept in units, at most one Per of the new rate below empty
// (win.TokenBucket.SetLimit, win.GCRA.SetLimit); on the base commit
// Redis kept the bucket's tokens and GCRA's TAT as they were, so a limit
// lowered a hundredfold left a debt of a hundred Pers, and a burst lowered
// forgot the debt.
func TestDifferentialSetLimit(t *testing.T) {
	ns := []int64{1, 2, 4, 5, 8, 10, 20, 25, 40, 50} // each divides every Per in µs: one emission interval in both
	pers := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}
	type twin struct {
		name   string
		kind   Kind
		burst  int64 // 0: follows N
		pacer  bool
		policy func(l window.Limit) window.Policy
	}
	twins := []twin{
		{"token-bucket", TokenBucket, 8, false, func(l window.Limit) window.Policy { return window.NewTokenBucket(l, 8) }},
		{"token-bucket-follow", TokenBucket, 0, false, func(l window.Limit) window.Policy { return window.NewTokenBucket(l, 0) }},
		{"leaky-bucket", LeakyBucket, 6, false, func(l window.Limit) window.Policy { return window.NewLeakyBucket(l, 6) }},
		{"gcra", GCRA, 8, false, func(l window.Limit) window.Policy { return window.NewGCRA(l, 8) }},
		{"gcra-follow", GCRA, 0, false, func(l window.Limit) window.Policy { return window.NewGCRA(l, 0) }},
		{"pacer", GCRA, 0, true, func(l window.Limit) window.Policy { return window.NewPacer(l) }},
	}
	ctx := context.Background()
	for _, tw := range twins {
		t.Run(tw.name, func(t *testing.T) {
			clk := newClock()
			s, _ := newStore(t, clk, time.Hour)
			specOf := func(l window.Limit) Spec {
				sp := Spec{Kind: tw.kind, Limit: l, Burst: tw.burst}
				if tw.burst == 0 && !tw.pacer {
					sp.Burst = l.N
				}
				return sp
			}
			for seed := range uint64(6) {
				rng := rand.New(rand.NewPCG(seed, 18))
				l := window.Limit{N: 20, Per: 100 * time.Millisecond}
				p := tw.policy(l)
				sp := specOf(l)
				key := fmt.Sprint("k", seed)
				type held struct {
					tok string
					n   int64
					sp  *Spec // the limit it was admitted under
				}
				var live []held
				sets, late := 0, 0
				for step := range 500 {
					switch op := rng.IntN(20); {
					case op < 2:
						l = window.Limit{N: ns[rng.IntN(len(ns))], Per: pers[rng.IntN(len(pers))]}
						if step%5 == 0 {
							l.N = ns[len(ns)-1] // now and then back to a large N
						}
						nsp := specOf(l)
						if err := s.SetLimit(ctx, "diff", Charge{Rule: "r", Key: key, Spec: &nsp}); err != nil {
							t.Fatal(err)
						}
						p.SetLimit(clk.t, l)
						sp = nsp
						sets++
					case op < 11:
						n := min(rng.Int64N(4), sp.Capacity())
						c := []Charge{{Rule: "r", Key: key, Spec: &sp, Weight: n}}
						d, err := s.Admit(ctx, "diff", c)
						if err != nil {
							t.Fatalf("seed %d step %d: %v", seed, step, err)
						}
						at, ok := p.Admit(clk.t, n)
						if tw.kind == GCRA && ok && !d.OK && d.Wait <= time.Duration(sets)*time.Millisecond/10 {
							// Redis keeps GCRA's TAT in µs, so each change
							// of the emission interval rounds the debt up
							// to a µs where in process it rounds to a ns:
							// Redis may wait a few µs longer (the safe
							// side), never less.
							p.Cancel(clk.t, n)
							late++
							break
						}
						if ok != d.OK {
							t.Fatalf("seed %d step %d (%d limit changes, now %v): weight %d: redis ok=%v (%+v), in process ok=%v at %v",
								seed, step, sets, sp, n, d.OK, d, ok, at.Sub(clk.t))
						}
						if ok {
							at := sp
							live = append(live, held{d.Token, n, &at})
							break
						}
						want := at.Sub(clk.t)
						wantUS := (want + time.Microsecond - 1).Truncate(time.Microsecond)
						slack := time.Microsecond
						if tw.kind == GCRA {
							slack += time.Duration(sets) * time.Millisecond / 10
						}
						if d.Wait < wantUS || d.Wait > wantUS+slack {
							t.Fatalf("seed %d step %d (%d limit changes, now %v): weight %d: redis wait %v, in process %v",
								seed, step, sets, sp, n, d.Wait, want)
						}
					case op < 14 && len(live) > 0:
						i := rng.IntN(len(live))
						h := live[i]
						live = append(live[:i], live[i+1:]...)
						c := []Charge{{Rule: "r", Key: key, Spec: h.sp, Weight: h.n}}
						if err := s.Release(ctx, "diff", c, h.tok); err != nil {
							t.Fatalf("seed %d step %d: release: %v", seed, step, err)
						}
						p.Done(clk.t, h.n)
					default:
						d := time.Duration(rng.Int64N(20_000)) * time.Microsecond
						if rng.IntN(20) == 0 {
							d = time.Duration(rng.Int64N(300)) * time.Millisecond
						}
						clk.add(d)
					}
				}
				if late > 0 {
					t.Logf("seed %d: %d admissions refused by Redis µs before the twin's", seed, late)
				}
				if late > 10 {
					t.Fatalf("seed %d: %d admissions refused by Redis a few µs before the twin's", seed, late)
				}
			}
		})
	}
}

// TestSetLimitLoweredBoundsTheWait: a bucket (and GCRA) of 10 000 per
// second in debt (a call settled at twice its estimate) whose limit is
// lowered to 1 per second waits at most about one Per of the new rate,
// over Redis as in process; on the base commit Redis kept 10 000 units of
// debt: a wait of hours.
func TestSetLimitLoweredBoundsTheWait(t *testing.T) {
	ctx := context.Background()
	for _, k := range []Kind{TokenBucket, LeakyBucket, GCRA} {
		t.Run(k.String(), func(t *testing.T) {
			clk := newClock()
			s, _ := newStore(t, clk, time.Hour)
			big := Spec{Kind: k, Limit: window.Limit{N: 10000, Per: time.Second}, Burst: 10000}
			c := []Charge{{Rule: "r", Key: "k", Spec: &big, Weight: 10000}}
			d, err := s.Admit(ctx, "", c)
			if err != nil || !d.OK {
				t.Fatal(d, err)
			}
			if err := s.Settle(ctx, "", c, d.Token, []int64{20000}); err != nil {
				t.Fatal(err)
			}
			small := Spec{Kind: k, Limit: window.Limit{N: 1, Per: time.Second}, Burst: 1}
			if err := s.SetLimit(ctx, "", Charge{Rule: "r", Key: "k", Spec: &small}); err != nil {
				t.Fatal(err)
			}
			c = []Charge{{Rule: "r", Key: "k", Spec: &small, Weight: 1}}
			d, err = s.Admit(ctx, "", c)
			if err != nil || d.OK || d.Wait > 2*time.Second {
				t.Fatalf("after the limit was lowered to 1/s: %+v %v; want a refusal of at most 2s", d, err)
			}
			clk.add(d.Wait)
			if d, err := s.Admit(ctx, "", c); err != nil || !d.OK {
				t.Fatalf("at the wait it named: %+v %v", d, err)
			}
		})
	}
}
