package clientpool

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ErrMalformedHeader is matched (errors.Is) by the errors ParseRateLimit
// returns for a usage header that is present but cannot be read.
var ErrMalformedHeader = errors.New("clientpool: malformed rate-limit header")

// RateLimitInfo is what a server says about one of its limits.
type RateLimitInfo struct {
	Limit     int64         // units per window (quota)
	Remaining int64         // units left in the current window
	Reset     time.Duration // until the window resets; 0 when not given
}

// Used returns Limit − Remaining, the units the server counts as spent.
func (i RateLimitInfo) Used() int64 { return max(i.Limit-i.Remaining, 0) }

// BinanceUsage returns a UsageFunc that reads one of Binance's usage
// headers, such as "X-MBX-USED-WEIGHT-1M" (the IP's REQUEST_WEIGHT used in
// the current minute) or "X-MBX-ORDER-COUNT-10S" and "X-MBX-ORDER-COUNT-1D"
// (the account's orders), each a decimal count. Source:
// https://developers.binance.com/docs/binance-spot-api-docs/rest-api/limits
// A missing or malformed header reads as "not said" (false).
func BinanceUsage(name string) UsageFunc {
	return func(h http.Header) (int64, bool) {
		v := strings.TrimSpace(h.Get(name))
		n, err := strconv.ParseInt(v, 10, 64)
		if v == "" || err != nil || n < 0 {
			return 0, false
		}
		return n, true
	}
}

// XRateLimitUsage reads the common X-RateLimit-Limit and X-RateLimit-Remaining
// headers (GitHub, Twitter and many others): used = limit − remaining. It
// returns false when either is missing or malformed.
func XRateLimitUsage(h http.Header) (int64, bool) {
	i, err := ParseRateLimit(h, "X-RateLimit-", "")
	if err != nil || i.Limit == 0 {
		return 0, false
	}
	return i.Used(), true
}

// IETFRateLimitUsage returns a UsageFunc for the IETF draft's fields
// (draft-ietf-httpapi-ratelimit-headers): the structured RateLimit and
// RateLimit-Policy fields of the later drafts, for the policy named policy
// ("" means the first one), or the RateLimit-Limit and RateLimit-Remaining
// fields of the earlier drafts. It returns false when none is present or
// they are malformed.
func IETFRateLimitUsage(policy string) UsageFunc {
	return func(h http.Header) (int64, bool) {
		i, err := ParseRateLimit(h, "RateLimit-", policy)
		if err != nil || i.Limit == 0 {
			return 0, false
		}
		return i.Used(), true
	}
}

// ParseRateLimit reads a server's rate-limit headers. With prefix
// "X-RateLimit-" it reads X-RateLimit-Limit, -Remaining and -Reset (seconds).
// With prefix "RateLimit-" it reads the IETF draft: first the structured
// fields `RateLimit: "name";r=50;t=30` and `RateLimit-Policy: "name";q=100;w=60`
// for the named policy (policy "" takes the first item), else the earlier
// RateLimit-Limit ("100" or "100, 100;w=60"), RateLimit-Remaining and
// RateLimit-Reset. It returns a zero RateLimitInfo and a nil error when the
// headers are absent, and an error matching ErrMalformedHeader when they are
// present but cannot be read (a negative or non-numeric count, remaining
// above the limit, an unknown policy).
func ParseRateLimit(h http.Header, prefix, policy string) (RateLimitInfo, error) {
	if prefix == "RateLimit-" && h.Get("RateLimit") != "" {
		return parseStructured(h, policy)
	}
	limit, remaining := h.Get(prefix+"Limit"), h.Get(prefix+"Remaining")
	if limit == "" && remaining == "" {
		return RateLimitInfo{}, nil
	}
	var i RateLimitInfo
	var err error
	// "100, 100;w=60": the first list member is the quota in force.
	first, _, _ := strings.Cut(limit, ",")
	first, _, _ = strings.Cut(first, ";")
	if i.Limit, err = count(first); err != nil {
		return RateLimitInfo{}, malformed(prefix+"Limit", limit, err)
	}
	if i.Remaining, err = count(remaining); err != nil {
		return RateLimitInfo{}, malformed(prefix+"Remaining", remaining, err)
	}
	if reset := h.Get(prefix + "Reset"); reset != "" {
		s, err := count(reset)
		if err != nil {
			return RateLimitInfo{}, malformed(prefix+"Reset", reset, err)
		}
		i.Reset = time.Duration(s) * time.Second
	}
	if i.Remaining > i.Limit {
		return RateLimitInfo{}, malformed(prefix+"Remaining", remaining, fmt.Errorf("above the limit %d", i.Limit))
	}
	return i, nil
}

func parseStructured(h http.Header, policy string) (RateLimitInfo, error) {
	rl, err := findItem(h.Get("RateLimit"), policy)
	if err != nil {
		return RateLimitInfo{}, malformed("RateLimit", h.Get("RateLimit"), err)
	}
	pol, err := findItem(h.Get("RateLimit-Policy"), rl.name)
	if err != nil {
		return RateLimitInfo{}, malformed("RateLimit-Policy", h.Get("RateLimit-Policy"), err)
	}
	var i RateLimitInfo
	if i.Remaining, err = count(rl.params["r"]); err != nil {
		return RateLimitInfo{}, malformed("RateLimit", h.Get("RateLimit"), fmt.Errorf("r: %w", err))
	}
	if i.Limit, err = count(pol.params["q"]); err != nil {
		return RateLimitInfo{}, malformed("RateLimit-Policy", h.Get("RateLimit-Policy"), fmt.Errorf("q: %w", err))
	}
	if t := rl.params["t"]; t != "" {
		s, err := count(t)
		if err != nil {
			return RateLimitInfo{}, malformed("RateLimit", h.Get("RateLimit"), fmt.Errorf("t: %w", err))
		}
		i.Reset = time.Duration(s) * time.Second
	}
	if i.Remaining > i.Limit {
		return RateLimitInfo{}, malformed("RateLimit", h.Get("RateLimit"), fmt.Errorf("r %d above q %d", i.Remaining, i.Limit))
	}
	return i, nil
}

type item struct {
	name   string
	params map[string]string
}

// findItem parses a structured-field list of `"name";k=v;k=v` items (RFC 8941,
// the subset the draft uses) and returns the one named name, or the first
// when name is "".
func findItem(field, name string) (item, error) {
	for _, member := range strings.Split(field, ",") {
		parts := strings.Split(strings.TrimSpace(member), ";")
		it := item{name: strings.Trim(strings.TrimSpace(parts[0]), `"`), params: map[string]string{}}
		for _, p := range parts[1:] {
			k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
			if !ok {
				return item{}, fmt.Errorf("parameter %q without a value", p)
			}
			it.params[k] = v
		}
		if name == "" || it.name == name {
			return it, nil
		}
	}
	return item{}, fmt.Errorf("no policy %q", name)
}

func count(s string) (int64, error) {
	s = strings.TrimSpace(s)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a count", s)
	}
	if n < 0 {
		return 0, fmt.Errorf("negative count %d", n)
	}
	return n, nil
}

func malformed(field, value string, err error) error {
	return fmt.Errorf("%w: %s: %q: %v", ErrMalformedHeader, field, value, err)
}
