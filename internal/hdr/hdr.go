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
// character), and n and frac then mean nothing. Its cost is linear in
// len(s), without allocation.
func Decimal(s string) (n int64, frac string, ok bool) {
	const digits = "0123456789"
	s = strings.Trim(s, " \t")
	whole, frac, dot := strings.Cut(s, ".")
	if whole == "" || strings.Trim(whole, digits) != "" ||
		(dot && (frac == "" || len(frac) > 9 || strings.Trim(frac, digits) != "")) {
		return 0, "", false
	}
	for i := 0; i < len(whole); i++ {
		d := int64(whole[i] - '0')
		if n > (math.MaxInt64-d)/10 {
			return math.MaxInt64, frac, true // saturated
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
