package conformance_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// rec is one call as its caller saw it: start when Acquire returned, end
// just before Release was called (zero while it is in flight), its units
// and its key. The call as the bookkeeping saw it contains this interval:
// admitted at or before start, ended at or after end.
type rec struct {
	start, end time.Time
	n          int64
	key        string
}

// recorder collects recs from many goroutines.
type recorder struct {
	mu   sync.Mutex
	recs []rec
}

func (r *recorder) add(c rec) {
	r.mu.Lock()
	r.recs = append(r.recs, c)
	r.mu.Unlock()
}

func (r *recorder) all() []rec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.recs)
}

// ended reports whether c ended at or before t.
func (c rec) endedBy(t time.Time) bool { return !c.end.IsZero() && !c.end.After(t) }

// checkCompletion checks the completion window: at every start s, the
// units of the calls that started at or before s and had not ended by
// s − per + tol (in flight at s, or ended within the interval) are at most
// n. Checking at the starts suffices: the count grows only there. Sound on
// the caller's readings: let C be the calls counted at s and m the one of
// them admitted last; every call of C was admitted by then and ended, in the
// bookkeeping, after its recorded end > s − per ≥ (m's admission) − per, so
// the bookkeeping counted all of C when it admitted m.
func checkCompletion(recs []rec, n int64, per, tol time.Duration) error {
	for _, c := range recs {
		var units int64
		for _, d := range recs {
			if !d.start.After(c.start) && !d.endedBy(c.start.Add(-per+tol)) {
				units += d.n
			}
		}
		if units > n {
			return fmt.Errorf("completion window: %d units in flight or ended within %v at a start, limit %d", units, per, n)
		}
	}
	return nil
}

// checkStarts checks that the units of the calls that started within any
// span are at most n.
func checkStarts(recs []rec, n int64, span time.Duration) error {
	for _, c := range recs {
		var units int64
		for _, d := range recs {
			if !d.start.After(c.start) && d.start.After(c.start.Add(-span)) {
				units += d.n
			}
		}
		if units > n {
			return fmt.Errorf("%d units started within %v, limit %d", units, span, n)
		}
	}
	return nil
}

// checkFixed checks the fixed window: the units of calls admitted within
// one window [k·per, (k+1)·per) of the Unix epoch are at most n. A start
// recorded at s was admitted in [s − slack, s], so the calls whose starts
// lie in [k·per + slack, (k+1)·per) are surely of window k.
func checkFixed(recs []rec, n int64, per, slack time.Duration) error {
	units := make(map[int64]int64)
	for _, c := range recs {
		ns := c.start.UnixNano()
		k := ns / int64(per)
		if ns-k*int64(per) < int64(slack) {
			continue
		}
		units[k] += c.n
		if units[k] > n {
			return fmt.Errorf("fixed window: %d units started in window %d, limit %d", units[k], k, n)
		}
	}
	return nil
}

// maxInFlight returns the most units in flight at once: at a start s,
// the calls that started at or before s and had not ended by s.
func maxInFlight(recs []rec) int64 {
	var most int64
	for _, c := range recs {
		var units int64
		for _, d := range recs {
			if !d.start.After(c.start) && !d.endedBy(c.start) {
				units += d.n
			}
		}
		most = max(most, units)
	}
	return most
}

// byKey splits recs by key.
func byKey(recs []rec) map[string][]rec {
	m := make(map[string][]rec)
	for _, c := range recs {
		m[c.key] = append(m[c.key], c)
	}
	return m
}

// TestCheckersCatchViolations makes sure the checkers can fail: a history
// one unit over each bound is caught, the same history spread out is not.
func TestCheckersCatchViolations(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	per := 100 * time.Millisecond
	// Two calls of 1 unit, the second starting 50 ms after the first ended.
	over := []rec{{start: at(0), end: at(10), n: 1}, {start: at(60), end: at(70), n: 1}}
	spread := []rec{{start: at(0), end: at(10), n: 1}, {start: at(120), end: at(130), n: 1}}
	if checkCompletion(over, 1, per, 0) == nil {
		t.Error("checkCompletion missed 2 units within the interval")
	}
	if err := checkCompletion(spread, 1, per, 0); err != nil {
		t.Errorf("checkCompletion: %v", err)
	}
	if checkStarts(over, 1, per) == nil {
		t.Error("checkStarts missed 2 starts within the interval")
	}
	if err := checkStarts(spread, 1, per); err != nil {
		t.Errorf("checkStarts: %v", err)
	}
	if checkFixed(over, 1, per, 0) == nil {
		t.Error("checkFixed missed 2 starts in one window")
	}
	if err := checkFixed(spread, 1, per, 0); err != nil {
		t.Errorf("checkFixed: %v", err)
	}
	if got := maxInFlight([]rec{{start: at(0), n: 2}, {start: at(5), end: at(6), n: 1}}); got != 3 {
		t.Errorf("maxInFlight = %d, want 3", got)
	}
}
