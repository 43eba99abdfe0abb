package clientpool_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/window"
)

// TestAdaptiveVersusAIMD prints, with -v only, textbook AIMD (+1 and +10
// per window, halved on a throttle, through Pool.SetLimit) next to the
// adaptive rule on the same server and seeds: for comparison, and asserts
// only that the adaptive rule's throughput is the higher.
func TestAdaptiveVersusAIMD(t *testing.T) {
	if testing.Short() || !testing.Verbose() {
		t.Skip("a comparison for -v")
	}
	hl := 0.0
	for _, add := range []int64{0, 1, 10} {
		name := "adaptive (HL)"
		if add > 0 {
			name = fmt.Sprintf("AIMD +%d/W x0.5", add)
		}
		worstRej, sumThr, worstRec := 0.0, 0.0, make([]int, len(adaptSteps))
		for seed := int64(1); seed <= 3; seed++ {
			r := runLaw(t, seed, false, add)
			worstRej, sumThr = max(worstRej, r.rejPct), sumThr+r.settled
			for i, rec := range r.recover {
				if rec < 0 {
					rec = 999
				}
				worstRec[i] = max(worstRec[i], rec)
			}
		}
		t.Logf("%-16s completion server, 3 seeds: rejected ≤ %5.2f%%  throughput %5.1f%% (mean)  recovery %v (worst; 999: never)", name, worstRej, sumThr/3, worstRec)
		if add == 0 {
			hl = sumThr / 3
		} else if sumThr/3 >= hl {
			t.Errorf("%s: throughput %.1f%%, the adaptive rule's %.1f%%: want the adaptive rule's higher", name, sumThr/3, hl)
		}
	}
}

// ThrottledTicket and Overloaded refuse, by a clear panic, a nil Ticket and
// one of another Pool (whose state another lock guards).
func TestThrottledTicketMisuse(t *testing.T) {
	rules := []clientpool.Rule{{Name: "api", Limit: window.Limit{N: 5, Per: time.Second}, Adapt: &clientpool.Adaptive{Floor: 2}}}
	p, q := newPool(t, rules), newPool(t, rules)
	c := clientpool.Charge{Rule: "api", Weight: 1}
	other := acquire(t, q, c)
	defer other.Release()
	for name, f := range map[string]func(){
		"nil ThrottledTicket":   func() { p.ThrottledTicket(clientpool.Throttle{Status: 429}, nil) },
		"nil Overloaded":        func() { p.Overloaded(clientpool.Throttle{Status: 503}, nil) },
		"other ThrottledTicket": func() { p.ThrottledTicket(clientpool.Throttle{Status: 429}, other) },
		"other Overloaded":      func() { p.Overloaded(clientpool.Throttle{Status: 503}, other) },
		"zero Ticket":           func() { p.ThrottledTicket(clientpool.Throttle{Status: 429}, new(clientpool.Ticket)) },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "ratesem:") {
					t.Errorf("%s: recovered %v, want a ratesem panic", name, r)
				}
			}()
			f()
		}()
	}
}
