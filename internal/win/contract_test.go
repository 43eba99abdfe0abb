package win_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratesem/ratesem/internal/win"
)

// TestPoliciesTreatEarlierInstantAsLatest checks a sentence of the Policy
// contract on every policy: "an instant earlier than one already seen is
// treated as that later one". Such instants are common: a caller of Limiter.AllowN reads
// time.Now before the Limiter takes its mutex, so concurrent callers reach the policy
// slightly out of order. Each policy is driven twice with the same random
// schedule, once with instants that sometimes go back a little and once with
// every instant raised to the latest seen; the decisions and the retry
// instants must be the same. (Found by the benchmark module's helper: GCRA,
// SlidingWindowCounter, SlidingLog and Completion used the earlier instant.)
func TestPoliciesTreatEarlierInstantAsLatest(t *testing.T) {
	policies := []struct {
		name string
		mk   func(l win.Limit) win.Policy
	}{
		{"FixedWindow", func(l win.Limit) win.Policy { return win.NewFixedWindow(l) }},
		{"SlidingWindowCounter", func(l win.Limit) win.Policy { return win.NewSlidingWindowCounter(l) }},
		{"SubWindowCounter", func(l win.Limit) win.Policy { return win.NewSubWindowCounter(l, 4) }},
		{"SlidingLog", func(l win.Limit) win.Policy { return win.NewSlidingLog(l, 0) }},
		{"Completion", func(l win.Limit) win.Policy { return win.NewCompletion(l) }},
		{"TokenBucket", func(l win.Limit) win.Policy { return win.NewTokenBucket(l, 0) }},
		{"LeakyBucket", func(l win.Limit) win.Policy { return win.NewLeakyBucket(l, 0) }},
		{"GCRA", func(l win.Limit) win.Policy { return win.NewGCRA(l, 0) }},
		{"Pacer", func(l win.Limit) win.Policy { return win.NewPacer(l) }},
	}
	for _, p := range policies {
		t.Run(p.name, func(t *testing.T) {
			for seed := range uint64(200) {
				r := rand.New(rand.NewPCG(seed, 0xc0de))
				l := win.Limit{N: 1 + r.Int64N(8), Per: time.Duration(1+r.Int64N(1000)) * time.Millisecond}
				back, clamped := p.mk(l), p.mk(l)
				latest := t0
				for step := range 300 {
					now := latest.Add(time.Duration(r.Int64N(int64(l.Per) / 2)))
					if step > 0 && r.IntN(3) == 0 {
						// An instant a little older than the latest seen.
						now = latest.Add(-time.Duration(r.Int64N(int64(l.Per)/4 + 1)))
					}
					if now.After(latest) {
						latest = now
					}
					n := 1 + r.Int64N(min(l.N, 3))
					atB, okB := back.Admit(now, n)
					atC, okC := clamped.Admit(latest, n)
					if okB != okC || !atB.Equal(atC) {
						t.Fatalf("seed %d step %d: %v, %d units at latest−%v: admitted %v (retry base+%v); at the latest instant itself: admitted %v (retry base+%v)",
							seed, step, l, n, latest.Sub(now), okB, atB.Sub(t0), okC, atC.Sub(t0))
					}
					if okB {
						back.Done(now, n)
						clamped.Done(latest, n)
					}
				}
			}
		})
	}
}
