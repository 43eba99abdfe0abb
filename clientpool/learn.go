package clientpool

import (
	"net/http"
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
		i, reset, err := parseRateLimitAt(h, prefix, policy, now)
		if err != nil || i.Limit <= 0 {
			return Learned{}, false
		}
		in := Learned{Limit: window.Limit{N: i.Limit}, Remaining: i.Remaining}
		if fixedWindow && reset.given {
			// A reset of 0 (0 seconds to wait: the window ends within
			// the second) is a report of the window too, ending now
			// (and ResetMargin); an epoch instant past is stale.
			// An epoch instant is the instant itself; a structured
			// RateLimit field's reset is a delay.
			in.Reset = now.Add(i.Reset)
			if !reset.epoch.IsZero() {
				in.Reset, in.Epoch = reset.epoch, true
			}
		}
		return in, true
	}
}
