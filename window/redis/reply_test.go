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
		{[]int64{1, 0, 0, 5, 0, 5, 9}, true, 0},
		{[]int64{0, 7, 0, 5, 1, 5, 12}, true, 7},
		{[]int64{0, 7, 0, 5, 0, 5, -1}, false, 0},
		{[]int64{0, 7, 0, 5, 0, 5, 1, 1}, false, 0},
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

// TestParseToken: tokens of the start-counting windows; anything but
// "<1..capacity>:<0..2^53>" in plain digits is an error.
func TestParseToken(t *testing.T) {
	for _, c := range []struct {
		tok   string
		ok    bool
		n, at int64
	}{
		{"1:0", true, 1, 0},
		{"5:9007199254740992", true, 5, 1 << 53},
		{"5:9007199254740993", false, 0, 0},
		{"6:1", false, 0, 0},
		{"0:1", false, 0, 0},
		{"-1:1", false, 0, 0},
		{"+1:1", false, 0, 0},
		{"1:-1", false, 0, 0},
		{"1:", false, 0, 0},
		{":1", false, 0, 0},
		{"1", false, 0, 0},
		{"", false, 0, 0},
		{"1:1:1", false, 0, 0},
		{"99999999999999999999:1", false, 0, 0},
		{"1: 1", false, 0, 0},
	} {
		n, at, err := parseToken(c.tok, 5)
		if (err == nil) != c.ok || n != c.n || at != c.at {
			t.Errorf("parseToken(%q) = %d, %d, %v", c.tok, n, at, err)
		}
	}
}

// FuzzParseToken: a token that parses round-trips and is in range.
func FuzzParseToken(f *testing.F) {
	for _, s := range []string{"1:0", "5:9007199254740992", "-1:1", "1:1:1", "\x00:\xff"} {
		f.Add(s, int64(5))
	}
	f.Fuzz(func(t *testing.T, tok string, capacity int64) {
		n, at, err := parseToken(tok, capacity)
		if err != nil {
			return
		}
		if n < 1 || n > capacity || at < 0 || at > 1<<53 {
			t.Fatalf("parseToken(%q, %d) = %d, %d", tok, capacity, n, at)
		}
	})
}
