package adapt

import (
	"math"
	"testing"
)

// TestClimbAfterForgottenBExtremes: the ×4 climb after a forgotten B near
// the int64 range (a Ceiling of math.MaxInt64: no overflow, the level
// reaches the ceiling and stays), with Floor == Ceiling (the level never
// moves), and from a level of 1 (steps of 1, the cap at least 1); a
// throttle during the climb goes back to the last good level at once.
func TestClimbAfterForgottenBExtremes(t *testing.T) {
	type tc struct{ floor, ceil, n int64 }
	for _, c := range []tc{
		{1, math.MaxInt64, math.MaxInt64 / 3}, {1, math.MaxInt64, math.MaxInt64 - 1},
		{1 << 40, 1 << 40, 1 << 40}, {7, 7, 7}, {1, 1, 1}, {1, 1 << 40, 1}, {1, 1 << 40, 2},
	} {
		l := New(Params{Floor: c.floor, Ceiling: c.ceil, W: w}, c.n)
		l.S.B = c.n // at B: the next proof forgets it
		now := int64(0)
		prev := l.N()
		for i := range 120 {
			now += w
			l.S.Cycled = l.S.N // n successes, without n calls of Success
			l.Tick(now)
			n := l.N()
			if n < prev || n > c.ceil || n < c.floor || l.S.Inc < 1 || l.S.Inc > max(1, n) {
				t.Fatalf("%+v cycle %d: level %d after %d, inc %d", c, i, n, prev, l.S.Inc)
			}
			if c.floor == c.ceil && n != c.floor {
				t.Fatalf("%+v: floor == ceiling, level %d", c, n)
			}
			if i == 0 && l.S.B != 0 {
				t.Fatalf("%+v: B not forgotten: %+v", c, l.S)
			}
			prev = n
		}
		if c.ceil < 1<<50 && prev != c.ceil {
			t.Fatalf("%+v: 120 clean cycles climbed to %d, not the ceiling", c, prev)
		}
		// a throttle of a probe above the last good level: back to it
		if g := l.S.G - 1; g >= c.floor {
			l.S.G, l.S.N = g, g+1
			l.Throttle(now, now+1)
			if l.N() != g || l.S.B != g+1 || l.S.Clean != 0 || l.S.Inc != 1 {
				t.Fatalf("%+v: a throttle of the probe at %d: %+v, want back to %d", c, g+1, l.S, g)
			}
		}
	}
}
