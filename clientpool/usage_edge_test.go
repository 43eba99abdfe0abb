package clientpool_test

import (
	"math"
	"strings"
	"testing"

	"github.com/ratesem/ratesem/clientpool"
)

// RateLimitUsage on hostile values: a count beyond int64 saturates (never
// wraps to a small or negative use), a count too long to be a number, a
// negative one, a lone field or an IETF integer beyond RFC 9651's 15 digits
// is malformed (false); of several Remaining lines the smallest counts (the
// larger use); a reset beyond int64 does not spoil the use.
func TestRateLimitUsageHostileValues(t *testing.T) {
	l, r := "X-RateLimit-Limit", "X-RateLimit-Remaining"
	big, huge := "99999999999999999999", strings.Repeat("9", 10<<20)
	runUsage(t, `RateLimitUsage("X-RateLimit-", "")`, clientpool.RateLimitUsage("X-RateLimit-", ""), []usageCase{
		{"limit beyond int64", hdr(l, big, r, "0"), math.MaxInt64, true},
		{"remaining beyond int64", hdr(l, "10", r, big), 0, true},
		{"both beyond int64", hdr(l, big, r, big), 0, true},
		{"limit of 10 MB", hdr(l, huge, r, "0"), 0, false},
		{"remaining of 10 MB", hdr(l, "10", r, huge), 0, false},
		{"negative limit", hdr(l, "-10", r, "0"), 0, false},
		{"MinInt64 remaining", hdr(l, "10", r, "-9223372036854775808"), 0, false},
		{"limit alone", hdr(l, "10"), 0, false},
		{"remaining alone", hdr(r, "10"), 0, false},
		{"two remaining: the smaller", hdr(l, "10", r, "5", r, "8"), 5, true},
		{"reset beyond int64", hdr(l, "10", r, "5", "X-RateLimit-Reset", big), 5, true},
		{"negative reset", hdr(l, "10", r, "5", "X-RateLimit-Reset", "-5"), 0, false},
	})
	runUsage(t, `RateLimitUsage("RateLimit-", "")`, clientpool.RateLimitUsage("RateLimit-", ""), []usageCase{
		{"q of 15 digits", hdr("RateLimit", `"d";r=0`, "RateLimit-Policy", `"d";q=999999999999999`), 999999999999999, true},
		{"q beyond 15 digits", hdr("RateLimit", `"d";r=0`, "RateLimit-Policy", `"d";q=`+big), 0, false},
		{"r beyond 15 digits", hdr("RateLimit", `"d";r=`+big, "RateLimit-Policy", `"d";q=5`), 0, false},
		{"q zero", hdr("RateLimit", `"d";r=0`, "RateLimit-Policy", `"d";q=0`), 0, false},
		{"q decimal", hdr("RateLimit", `"d";r=0`, "RateLimit-Policy", `"d";q=5.5`), 0, false},
		{"no policy", hdr("RateLimit", `"d";r=3`), 0, false},
		{"draft 07 beyond 15 digits", hdr("RateLimit", "limit="+big+", remaining=0, reset=5"), 0, false},
	})
}
