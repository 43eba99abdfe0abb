package sched

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ratesem/ratesem"
)

// TestRankOrder: over random arrivals of the three classes, Before is a
// strict total order; sorting by it serves each class FIFO, never puts a
// waiter behind a later one of its class or a lower one, and lets at most
// MaxOvertakes later waiters of each higher class pass a waiter.
func TestRankOrder(t *testing.T) {
	classes := []ratesem.Priority{ratesem.PriorityLow, ratesem.PriorityNormal, ratesem.PriorityHigh}
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 5))
		var r Ranker
		type arr struct {
			i    int
			p    ratesem.Priority
			rank Rank
		}
		as := make([]arr, 300)
		for i := range as {
			p := classes[rng.IntN(3)]
			as[i] = arr{i, p, r.Next(p)}
		}
		for range 2000 {
			a, b, c := as[rng.IntN(len(as))], as[rng.IntN(len(as))], as[rng.IntN(len(as))]
			if a.i != b.i && a.rank.Before(b.rank) == b.rank.Before(a.rank) {
				t.Fatalf("seed %d: %d and %d not ordered", seed, a.i, b.i)
			}
			if a.rank.Before(b.rank) && b.rank.Before(c.rank) && !a.rank.Before(c.rank) {
				t.Fatalf("seed %d: not transitive over %d, %d, %d", seed, a.i, b.i, c.i)
			}
		}
		order := slices.Clone(as)
		slices.SortFunc(order, func(x, y arr) int {
			if x.rank.Before(y.rank) {
				return -1
			}
			if y.rank.Before(x.rank) {
				return 1
			}
			return 0
		})
		pos := make([]int, len(as))
		for k, a := range order {
			pos[a.i] = k
		}
		for _, a := range as {
			passed := map[ratesem.Priority]int{}
			for _, b := range as[a.i+1:] {
				if pos[b.i] > pos[a.i] {
					continue
				}
				if b.p <= a.p {
					t.Fatalf("seed %d: %v waiter %d behind later %v waiter %d", seed, a.p, a.i, b.p, b.i)
				}
				passed[b.p]++
			}
			for p, n := range passed {
				if n > MaxOvertakes {
					t.Fatalf("seed %d: %v waiter %d passed by %d later %v waiters", seed, a.p, a.i, n, p)
				}
			}
		}
	}
}

// TestRankClamps: values beyond the classes rank as the nearest class.
func TestRankClamps(t *testing.T) {
	var a, b Ranker
	for _, p := range []ratesem.Priority{127, -128, 2, -2, 0} {
		if x, y := a.Next(p), b.Next(Class(p)); x != y {
			t.Errorf("Next(%d) = %+v, Next(%d) = %+v", p, x, Class(p), y)
		}
	}
}
