// Package backoff holds the one pause policy that every throttle in ratesem
// follows (the Transport, the Pool's keys, retries): a throttle without a
// usable Retry-After pauses with capped exponential backoff and jitter, and
// every pause, Retry-After included, ends at a jittered instant so that a
// fleet of clients does not come back at one instant (the IETF RateLimit
// header draft, section "Resource exhaustion", asks clients for that).
package backoff

import (
	"math/rand/v2"
	"time"
)

// DefaultMaxPause is the longest pause any one throttle can cause when the
// user sets no cap (httpclient's and clientpool's default):
// a hostile or broken server cannot park a client for longer.
const DefaultMaxPause = 5 * time.Minute

// DefaultMin is the first pause after a throttle without a usable
// Retry-After; each further throttle in a row doubles it, up to the cap.
const DefaultMin = 200 * time.Millisecond

// Cap returns max when it is positive, else DefaultMaxPause.
func Cap(max time.Duration) time.Duration {
	if max > 0 {
		return max
	}
	return DefaultMaxPause
}

// Exp returns the pause after the attempt-th throttle in a row without a
// usable Retry-After (attempt 0 is the first): start·2^attempt, capped at
// limit, with "equal jitter": a uniform value in [d/2, d], so that pauses
// of clients throttled together spread out, and never above limit. It
// never overflows: attempt beyond 62 is the cap. start ≤ 0 means DefaultMin;
// limit ≤ 0 means DefaultMaxPause.
func Exp(attempt int, start, limit time.Duration) time.Duration {
	if start <= 0 {
		start = DefaultMin
	}
	limit = Cap(limit)
	d := limit
	if attempt >= 0 && attempt < 62 && start <= limit>>attempt {
		d = start << attempt
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

// Spread returns the pause for a server-given delay d (a parsed Retry-After,
// d ≥ 0): never shorter than d when d is under limit (the server asked for
// at least d), lengthened by a random amount of up to a tenth of d plus
// 50 ms so that clients throttled together do not all resume at one
// instant, and never above limit. A d at or above limit gives a value in
// [limit·9/10, limit]: the server is not obeyed then anyway, and a capped
// fleet still spreads. limit ≤ 0 means DefaultMaxPause.
func Spread(d, limit time.Duration) time.Duration {
	limit = Cap(limit)
	if d < 0 {
		d = 0
	}
	if d >= limit {
		return limit - rand.N(limit/10+1)
	}
	extra := d/10 + 50*time.Millisecond
	if extra > limit-d {
		extra = limit - d
	}
	return d + rand.N(extra+1)
}
