package clientpool

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/ratesem/ratesem/internal/hdr"
	"github.com/ratesem/ratesem/internal/sat"
)

// maxFieldBytes is the largest rate-limit field the parsers in this file read:
// the lengths of all the lines of one field name, plus one separator per extra
// line, in bytes. A longer field is rejected (errMalformed, or "not said"
// for a Rule.Usage function) before any of it is parsed, so a hostile server
// cannot make a response cost more than this much parsing. 8 KiB is the default
// per-line limit of common proxies (nginx's large header buffers, Apache's
// LimitRequestFieldSize); real rate-limit fields are a few dozen bytes.
const maxFieldBytes = 8 << 10

// errMalformed is what every error of ParseRateLimitAt wraps: a rate-limit
// field present but unreadable.
var errMalformed = errors.New("ratesem: malformed rate-limit header")

// epochSeconds and epochMillis are the magnitudes from which a reset
// value is a point in time rather than a number of seconds to wait. See
// ParseRateLimitAt.
const (
	epochSeconds = 1_000_000_000     // 2001-09-09T01:46:40Z; as a delay, 31.7 years
	epochMillis  = 1_000_000_000_000 // as epoch seconds, the year 33658
)

// RateLimitInfo is what a server says about one of its limits. The parsers
// in this package return Limit ≥ 0, Remaining ≥ 0 and Reset ≥ 0.
type RateLimitInfo struct {
	// Limit is the quota: units per window.
	Limit int64
	// Remaining is the units left in the current window.
	Remaining int64
	// Reset is the time until the window resets; 0 when not given.
	Reset time.Duration
}

// used returns Limit − Remaining, the units the server counts as spent, in
// [0, Limit]: 0 when Remaining ≥ Limit (a server that raised the quota
// mid-window) or Limit ≤ 0, and Limit when Remaining < 0. It never wraps.
func (i RateLimitInfo) used() int64 {
	return max(min(sat.Sub(i.Limit, i.Remaining), i.Limit), 0) // Sub saturates: a Remaining < 0 gives Limit
}

// BinanceUsage returns a Rule.Usage function that reads one of Binance's usage
// headers, such as "X-MBX-USED-WEIGHT-1M" (the IP's REQUEST_WEIGHT used in
// the current minute) or "X-MBX-ORDER-COUNT-10S" and "X-MBX-ORDER-COUNT-1D"
// (the account's orders), each a decimal count. Source:
// https://developers.binance.com/docs/binance-spot-api-docs/rest-api/limits
//
// A count beyond math.MaxInt64 reads as math.MaxInt64 (the pool clamps what
// it consumes to the rule's limit); when the header is repeated, the largest
// count is used. A missing header, one longer than maxFieldBytes, or a value
// that is not ASCII digits (a sign, a fraction, other scripts' digits) reads
// as "not said" (false). The function is safe for concurrent use.
func BinanceUsage(name string) func(h http.Header) (used int64, ok bool) {
	name = http.CanonicalHeaderKey(name) // once, not per response
	return func(h http.Header) (int64, bool) {
		vs, err := fieldValues(h, name)
		if err != nil || len(vs) == 0 {
			return 0, false
		}
		var used int64
		for _, v := range vs {
			n, err := count(v)
			if err != nil {
				return 0, false
			}
			used = max(used, n)
		}
		return used, true
	}
}

// RateLimitUsage returns a Rule.Usage function that reads the fields
// ParseRateLimitAt reads with the same prefix and policy: "X-RateLimit-" for
// the common X-RateLimit-Limit and X-RateLimit-Remaining headers (GitHub,
// Twitter and many others), "RateLimit-" for every form of the IETF draft
// (draft-ietf-httpapi-ratelimit-headers) with the policy named policy (""
// means the first one), or another API's prefix. It reports used = limit −
// remaining, saturated to [0, limit] (see RateLimitInfo), and false when
// the fields are missing or malformed (see ParseRateLimitAt). The function
// is safe for concurrent use.
func RateLimitUsage(prefix, policy string) func(h http.Header) (used int64, ok bool) {
	return func(h http.Header) (int64, bool) {
		// The zero now: Reset is computed but not used.
		i, err := ParseRateLimitAt(h, prefix, policy, time.Time{})
		if err != nil || i.Limit == 0 {
			return 0, false
		}
		return i.used(), true
	}
}

