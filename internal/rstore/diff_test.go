package rstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ratesem/ratesem/window"
)

// kinds pairs each Redis form with a fresh in-process twin.
var kinds = []struct {
	name string
	spec Spec
	make func() window.Policy
}{
	{"completion", Spec{Kind: Completion, Limit: window.Limit{N: 5, Per: 100 * time.Millisecond}},
		func() window.Policy { return window.NewCompletion(window.Limit{N: 5, Per: 100 * time.Millisecond}) }},
	{"fixed-completion", Spec{Kind: FixedCompletion, Limit: window.Limit{N: 5, Per: 100 * time.Millisecond}},
		func() window.Policy {
			return window.NewFixedCompletion(window.Limit{N: 5, Per: 100 * time.Millisecond})
		}},
	{"sliding-log", Spec{Kind: SlidingLog, Limit: window.Limit{N: 5, Per: 100 * time.Millisecond}, Margin: 7 * time.Millisecond},
		func() window.Policy {
			return window.NewSlidingLog(window.Limit{N: 5, Per: 100 * time.Millisecond}, 7*time.Millisecond)
		}},
	{"fixed-window", Spec{Kind: FixedWindow, Limit: window.Limit{N: 5, Per: 100 * time.Millisecond}},
		func() window.Policy { return window.NewFixedWindow(window.Limit{N: 5, Per: 100 * time.Millisecond}) }},
	{"sliding-window-counter", Spec{Kind: SlidingWindowCounter, Limit: window.Limit{N: 5, Per: 100 * time.Millisecond}},
		func() window.Policy {
			return window.NewSlidingWindowCounter(window.Limit{N: 5, Per: 100 * time.Millisecond})
		}},
	{"sub-window-counter", Spec{Kind: SubWindowCounter, Limit: window.Limit{N: 5, Per: 100 * time.Millisecond}, Blocks: 4},
		func() window.Policy {
			return window.NewSubWindowCounter(window.Limit{N: 5, Per: 100 * time.Millisecond}, 4)
		}},
	{"token-bucket", Spec{Kind: TokenBucket, Limit: window.Limit{N: 5, Per: 100 * time.Millisecond}, Burst: 3},
		func() window.Policy { return window.NewTokenBucket(window.Limit{N: 5, Per: 100 * time.Millisecond}, 3) }},
	{"leaky-bucket", Spec{Kind: LeakyBucket, Limit: window.Limit{N: 3, Per: 100 * time.Millisecond}, Burst: 5},
		func() window.Policy { return window.NewLeakyBucket(window.Limit{N: 3, Per: 100 * time.Millisecond}, 5) }},
	{"gcra", Spec{Kind: GCRA, Limit: window.Limit{N: 5, Per: 100 * time.Millisecond}, Burst: 4},
		func() window.Policy { return window.NewGCRA(window.Limit{N: 5, Per: 100 * time.Millisecond}, 4) }},
	{"pacer", Spec{Kind: GCRA, Limit: window.Limit{N: 5, Per: 100 * time.Millisecond}},
		func() window.Policy { return window.NewPacer(window.Limit{N: 5, Per: 100 * time.Millisecond}) }},
}

// TestSpecOf: SpecOf maps every window of package window to its Redis
// form.
func TestSpecOf(t *testing.T) {
	for _, k := range kinds {
		got, err := SpecOf(k.make())
		if err != nil || got != k.spec {
			t.Errorf("%s: SpecOf = %+v, %v; want %+v", k.name, got, err, k.spec)
		}
		if err := got.Check(); err != nil {
			t.Errorf("%s: Check: %v", k.name, err)
		}
	}
}

// TestDifferential feeds each Redis form and its in-process twin the same
// random schedule on a µs grid (admissions of weight 0 to 3, ends,
// cancellations, idle spells) and checks every decision agrees: admitted
// or not, the wait (to the µs, the in-process one rounded up), and "only an
// end can help".
func TestDifferential(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) { runDifferential(t, k.spec, k.make, time.Hour, false) })
	}
}

// TestDifferentialLeases: as TestDifferential with a lease of 40 ms and
// calls abandoned (never released): Redis counts each as ended at its
// lease's end, the in-process twin is told Done at that instant; a Release
// after it fails with ErrNotInFlight.
func TestDifferentialLeases(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) { runDifferential(t, k.spec, k.make, 40*time.Millisecond, false) })
	}
}

