package httpclient

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/ratesem/ratesem/internal/hdr"
	"github.com/ratesem/ratesem/internal/sat"
)

// maxDateBytes is the longest value ParseRetryAfter tries to read as an
// HTTP-date, after trimming: the longest form, RFC 850 with the longest day
// name ("Wednesday, 09-Nov-94 08:49:37 GMT"), is 33 bytes. A longer value
// that is not all digits is rejected without being parsed, so a hostile
// Retry-After costs time linear in its length and no allocation beyond a
// short error.
const maxDateBytes = 64

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
	if n, frac, ok := hdr.Decimal(s); ok && frac == "" { // ASCII digits only: no sign, no other script
		return time.Duration(sat.Mul(n, int64(time.Second))), nil
	}
	switch {
	case s == "":
		return 0, fmt.Errorf("ratesem: empty Retry-After %s", hdr.Quote(v))
	case s[0] == '-' && len(s) > 1 && strings.Trim(s[1:], "0123456789") == "":
		return 0, fmt.Errorf("ratesem: negative Retry-After %s", hdr.Quote(v))
	case len(s) > maxDateBytes:
		return 0, fmt.Errorf("ratesem: invalid Retry-After %s: want delay-seconds or an HTTP-date", hdr.Quote(v))
	}
	if t, err := http.ParseTime(s); err == nil {
		return max(t.Sub(now), 0), nil // Sub saturates
	}
	if t, err := time.Parse(time.RFC1123, s); err == nil {
		if name, offset := t.Zone(); name == "UTC" && offset == 0 {
			return max(t.Sub(now), 0), nil
		}
	}
	return 0, fmt.Errorf("ratesem: invalid Retry-After %s: want delay-seconds or an HTTP-date", hdr.Quote(v))
}
