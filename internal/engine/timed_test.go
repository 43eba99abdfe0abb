package engine

import (
	"math"
	"testing"
	"time"
)

// TimeUnits rounds up and never overflows, whatever the duration.
func TestTimeUnits(t *testing.T) {
	for _, c := range []struct {
		d, unit time.Duration
		want    int64
	}{
		{0, time.Millisecond, 0},
		{-time.Hour, time.Millisecond, 0},
		{math.MinInt64, time.Nanosecond, 0},
		{1, time.Millisecond, 1},
		{time.Millisecond, time.Millisecond, 1},
		{time.Millisecond + 1, time.Millisecond, 2},
		{math.MaxInt64, time.Nanosecond, math.MaxInt64},
		{math.MaxInt64, time.Millisecond, math.MaxInt64/int64(time.Millisecond) + 1},
		{math.MaxInt64, math.MaxInt64, 1},
		{math.MaxInt64 - 1, math.MaxInt64, 1},
	} {
		if got := TimeUnits(c.d, c.unit); got != c.want {
			t.Errorf("TimeUnits(%d, %d) = %d, want %d", c.d, c.unit, got, c.want)
		}
	}
}
