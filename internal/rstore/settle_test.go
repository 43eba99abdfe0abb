package rstore

import (
	"testing"
	"time"
)

// TestDifferentialSettle: TestDifferential with half the releases settled
// to a random actual weight (refunds and debits of 0 to 7 units against
// estimates of 0 to 3): Redis decides every later admission exactly as
// the in-process window told window.Settler.Settle (admitted or not, the
// wait to the µs, "only an end can help").
func TestDifferentialSettle(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) { runDifferential(t, k.spec, k.make, time.Hour, true) })
	}
}

// TestDifferentialSettleLeases: as TestDifferentialSettle with a lease of
// 40 ms and calls abandoned: a Settle after the lease ran out fails with
// ErrNotInFlight for the completion windows, whose call already ended at
// its lease's end with its estimate, and applies only the debit there
// (the twin: Settle(now, at, 0, debit)).
func TestDifferentialSettleLeases(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) { runDifferential(t, k.spec, k.make, 40*time.Millisecond, true) })
	}
}
