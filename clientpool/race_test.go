//go:build race

package clientpool_test

// raceEnabled: the race detector slows the pool about tenfold, so the
// largest tests scale down.
const raceEnabled = true