// ParseRateLimitAt reads a server's rate-limit headers as of now. It does
// not block, reads h only, and is safe for concurrent use.
//
// With any prefix, such as "X-RateLimit-", it reads <prefix>Limit,
// <prefix>Remaining and <prefix>Reset. With prefix "RateLimit-" it reads
// the forms of draft-ietf-httpapi-ratelimit-headers
// (https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/,
// work in progress), newest first:
//
//   - drafts 08 and later: `RateLimit: "name";r=50;t=30` and
//     `RateLimit-Policy: "name";q=100;w=60`, each a Structured Field List
//     (RFC 9651) of items named by a String or a Token, which may be split
//     over several lines. The policy named policy is used ("" takes the
//     first item of RateLimit); q is the limit, r the remaining units, t the
//     seconds until the reset.
//   - draft 07: `RateLimit: limit=100, remaining=50, reset=5`, a Structured
//     Field Dictionary (RateLimit-Policy is then informative and ignored).
//   - drafts 00 to 06: RateLimit-Limit ("100", or the list "100, 100;w=60"
//     whose first member is the quota in force), RateLimit-Remaining and
//     RateLimit-Reset, read like the X-RateLimit- fields.
//
// Counts are ASCII decimal digits; one beyond math.MaxInt64 saturates at
// math.MaxInt64 (the Structured Field forms allow at most 15 digits). When
// Remaining is repeated, the smallest is used; when Limit is a list, its
// first member. Remaining above Limit is accepted (a quota raised mid-window;
// Used then returns 0).
//
// A reset value is read by its magnitude, because APIs disagree on its
// meaning (GitHub and Twitter send Unix epoch seconds, Discord epoch seconds
// with a fraction, the IETF drafts delta-seconds): below 1e9 it is seconds to
// wait (1e9 seconds is 31.7 years, longer than any rate window); from 1e9 to
// 1e12 it is Unix epoch seconds (1e9 is 2001-09-09, so every current epoch
// is above it); from 1e12 it is Unix epoch milliseconds (1e12 epoch seconds
// would be the year 33658). A fraction of up to nine digits is allowed.
// Reset is the time from now to that point: 0 when it is past, saturated at
// math.MaxInt64 nanoseconds, never negative.
//
// It returns a zero RateLimitInfo and a nil error when the headers are absent,
// and an error (its message begins "ratesem: malformed rate-limit header")
// when they are present but cannot be read: a negative, signed or non-numeric count, a field longer than
// maxFieldBytes, a Structured Field that does not parse, an unknown policy or
// one without r or q.
func ParseRateLimitAt(h http.Header, prefix, policy string, now time.Time) (RateLimitInfo, error) {
	i, _, err := parseRateLimitAt(h, prefix, policy, now)
	return i, err
}

// resetSaid is what the headers said of the reset: whether they gave one
// (Reset is 0 both when they did not and when they said 0 seconds or an
// instant now past), and the instant, when it was given as an epoch value
// in a <prefix>Reset field (zero otherwise).
type resetSaid struct {
	given bool
	epoch time.Time
}

