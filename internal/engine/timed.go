package engine

import (
	"fmt"
	"time"

	"github.com/ratesem/ratesem/internal/sat"
)

// TimeUnits returns a duration d in units of unit, rounded up: one unit
// per unit of time or part of one (1 ns of a ms unit is 1 unit); 0 for
// d ≤ 0. It panics for a unit ≤ 0. It cannot overflow: d / unit ≤ d.
func TimeUnits(d, unit time.Duration) int64 {
	if unit <= 0 {
		panic(fmt.Sprintf("ratesem: TimeUnits with a unit of %v: want > 0", unit))
	}
	if d <= 0 {
		return 0
	}
	n := int64(d / unit)
	if d%unit != 0 {
		n++
	}
	return n
}

// timedLocked settles, at now (the call's end), each charge of t under a
// rule with TimeUnit that no Settle named (Ticket.Settle, Rule.Settle:
// a weight a server reports wins) to the call's duration: the time from
// its admission (t.at) to now on the engine's clock, in the rule's units
// rounded up (TimeUnits). The settled weight then ends the charge as any
// settlement does, in process (window.Settler) and in Redis
// (remote.Call.ReleaseSettled): a refund where the window still counts
// the call, a debit at now beyond it. A clock that went back (now before
// the admission) measures nothing: the estimate stands. A clock that
// jumped ahead measures a duration that large: the debit saturates in
// the window ("full until the window moves", window.Settler), so it holds
// the key for about one Per at most.
func (p *Engine) timedLocked(t *Ticket, now time.Time) {
	var d time.Duration
	measured := false
	for i := range t.held {
		h := &t.held[i]
		u := h.lim.rule.TimeUnit
		if u <= 0 || h.settled {
			continue
		}
		if !measured {
			d, measured = time.Duration(sat.Sub(p.mono(now), t.at)), true
		}
		if d < 0 {
			return // the clock went back: the estimate stands
		}
		h.settled, h.actual = true, TimeUnits(d, u)
	}
}
