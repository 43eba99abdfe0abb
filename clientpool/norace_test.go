//go:build !race

package clientpool_test

const raceEnabled = false
