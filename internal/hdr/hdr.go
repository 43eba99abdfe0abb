// Package hdr reads the numbers of HTTP header fields (usage counts, resets,
// Retry-After) at a cost linear in their length, without allocating unless
// the value is malformed, saturating instead of wrapping.
package hdr

import (
	"fmt"
	"math"
	"strings"
)

// Decimal reads s, trimmed of spaces and tabs, as ASCII digits with an
// optional '.' and one to nine fraction digits, and returns the integer
// part (saturated at math.MaxInt64) and the fraction digits; ok is false
// when s is not such a number (a sign, other scripts' digits, any other
// character), and n and frac then mean nothing. It reads s once and never
// allocates.
func Decimal(s string) (n int64, frac string, ok bool) {
	s = strings.Trim(s, " \t")
	whole, frac, dot := strings.Cut(s, ".")
	if whole == "" || (dot && (frac == "" || len(frac) > 9 || strings.Trim(frac, "0123456789") != "")) {
		return 0, "", false
	}
	for i := 0; i < len(whole); i++ {
		c := whole[i]
		if c < '0' || c > '9' {
			return 0, "", false
		}
		d := int64(c - '0')
		if n > (math.MaxInt64-d)/10 { // saturated: the rest must still be digits
			return math.MaxInt64, frac, strings.Trim(whole[i:], "0123456789") == ""
		}
		n = n*10 + d
	}
	return n, frac, true
}

// Quote quotes at most the first 64 bytes of s, with its length when it is
// longer, so that an error about a huge field stays small.
func Quote(s string) string {
	if len(s) > 64 {
		return fmt.Sprintf("%q… (%d bytes)", s[:64], len(s))
	}
	return fmt.Sprintf("%q", s)
}
