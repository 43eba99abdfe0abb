package hdr

import (
	"math"
	"strings"
	"testing"
)

func TestDecimal(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int64
		frac string
		ok   bool
	}{
		{"0", 0, "", true},
		{" \t120\t ", 120, "", true},
		{"9223372036854775807", math.MaxInt64, "", true},
		{"9223372036854775808", math.MaxInt64, "", true},
		{strings.Repeat("9", 100), math.MaxInt64, "", true},
		{strings.Repeat("9", 100) + "x", 0, "", false}, // past saturation, still checked
		{"1.5", 1, "5", true},
		{"1.123456789", 1, "123456789", true},
		{"1.1234567890", 0, "", false},
		{"1.", 0, "", false},
		{".5", 0, "", false},
		{"1.5x", 0, "", false},
		{"", 0, "", false},
		{"-1", 0, "", false},
		{"+1", 0, "", false},
		{"1 2", 0, "", false},
		{"١٢", 0, "", false},
	} {
		n, frac, ok := Decimal(tc.s)
		if ok != tc.ok || (ok && (n != tc.n || frac != tc.frac)) {
			t.Errorf("Decimal(%q) = %d, %q, %v; want %d, %q, %v", tc.s, n, frac, ok, tc.n, tc.frac, tc.ok)
		}
	}
	if allocs := testing.AllocsPerRun(100, func() { Decimal(" 123.45 ") }); allocs != 0 {
		t.Errorf("Decimal allocates %v times", allocs)
	}
}

func TestQuote(t *testing.T) {
	if got := Quote("ab"); got != `"ab"` {
		t.Errorf("Quote(ab) = %s", got)
	}
	if got := Quote(strings.Repeat("x", 100)); !strings.HasSuffix(got, "… (100 bytes)") || len(got) > 90 {
		t.Errorf("Quote of 100 bytes = %s", got)
	}
}
