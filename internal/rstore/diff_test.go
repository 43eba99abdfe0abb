package rstore

import (
	"context"
	"fmt"
	"math/rand/v2"
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
	ctx := context.Background()
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			clk := newClock()
			s, _ := newStore(t, clk, time.Hour)
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
				var live []held
				for step := range 400 {
					switch op := rng.IntN(10); {
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
		})
	}
}
