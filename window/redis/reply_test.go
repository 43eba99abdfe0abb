package redis

import (
	"math"
	"testing"
)

// TestParseAdmit: a reply the scripts never give is an error, never a
// decision; a refusal always has a wait (no caller asks again at once);
// waits saturate at 2^50 µs.
func TestParseAdmit(t *testing.T) {
	for _, c := range []struct {
		r    []int64
		ok   bool // parses
		wait int64
	}{
		{[]int64{1, 0, 0, 5}, true, 0},
		{[]int64{1, 7, 0, 5}, true, 0},
		{[]int64{0, 7, 0, 5}, true, 7},
		{[]int64{0, 0, 0, 5}, true, 1000},
		{[]int64{0, 0, 1, 5}, true, 0},
		{[]int64{0, math.MaxInt64, 0, 5}, true, maxMicros},
		{[]int64{0, 7, 0, 5, 1, 5}, true, 7},
		{[]int64{0, 7, 0, 5, 3, 5}, true, 7},
		{[]int64{1, 0, 0, 5, 2, 5}, true, 0},
		{[]int64{1, 0, 0, 5, 1, 5}, false, 0}, // lost yet admitted
		{[]int64{0, -1, 0, 5}, false, 0},
		{[]int64{2, 0, 0, 5}, false, 0},
		{[]int64{-1, 0, 0, 5}, false, 0},
		{[]int64{0, 1, 2, 5}, false, 0},
		{[]int64{0, 1, 0, -5}, false, 0},
		{[]int64{0, 1, 0, 5, 4, 5}, false, 0},
		{[]int64{0, 1, 0, 5, 1, -5}, false, 0},
		{[]int64{0, 1, 0, 5, 1}, false, 0},
		{nil, false, 0},
		{[]int64{1}, false, 0},
	} {
		a, err := parseAdmit(c.r)
		if (err == nil) != c.ok {
			t.Errorf("parseAdmit(%v) = %+v, %v; want ok %v", c.r, a, err, c.ok)
			continue
		}
		if err == nil && a.wait != c.wait {
			t.Errorf("parseAdmit(%v).wait = %d want %d", c.r, a.wait, c.wait)
		}
	}
}

// FuzzParseAdmit: whatever the reply, parseAdmit returns an error or a
// decision in range: a refusal waits 1 µs to 2^50 µs (or is InFlight), an
// admission waits 0, a lost state is never an admission.
func FuzzParseAdmit(f *testing.F) {
	f.Add(int64(1), int64(0), int64(0), int64(5), int64(0), int64(5), true)
	f.Add(int64(0), int64(0), int64(0), int64(5), int64(1), int64(5), true)
	f.Add(int64(0), int64(math.MaxInt64), int64(1), int64(math.MinInt64), int64(3), int64(0), false)
	f.Fuzz(func(t *testing.T, a, b, c, d, e, g int64, six bool) {
		r := []int64{a, b, c, d}
		if six {
			r = append(r, e, g)
		}
		p, err := parseAdmit(r)
		if err != nil {
			return
		}
		switch {
		case p.ok && (p.wait != 0 || p.lost):
			t.Fatalf("%v: %+v", r, p)
		case !p.ok && !p.inFlight && (p.wait < 1 || p.wait > maxMicros):
			t.Fatalf("%v: %+v", r, p)
		case p.wait < 0 || p.wait > maxMicros || p.now < 0:
			t.Fatalf("%v: %+v", r, p)
		}
	})
}