// parseRateLimitAt is ParseRateLimitAt, and tells what the headers said of
// the reset.
func parseRateLimitAt(h http.Header, prefix, policy string, now time.Time) (RateLimitInfo, resetSaid, error) {
	if prefix == "RateLimit-" {
		rl, err := fieldValues(h, "RateLimit")
		if err != nil {
			return RateLimitInfo{}, resetSaid{}, err
		}
		if len(rl) > 0 {
			i, given, err := parseStructured(h, rl, policy, now)
			return i, resetSaid{given: given}, err
		}
	}
	var f [3][]string // Limit, Remaining, Reset
	var err error
	for k, name := range []string{"Limit", "Remaining", "Reset"} {
		if f[k], err = fieldValues(h, prefix+name); err != nil {
			return RateLimitInfo{}, resetSaid{}, err
		}
	}
	limit, remaining, reset := f[0], f[1], f[2]
	if len(limit) == 0 && len(remaining) == 0 {
		return RateLimitInfo{}, resetSaid{}, nil
	}
	var i RateLimitInfo
	// "100, 100;w=60": the first list member (without its parameters) is
	// the quota in force; none is malformed.
	first := ""
	if len(limit) > 0 {
		first, _, _ = strings.Cut(limit[0], ",")
	}
	first, _, _ = strings.Cut(first, ";")
	if i.Limit, err = count(first); err != nil {
		return RateLimitInfo{}, resetSaid{}, malformed(prefix+"Limit", limit, err)
	}
	i.Remaining = math.MaxInt64
	if len(remaining) == 0 {
		return RateLimitInfo{}, resetSaid{}, malformed(prefix+"Remaining", nil, errors.New("missing"))
	}
	for _, line := range remaining {
		for m := range strings.SplitSeq(line, ",") {
			n, err := count(m)
			if err != nil {
				return RateLimitInfo{}, resetSaid{}, malformed(prefix+"Remaining", remaining, err)
			}
			i.Remaining = min(i.Remaining, n)
		}
	}
	var r resetSaid
	if len(reset) > 0 {
		first, _, _ := strings.Cut(reset[0], ",")
		n, frac, ok := hdr.Decimal(first)
		if !ok {
			return RateLimitInfo{}, resetSaid{}, malformed(prefix+"Reset", reset, fmt.Errorf("%s is not a count", hdr.Quote(first)))
		}
		// frac is 0 to 9 digits: padded to 9, the nanoseconds.
		nanos, _ := strconv.ParseInt((frac + "000000000")[:9], 10, 64)
		i.Reset = resetFrom(n, nanos, now)
		r = resetSaid{given: true, epoch: epochAt(n, nanos)}
	}
	return i, r, nil
}

// parseStructured reads the RateLimit field rl (and RateLimit-Policy) of the
// drafts 07 and later with a Structured Field parser, and reports whether
// it gave a reset.
func parseStructured(h http.Header, rl []string, policy string, now time.Time) (RateLimitInfo, bool, error) {
	list, err := httpsfv.UnmarshalList(rl)
	if err != nil {
		// Draft 07: RateLimit: limit=100, remaining=50, reset=5.
		dict, derr := httpsfv.UnmarshalDictionary(rl)
		if derr != nil {
			return RateLimitInfo{}, false, malformed("RateLimit", rl, fmt.Errorf("neither a List (%v) nor a Dictionary (%v)", err, derr))
		}
		return parseDraft07(dict, rl, now)
	}
	// RateLimit's item: r, and t when given.
	it, name, err := findItem(list, policy)
	var r, t int64
	given := false
	if err == nil {
		r, err = intParam(it.Params, "r")
	}
	if err == nil {
		if _, given = it.Params.Get("t"); given {
			t, err = intParam(it.Params, "t")
		}
	}
	if err != nil {
		return RateLimitInfo{}, false, malformed("RateLimit", rl, err)
	}
	// RateLimit-Policy's item of the same name: q.
	pv, err := fieldValues(h, "RateLimit-Policy")
	if err != nil {
		return RateLimitInfo{}, false, err
	}
	var q int64
	plist, err := httpsfv.UnmarshalList(pv)
	if err == nil {
		var pol httpsfv.Item
		if pol, _, err = findItem(plist, name); err == nil {
			q, err = intParam(pol.Params, "q")
		}
	}
	if err != nil {
		return RateLimitInfo{}, false, malformed("RateLimit-Policy", pv, err)
	}
	return RateLimitInfo{Limit: q, Remaining: r, Reset: resetFrom(t, 0, now)}, given, nil
}

// parseDraft07 reads draft 07's `RateLimit: limit=100, remaining=50, reset=5`.
func parseDraft07(d *httpsfv.Dictionary, rl []string, now time.Time) (RateLimitInfo, bool, error) {
	var v [3]int64 // limit, remaining, reset (0 when absent)
	_, given := d.Get("reset")
	for k, key := range []string{"limit", "remaining", "reset"} {
		m, ok := d.Get(key)
		if !ok && key == "reset" {
			break
		}
		var err error
		if v[k], err = nonNegative("", key, m, ok); err != nil {
			return RateLimitInfo{}, false, malformed("RateLimit", rl, err)
		}
	}
	return RateLimitInfo{Limit: v[0], Remaining: v[1], Reset: resetFrom(v[2], 0, now)}, given, nil
}

