package win

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// The engine's form of every window (Of: instants in nanoseconds
// since an epoch) must decide exactly as its Policy methods on time.Time:
// the same admissions, the same retry instants, the same state after
// Cancel, Done and SetLimit. Each window is driven twice with one random
// schedule, once through Of and once through the adapter for a
// Policy of another package (which calls the time.Time methods), and every
// answer is compared. The epoch is a wall-clock instant that is not a
// multiple of any Per, so the aligned windows' Unix arithmetic is checked
// too; instants sometimes go back, as callers that read the clock before
// a lock make them.
func TestFastFormMatchesPolicy(t *testing.T) {
	makers := []struct {
		name string
		mk   func(l Limit) Policy
	}{
		{"Completion", func(l Limit) Policy { return NewCompletion(l) }},
		{"SlidingLog", func(l Limit) Policy { return NewSlidingLog(l, l.Per/7) }},
		{"FixedWindow", func(l Limit) Policy { return NewFixedWindow(l) }},
		{"FixedCompletion", func(l Limit) Policy { return NewFixedCompletion(l) }},
		{"SlidingWindowCounter", func(l Limit) Policy { return NewSlidingWindowCounter(l) }},
		{"SubWindowCounter", func(l Limit) Policy { return NewSubWindowCounter(l, 4) }},
		{"TokenBucket", func(l Limit) Policy { return NewTokenBucket(l, l.N+1) }},
		{"LeakyBucket", func(l Limit) Policy { return NewLeakyBucket(l, 0) }},
		{"GCRA", func(l Limit) Policy { return NewGCRA(l, 0) }},
		{"Pacer", func(l Limit) Policy { return NewPacer(l) }},
	}
	epoch := time.Date(2026, 11, 23, 4, 31, 17, 123456789, time.UTC)
	for _, m := range makers {
		t.Run(m.name, func(t *testing.T) {
			for seed := range uint64(100) {
				r := rand.New(rand.NewPCG(seed, 0xfa57))
				l := Limit{N: 1 + r.Int64N(6), Per: time.Duration(1+r.Int64N(900)) * time.Millisecond}
				fast, slow := Of(m.mk(l)), &foreign{p: m.mk(l)}
				if _, isForeign := fast.(*foreign); isForeign {
					t.Fatalf("Of(%T) is the adapter, not the fast form", m.mk(l))
				}
				if e := fast.Start(epoch); !e.Equal(epoch) {
					t.Fatalf("Start(epoch) = %v on a fresh window", e)
				}
				slow.Start(epoch)
				if fast.DoneUsesTime() != (m.name == "Completion" || m.name == "FixedCompletion") {
					t.Fatalf("DoneUsesTime() = %v", fast.DoneUsesTime())
				}
				var trace []string
				type call struct{ at, n int64 }
				var held []call
				// Instants may precede the epoch (a mock clock set back): the
				// epoch is an origin, not an instant seen.
				var now, latest int64
				for step := range 400 {
					now = latest + r.Int64N(int64(l.Per)/3+1)
					if r.IntN(4) == 0 {
						now = latest - r.Int64N(int64(l.Per)/5+1) // a little older than the latest
					}
					latest = max(latest, now)
					switch op := r.IntN(10); {
					case op < 5:
						n := r.Int64N(l.N + 2)
						cached := fast.AdmitCached(n)
						var atF int64
						okF := cached
						if !cached {
							atF, okF = fast.Admit(now, n)
						}
						atS, okS := slow.Admit(now, n)
						trace = append(trace, fmt.Sprintf("Admit(%d, %d) = %d %v / %d %v", now, n, atF, okF, atS, okS))
						if okF != okS || !okF && !cached && atF != atS {
							t.Fatalf("seed %d step %d: %v, Admit(%d) at %d: fast (%d, %v, cached %v), Policy (%d, %v)\n%s",
								seed, step, l, n, now, atF, okF, cached, atS, okS, strings.Join(trace, "\n"))
						}
						if okF {
							held = append(held, call{now, n})
						}
					case op < 8 && len(held) > 0:
						i := r.IntN(len(held))
						c := held[i]
						held = append(held[:i], held[i+1:]...)
						if r.IntN(4) == 0 {
							fast.Cancel(c.at, c.n)
							slow.Cancel(c.at, c.n)
							trace = append(trace, fmt.Sprintf("Cancel(%d, %d)", c.at, c.n))
						} else {
							fast.Done(now, c.n)
							slow.Done(now, c.n)
							trace = append(trace, fmt.Sprintf("Done(%d, %d)", now, c.n))
						}
					case op == 9:
						n := 1 + r.Int64N(6)
						per := time.Duration(1+r.Int64N(900)) * time.Millisecond
						fast.SetLimit(now, n, per)
						slow.SetLimit(now, n, per)
						trace = append(trace, fmt.Sprintf("SetLimit(%d, %d, %v)", now, n, per))
						l = Limit{N: n, Per: per}
					}
					if fast.Capacity() != slow.Capacity() {
						t.Fatalf("seed %d step %d: Capacity %d, Policy's %d", seed, step, fast.Capacity(), slow.Capacity())
					}
				}
			}
		})
	}
}

// A Policy of another package goes through the adapter, even when it embeds
// a window of this package: it may override the methods the fast form would
// skip.
func TestFastOfForeignPolicy(t *testing.T) {
	type embeds struct{ *Completion }
	for _, p := range []Policy{embeds{NewCompletion(Limit{N: 1, Per: time.Second})}, &LeakyBucket{}} {
		f := Of(p)
		_, isForeign := f.(*foreign)
		if _, own := p.(*LeakyBucket); isForeign == own {
			t.Fatalf("Of(%T) = %T", p, f)
		}
	}
	if Of(nil) != nil {
		t.Fatal("Of(nil) != nil")
	}
}