// runDifferential runs the schedule; with settle, a release is a Settle
// to a random actual weight (0 to 7) half of the time, and the twin is told
// window.Settler.Settle.
func runDifferential(t *testing.T, spec Spec, mk func() window.Policy, lease time.Duration, settle bool) {
	ctx := context.Background()
	k := struct {
		spec Spec
		make func() window.Policy
	}{spec, mk}
	{
		{
			clk := newClock()
			s, _ := newStore(t, clk, lease)
			for seed := range uint64(3) {
				rng := rand.New(rand.NewPCG(seed, 7))
				p := k.make()
				sp := k.spec
				key := fmt.Sprint("k", seed)
				type held struct {
					tok string
					n   int64
					at  time.Time
				}
				var live, gone []held
				for step := range 400 {
					// Calls whose lease ran out by now (abandoned or not)
					// end at its end, in order.
					live = slices.DeleteFunc(live, func(h held) bool {
						if h.at.Add(lease).After(clk.t) {
							return false
						}
						gone = append(gone, h)
						return true
					})
					slices.SortFunc(gone, func(a, b held) int { return a.at.Compare(b.at) })
					for len(gone) > 0 && !gone[0].at.Add(lease).After(clk.t) {
						p.Done(gone[0].at.Add(lease), gone[0].n)
						if settle && step%3 == 0 {
							// A late Settle: the call ended at its lease's
							// end with its estimate; only a debit counts
							// (a window without leases knows no lease:
							// the whole settlement applies).
							g := gone[0]
							a := rng.Int64N(8)
							c := []Charge{{Rule: "r", Key: key, Spec: &sp, Weight: g.n}}
							err := s.Settle(ctx, "diff", c, g.tok, []int64{a})
							leased := sp.Kind == Completion || sp.Kind == FixedCompletion
							if leased {
								if g.n > 0 && !errors.Is(err, ErrNotInFlight) {
									t.Fatalf("seed %d step %d: settle after the lease: %v", seed, step, err)
								}
								p.(window.Settler).Settle(clk.t, g.at, 0, max(a-g.n, 0))
							} else {
								if err != nil {
									t.Fatalf("seed %d step %d: settle: %v", seed, step, err)
								}
								p.(window.Settler).Settle(clk.t, g.at, g.n, a)
							}
						} else if step%7 == 0 { // a late Release finds no lease
							c := []Charge{{Rule: "r", Key: key, Spec: &sp, Weight: gone[0].n}}
							if err := s.Release(ctx, "diff", c, gone[0].tok); gone[0].n > 0 && (sp.Kind == Completion || sp.Kind == FixedCompletion) && !errors.Is(err, ErrNotInFlight) {
								t.Fatalf("seed %d step %d: release after the lease: %v", seed, step, err)
							}
						}
						gone = gone[1:]
					}
					switch op := rng.IntN(10); {
					case op == 9 && lease < time.Hour && len(live) > 0:
						i := rng.IntN(len(live))
						gone = append(gone, live[i])
						live = append(live[:i], live[i+1:]...)
					case op < 5:
						n := rng.Int64N(4)
						n = min(n, sp.Capacity())
						c := []Charge{{Rule: "r", Key: key, Spec: &sp, Weight: n}}
						d, err := s.Admit(ctx, "diff", c)
						if err != nil {
							t.Fatalf("seed %d step %d: %v", seed, step, err)
						}
						at, ok := p.Admit(clk.t, n)
						if ok != d.OK {
							t.Fatalf("seed %d step %d: weight %d: redis ok=%v (%+v), in process ok=%v at %v", seed, step, n, d.OK, d, ok, at.Sub(clk.t))
						}
						if ok {
							live = append(live, held{d.Token, n, clk.t})
							break
						}
						if at.IsZero() {
							if !d.Release {
								t.Fatalf("seed %d step %d: in process only an end helps, redis says wait %v", seed, step, d.Wait)
							}
							break
						}
						want := at.Sub(clk.t)
						wantUS := (want + time.Microsecond - 1).Truncate(time.Microsecond)
						if d.Release || d.Wait < wantUS || d.Wait > wantUS+time.Microsecond {
							t.Fatalf("seed %d step %d: weight %d: redis wait %v release=%v, in process %v", seed, step, n, d.Wait, d.Release, want)
						}
					case op < 7 && len(live) > 0:
						i := rng.IntN(len(live))
						h := live[i]
						live = append(live[:i], live[i+1:]...)
						c := []Charge{{Rule: "r", Key: key, Spec: &sp, Weight: h.n}}
						if settle && rng.IntN(2) == 0 {
							a := rng.Int64N(8)
							if err := s.Settle(ctx, "diff", c, h.tok, []int64{a}); err != nil {
								t.Fatalf("seed %d step %d: settle %d as %d: %v", seed, step, h.n, a, err)
							}
							p.(window.Settler).Settle(clk.t, h.at, h.n, a)
							break
						}
						if err := s.Release(ctx, "diff", c, h.tok); err != nil {
							t.Fatalf("seed %d step %d: release: %v", seed, step, err)
						}
						p.Done(clk.t, h.n)
					case op < 8 && len(live) > 0:
						i := len(live) - 1 // the latest admission, as a caller that gave up
						h := live[i]
						if h.at != clk.t {
							break
						}
						live = live[:i]
						c := []Charge{{Rule: "r", Key: key, Spec: &sp, Weight: h.n}}
						if err := s.Cancel(ctx, "diff", c, h.tok); err != nil {
							t.Fatalf("seed %d step %d: cancel: %v", seed, step, err)
						}
						p.Cancel(h.at, h.n)
					default:
						d := time.Duration(rng.Int64N(30_000)) * time.Microsecond
						if rng.IntN(20) == 0 {
							d = time.Duration(rng.Int64N(400)) * time.Millisecond
						}
						clk.add(d)
					}
				}
			}
		}
	}
}