// findItem returns the Item of list named name (a String or a Token), or
// the first member when name is "", and its name.
func findItem(list httpsfv.List, name string) (httpsfv.Item, string, error) {
	for _, m := range list {
		it, _ := m.(httpsfv.Item) // an inner list names no policy
		n, ok := it.Value.(string)
		if t, tok := it.Value.(httpsfv.Token); tok {
			n, ok = string(t), true
		}
		if ok && (name == "" || n == name) {
			return it, n, nil
		}
	}
	return httpsfv.Item{}, "", fmt.Errorf("no policy %s", hdr.Quote(name))
}

// intParam returns the non-negative Integer parameter k of p.
func intParam(p *httpsfv.Params, k string) (int64, error) {
	if p == nil {
		return nonNegative("parameter ", k, nil, false)
	}
	v, ok := p.Get(k)
	return nonNegative("parameter ", k, v, ok)
}

// nonNegative returns v, the value of kind+name (a parameter's, or a
// Dictionary member's Item), as a non-negative Integer; ok false means v
// is absent.
func nonNegative(kind, name string, v any, ok bool) (int64, error) {
	if !ok {
		return 0, fmt.Errorf("no %s%s", kind, name)
	}
	if it, isItem := v.(httpsfv.Item); isItem {
		v = it.Value
	}
	n, isInt := v.(int64)
	if !isInt || n < 0 {
		return 0, fmt.Errorf("%s%s: %v is not a non-negative Integer", kind, name, v)
	}
	return n, nil
}

// fieldValues returns the lines of the field name in h, or an error matching
// errMalformed when together they are longer than maxFieldBytes.
// It does not allocate for a canonical name.
func fieldValues(h http.Header, name string) ([]string, error) {
	vs := h.Values(name)
	size := 0
	for _, v := range vs {
		size += len(v) + 2 // ", " joins lines
		if size-2 > maxFieldBytes {
			return nil, fmt.Errorf("%w: %s: longer than %d bytes", errMalformed, name, maxFieldBytes)
		}
	}
	return vs, nil
}

// count reads s, with optional whitespace around it, as ASCII decimal
// digits, saturating at math.MaxInt64 (hdr.Decimal). A sign, a fraction or
// any other character is an error; the cost is linear in len(s), without
// allocation unless s is malformed.
func count(s string) (int64, error) {
	n, frac, ok := hdr.Decimal(s)
	if !ok || frac != "" {
		return 0, fmt.Errorf("%s is not a whole count", hdr.Quote(s))
	}
	return n, nil
}

// resetFrom returns the time from now to the reset n (seconds, epoch
// seconds or epoch milliseconds, by magnitude: see epochAt) plus nanos
// nanoseconds, saturated to [0, math.MaxInt64].
func resetFrom(n, nanos int64, now time.Time) time.Duration {
	if at := epochAt(n, nanos); !at.IsZero() {
		return max(at.Sub(now), 0) // Sub saturates
	}
	// n < 1e9 seconds: n*1e9 + nanos < 1e18 fits.
	return time.Duration(n)*time.Second + time.Duration(nanos)
}

// epochAt returns the instant of the reset value n plus nanos nanoseconds
// when n is an epoch value (epoch seconds from epochSeconds, epoch
// milliseconds from epochMillis, where nanos is a fraction of a
// millisecond), and the zero time when it is seconds to wait.
func epochAt(n, nanos int64) time.Time {
	switch {
	case n >= epochMillis:
		return time.UnixMilli(n).Add(time.Duration(nanos / 1000))
	case n >= epochSeconds:
		return time.Unix(n, nanos)
	}
	return time.Time{}
}

func malformed(field string, values []string, err error) error {
	v := ""
	if len(values) > 0 {
		v = values[0]
	}
	return fmt.Errorf("%w: %s: %s: %v", errMalformed, field, hdr.Quote(v), err)
}
