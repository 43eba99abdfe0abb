package clientpool

import (
	"net/http"
	"strings"
	"time"

	"github.com/ratesem/ratesem/window"
)

// LearnRateLimit returns a Rule.Learn function that reads the fields
// ParseRateLimitAt reads (prefix "X-RateLimit-", "RateLimit-" for the IETF
// drafts, or another API's prefix; policy as there): the limit, what
// remains and the reset. With fixedWindow, the reset is the end of the
// server's window (Learned.Reset, GitHub's and most X-RateLimit- APIs'); else
// it is left out (a token bucket's time to full). A reset given as an epoch
// instant (seconds or milliseconds since 1970) is the instant itself
// (Learned.Epoch: the pool reads it against the response's Date header,
// even when it is past on the host's clock), one given as a delay is that
// long after now (0: the window ends now). Headers that are absent or
// malformed (an error of ParseRateLimitAt) say nothing (false). The function
// is safe for concurrent use.
func LearnRateLimit(prefix, policy string, fixedWindow bool) func(h http.Header, now time.Time) (Learned, bool) {
	return func(h http.Header, now time.Time) (Learned, bool) {
		i, given, err := parseRateLimitAt(h, prefix, policy, now)
		if err != nil || i.Limit <= 0 {
			return Learned{}, false
		}
		in := Learned{Limit: window.Limit{N: i.Limit}, Remaining: i.Remaining}
		if fixedWindow && given {
			// A reset of 0 (0 seconds to wait: the window ends within
			// the second) is a report of the window too, ending now
			// (and ResetMargin); an epoch instant past is stale.
			in.Reset = now.Add(i.Reset)
			if ep, ok := resetEpoch(h, prefix); ok {
				in.Reset, in.Epoch = ep, true
			}
		}
		return in, true
	}
}

// resetEpoch returns the instant of the reset field prefix+"Reset" when it
// is an epoch value (see resetFrom), and false when it is a delay, absent,
// malformed, or not the field ParseRateLimitAt read (a structured RateLimit
// field, whose reset is a delay).
func resetEpoch(h http.Header, prefix string) (time.Time, bool) {
	if prefix == "RateLimit-" && len(h.Values("RateLimit")) > 0 {
		return time.Time{}, false
	}
	v, err := fieldValues(h, prefix+"Reset")
	if err != nil || len(v) == 0 {
		return time.Time{}, false
	}
	first, _, _ := strings.Cut(v[0], ",")
	n, frac, err := decimal(first)
	if err != nil || n < epochSeconds {
		return time.Time{}, false
	}
	var nanos int64
	for i := range 9 {
		nanos *= 10
		if i < len(frac) {
			nanos += int64(frac[i] - '0')
		}
	}
	if n >= epochMillis {
		return time.UnixMilli(n).Add(time.Duration(nanos / 1000)), true
	}
	return time.Unix(n, nanos), true
}