// TestDifferentialMulti: calls of three charges of random kinds, decided
// at once in Redis, against the in-process twins admitted one by one and
// the admitted ones cancelled at the same instant when one refuses: the
// same decisions, and on a refusal the largest wait of the refusing
// charges (or "only a release can help").
func TestDifferentialMulti(t *testing.T) { runDifferentialMulti(t, false) }

// TestDifferentialMultiSettle: TestDifferentialMulti with half the releases
// settled, each charge to its own random actual weight (0 to 5) in one
// Settle, the twins told window.Settler.Settle.
func TestDifferentialMultiSettle(t *testing.T) { runDifferentialMulti(t, true) }

func runDifferentialMulti(t *testing.T, settle bool) {
	ctx := context.Background()
	clk := newClock()
	s, _ := newStore(t, clk, time.Hour)
	for seed := range uint64(12) {
		rng := rand.New(rand.NewPCG(seed, 11))
		const nc = 3
		var ps [nc]window.Policy
		var sps [nc]Spec
		for i := range nc {
			k := kinds[rng.IntN(len(kinds))]
			ps[i], sps[i] = k.make(), k.spec
		}
		type held struct {
			tok string
			cs  []Charge
			at  time.Time
		}
		var live []held
		for step := range 300 {
			switch op := rng.IntN(10); {
			case op < 6:
				cs := make([]Charge, nc)
				for i := range nc {
					cs[i] = Charge{Rule: fmt.Sprint("r", i), Key: fmt.Sprint("s", seed), Spec: &sps[i], Weight: min(rng.Int64N(3), sps[i].Capacity())}
				}
				d, err := s.Admit(ctx, "multi", cs)
				if err != nil {
					t.Fatalf("seed %d step %d: %v", seed, step, err)
				}
				ok, release := true, false
				var wait time.Duration
				var admitted []int
				for i := range nc {
					at, yes := ps[i].Admit(clk.t, cs[i].Weight)
					switch {
					case yes:
						admitted = append(admitted, i)
					case at.IsZero():
						ok, release = false, true
					default:
						ok = false
						wait = max(wait, at.Sub(clk.t))
					}
				}
				if ok != d.OK {
					t.Fatalf("seed %d step %d: %v: redis %+v, in process ok=%v", seed, step, sps, d, ok)
				}
				if ok {
					live = append(live, held{d.Token, cs, clk.t})
					break
				}
				for _, i := range admitted {
					ps[i].Cancel(clk.t, cs[i].Weight)
				}
				if release != d.Release {
					t.Fatalf("seed %d step %d: redis %+v, in process release-only=%v", seed, step, d, release)
				}
				if !release {
					wantUS := (wait + time.Microsecond - 1).Truncate(time.Microsecond)
					if d.Wait < wantUS || d.Wait > wantUS+time.Microsecond {
						t.Fatalf("seed %d step %d: redis wait %v, in process %v", seed, step, d.Wait, wait)
					}
				}
			case op < 8 && len(live) > 0:
				i := rng.IntN(len(live))
				h := live[i]
				live = append(live[:i], live[i+1:]...)
				if settle && rng.IntN(2) == 0 {
					actual := make([]int64, nc)
					for j := range nc {
						actual[j] = rng.Int64N(6)
					}
					if err := s.Settle(ctx, "multi", h.cs, h.tok, actual); err != nil {
						t.Fatalf("seed %d step %d: settle: %v", seed, step, err)
					}
					for j := range nc {
						ps[j].(window.Settler).Settle(clk.t, h.at, h.cs[j].Weight, actual[j])
					}
					break
				}
				if err := s.Release(ctx, "multi", h.cs, h.tok); err != nil {
					t.Fatalf("seed %d step %d: release: %v", seed, step, err)
				}
				for j := range nc {
					ps[j].Done(clk.t, h.cs[j].Weight)
				}
			default:
				clk.add(time.Duration(rng.Int64N(40_000)) * time.Microsecond)
			}
		}
	}
}
