package httpclient

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"
)

// maxDateBytes is the longest value ParseRetryAfter tries to read as an
// HTTP-date, after trimming: the longest form, RFC 850 with the longest day
// name ("Wednesday, 09-Nov-94 08:49:37 GMT"), is 33 bytes. A longer value
// that is not all digits is rejected without being parsed, so a hostile
// Retry-After costs time linear in its length and no allocation beyond a
// short error.
const maxDateBytes = 64

// maxDelaySeconds is the largest whole number of seconds a time.Duration can
// hold; ParseRetryAfter saturates above it instead of wrapping negative.
const maxDelaySeconds = int64(math.MaxInt64 / int64(time.Second))

// ParseRetryAfter parses the value of a Retry-After header (RFC 9110,
// section 10.2.3) and returns how long to wait from now. It does not block and
// is safe for concurrent use.
//
// The value, with surrounding whitespace trimmed, is either:
//
//   - delay-seconds: one or more ASCII digits, e.g. "120" (two minutes).
//     Values too large for a time.Duration saturate at the largest Duration
//     rather than overflow; callers should cap the result (Transport caps it
//     at defaultMaxRetryAfter unless WithMaxRetryAfter says).
//   - an HTTP-date in any of the three forms [http.ParseTime] accepts
//     (IMF-fixdate "Sun, 06 Nov 1994 08:49:37 GMT", RFC 850
//     "Sunday, 06-Nov-94 08:49:37 GMT", ANSI C "Sun Nov  6 08:49:37 1994"),
//     or, for servers that write it, [time.RFC1123] with the zone "UTC".
//     The delay is the date minus now; a date at or before now gives 0 and no
//     error. Other zone names are rejected, because time.Parse would silently
//     read an unknown abbreviation as UTC.
//
// Anything else — an empty value, a negative number such as "-5", a sign
// such as "+5", a fraction such as "1.5", digits of other scripts such as
// "١٢", text such as "soon", or a value longer than 64 bytes that is not all
// digits — returns 0 and an error whose message starts with "ratesem: "
// and quotes the input (its first 64 bytes when longer).
//
// The result is always in [0, math.MaxInt64]. The cost is linear in len(v)
// and does not allocate for delay-seconds of any length; a long value of
// another kind is rejected on its length before it is parsed.
func ParseRetryAfter(v string, now time.Time) (time.Duration, error) {
	s := strings.TrimSpace(v)
	switch {
	case s == "":
		return 0, fmt.Errorf("ratesem: empty Retry-After %s", quote(v))
	case isDigits(s):
		return parseSeconds(s), nil
	case s[0] == '-' && isDigits(s[1:]):
		return 0, fmt.Errorf("ratesem: negative Retry-After %s", quote(v))
	case len(s) > maxDateBytes:
		return 0, fmt.Errorf("ratesem: invalid Retry-After %s: want delay-seconds or an HTTP-date", quote(v))
	}
	if t, err := http.ParseTime(s); err == nil {
		return delayUntil(t, now), nil
	}
	if t, err := time.Parse(time.RFC1123, s); err == nil {
		if name, offset := t.Zone(); name == "UTC" && offset == 0 {
			return delayUntil(t, now), nil
		}
	}
	return 0, fmt.Errorf("ratesem: invalid Retry-After %s: want delay-seconds or an HTTP-date", quote(v))
}

// quote quotes v, or its first maxDateBytes bytes and its length when it is
// longer, so that an error about a huge header stays small.
func quote(v string) string {
	if len(v) > maxDateBytes {
		return fmt.Sprintf("%q… (%d bytes)", v[:maxDateBytes], len(v))
	}
	return fmt.Sprintf("%q", v)
}

// isDigits reports whether s is non-empty and made of ASCII digits only
// (strconv would also accept signs, and unicode.IsDigit other scripts).
func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// parseSeconds converts a string of ASCII digits to a Duration of that many
// seconds, saturating at math.MaxInt64 nanoseconds.
func parseSeconds(s string) time.Duration {
	var secs int64
	for i := 0; i < len(s); i++ {
		// secs <= maxDelaySeconds (~9.2e9) here, so secs*10+9 cannot overflow.
		secs = secs*10 + int64(s[i]-'0')
		if secs > maxDelaySeconds {
			return time.Duration(math.MaxInt64)
		}
	}
	return time.Duration(secs) * time.Second
}

// delayUntil returns t - now, or 0 if t is not after now. time.Time.Sub
// saturates, so this cannot overflow either.
func delayUntil(t, now time.Time) time.Duration {
	if d := t.Sub(now); d > 0 {
		return d
	}
	return 0
}
