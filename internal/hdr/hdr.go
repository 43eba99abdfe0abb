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
// part (saturated at math.MaxInt64) and the fraction digits. A sign, other
// scripts' digits or any other character is an error.
func Decimal(s string) (n int64, frac string, err error) {
	s = strings.Trim(s, " \t")
	whole, frac, dot := strings.Cut(s, ".")
	if whole == "" || (dot && (frac == "" || len(frac) > 9)) {
		return 0, "", fmt.Errorf("%s is not a count", Quote(s))
	}
	for i := 0; i < len(whole); i++ {
		c := whole[i]
		if c < '0' || c > '9' {
			return 0, "", fmt.Errorf("%s is not a count", Quote(s))
		}
		if n > (math.MaxInt64-int64(c-'0'))/10 {
			n = math.MaxInt64 // saturated; keep checking the syntax
			continue
		}
		n = n*10 + int64(c-'0')
	}
	if strings.Trim(frac, "0123456789") != "" {
		return 0, "", fmt.Errorf("%s is not a count", Quote(s))
	}
	return n, frac, nil
}

// Quote quotes at most the first 64 bytes of s, with its length when it is
// longer, so that an error about a huge field stays small.
func Quote(s string) string {
	if len(s) > 64 {
		return fmt.Sprintf("%q… (%d bytes)", s[:64], len(s))
	}
	return fmt.Sprintf("%q", s)
}
