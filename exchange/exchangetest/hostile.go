package exchangetest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Hostile configures the hostile mode of [NewBinance] and [NewOKX]
// (BinanceConfig.Hostile, OKXConfig.Hostile): answers that a broken or
// adversarial server might send, to test that a client's limiter holds
// whatever it is told. The zero value turns the mode off.
//
// Each answer is altered or not by a seeded draw (see Fraction); every
// knob that is set applies to every altered answer it fits. Whatever the
// knobs, the server still enforces its real rules exactly and logs every
// arrival (Entry.Hostile marks the altered answers), so Violations,
// PeakUsage and Stats keep their meaning. A Hostile is read once by the
// constructor; it is not modified.
type Hostile struct {
	// Seed seeds the server's draws (which answers are altered, which
	// RetryAfter value each gets). The sequence of draws is the same in
	// every run; which request gets which draw follows the order of the
	// server's decisions.
	Seed uint64

	// Fraction is the share of answers altered, in [0, 1]: each answer is
	// altered with this probability. 0 means 1 (every answer). The
	// constructor panics on a value outside [0, 1] or NaN.
	Fraction float64

	// Header is set on every altered answer, after the server's own
	// headers, replacing the values of a header the server sets (a key
	// with several values is sent on several lines; a key with no values
	// removes the server's header). Keys are canonicalized. See
	// AbsurdHeaders for ready-made sets.
	Header http.Header

	// EpochReset, when not zero, sets X-RateLimit-Reset on every altered
	// answer to the Unix time in whole seconds of the server's clock plus
	// EpochReset, as GitHub does (an instant, not a delay).
	EpochReset time.Duration

	// RetryAfter, when not empty, replaces the Retry-After header of every
	// altered rejection (a rate-limit answer, a spurious throttle, or a
	// Binance 418) by one value drawn from it; the empty string removes
	// the header. See AbsurdRetryAfters. A rejection whose Retry-After
	// was replaced or removed sets no ban deadline at the Binance server:
	// only a Retry-After the server computed and sent unaltered is
	// enforced with a ban (418).
	RetryAfter []string

	// Throttle answers every altered request that every rule would admit
	// as throttled instead, counting nothing: it is logged with
	// OutcomeRateLimited and Rule HostileRule. Binance answers HTTP 429
	// with ThrottleCode in the body and no Retry-After (unless RetryAfter
	// gives one), as Binance does for its order limits. OKX answers code
	// 50011 with the status of OKXConfig.RateLimitStatus, or code 50061
	// with HTTP 200. Requests that a real rule rejects keep their real
	// answer.
	Throttle bool

	// ThrottleCode is the code in the body of a spurious throttle.
	// Binance: "-1015" (too many orders; the message names the daily
	// limit) or "-1003" (request weight); "" means -1015 on POST
	// /api/v3/order and -1003 elsewhere. OKX: "50011" or "50061"; ""
	// means "50011". The constructor panics on another value.
	ThrottleCode string

	// Stall, when not zero, stalls the body of every altered answer: the
	// status line and headers (with the full Content-Length) are sent and
	// flushed with the first StallAfter bytes of the body, then the server
	// waits Stall before sending the rest, or until the request's context
	// ends or the server is closed (then the connection is cut short). A
	// negative Stall waits until one of those. It comes after any
	// configured Latency.
	Stall time.Duration

	// StallAfter is how many bytes of the body are sent before the stall
	// (at most the body's length less one, so something is always left to
	// stall). It must not be negative; the constructor panics otherwise.
	StallAfter int
}

// HostileRule is the Entry.Rule of a spurious throttle of the hostile mode
// (Hostile.Throttle): a request every real rule admitted but the server
// answered as throttled.
const HostileRule = "hostile throttle"

// enabled reports whether any knob is set.
func (h Hostile) enabled() bool {
	return h.Header != nil || h.EpochReset != 0 || len(h.RetryAfter) > 0 || h.Throttle || h.Stall != 0
}

// hostile is the state of a server's hostile mode; nil when it is off.
// Its generator is guarded by the server's lock.
type hostile struct {
	Hostile
	header http.Header // canonical keys
	rnd    *rand.Rand
}

// newHostile validates h for the server who (the constructor's name) and
// returns its state, or nil when h turns nothing on. codes are the valid
// ThrottleCode values ("" is always valid).
func newHostile(h Hostile, who string, codes ...string) *hostile {
	if !(h.Fraction >= 0 && h.Fraction <= 1) {
		panic(fmt.Sprintf("exchangetest: %s: Hostile.Fraction must be in [0, 1], got %v", who, h.Fraction))
	}
	if h.StallAfter < 0 {
		panic(fmt.Sprintf("exchangetest: %s: Hostile.StallAfter must not be negative, got %d", who, h.StallAfter))
	}
	if h.ThrottleCode != "" && !contains(codes, h.ThrottleCode) {
		panic(fmt.Sprintf("exchangetest: %s: Hostile.ThrottleCode must be one of %q or empty, got %q", who, codes, h.ThrottleCode))
	}
	if !h.enabled() {
		return nil
	}
	hs := &hostile{Hostile: h, rnd: rand.New(rand.NewPCG(h.Seed, h.Seed^0x686f7374696c65))} // "hostile"
	if h.Header != nil {
		hs.header = make(http.Header, len(h.Header))
		for k, vs := range h.Header {
			hs.header[http.CanonicalHeaderKey(k)] = append([]string(nil), vs...)
		}
	}
	hs.RetryAfter = append([]string(nil), h.RetryAfter...)
	return hs
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// draw reports whether the next answer is altered. It must be called once
// per answer, under the server's lock; h may be nil (never).
func (h *hostile) draw() bool {
	if h == nil {
		return false
	}
	if h.Fraction == 0 || h.Fraction == 1 {
		return true
	}
	return h.rnd.Float64() < h.Fraction
}

// alter applies the knobs to rp, an altered answer decided at now;
// rejection says whether it is a rejection (429, 418, or an OKX rate-limit
// code in a 200). It reports whether Retry-After was replaced. Under the
// server's lock.
func (h *hostile) alter(rp *reply, now time.Time, rejection bool) (retryAfterAltered bool) {
	rp.hostile = true
	if rp.header == nil {
		rp.header = make(map[string]string)
	}
	if rejection && len(h.RetryAfter) > 0 {
		v := h.RetryAfter[h.rnd.IntN(len(h.RetryAfter))]
		if v == "" {
			delete(rp.header, "Retry-After")
		} else {
			rp.header["Retry-After"] = v
		}
		retryAfterAltered = true
	}
	if h.header != nil || h.EpochReset != 0 {
		rp.extra = make(http.Header, len(h.header)+1)
		for k, vs := range h.header {
			rp.extra[k] = vs
		}
		if h.EpochReset != 0 {
			rp.extra["X-Ratelimit-Reset"] = []string{strconv.FormatInt(now.Add(h.EpochReset).Unix(), 10)}
		}
	}
	rp.stall, rp.stallAfter = h.Stall, h.StallAfter
	return retryAfterAltered
}

// writeBody writes body to w, stalling as rp says: the first stallAfter
// bytes, a flush, then the wait, then the rest. It returns early, leaving
// the body short, when ctx ends or stop is closed.
func (rp reply) writeBody(ctx context.Context, w http.ResponseWriter, stop <-chan struct{}) {
	if rp.stall == 0 || len(rp.body) == 0 {
		_, _ = w.Write(rp.body)
		return
	}
	n := min(rp.stallAfter, len(rp.body)-1)
	_, _ = w.Write(rp.body[:n])
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	var timeout <-chan time.Time
	if rp.stall > 0 {
		t := time.NewTimer(rp.stall)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-timeout:
	case <-ctx.Done():
		return
	case <-stop:
		return
	}
	_, _ = w.Write(rp.body[n:])
}

// wholeSeconds returns a Retry-After value as whole seconds for the log, or
// 0 when it is not a non-negative int.
func wholeSeconds(v string) int {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// HeaderSet is a named set of response headers, for Hostile.Header.
type HeaderSet struct {
	// Name describes the set, for a subtest's name.
	Name string
	// Header is the set, ready for Hostile.Header; a fresh map per call.
	Header http.Header
}

// AbsurdHeaders returns usage headers no honest server sends, each set
// named for a subtest: counts at the int64 limits and beyond, negative,
// garbage and 10 KB values of Binance's X-MBX-USED-WEIGHT-1M, of the
// X-RateLimit-* fields (GitHub, Twitter and many others) and of the IETF
// draft's RateLimit fields (structured and earlier forms), and a
// GitHub-style X-RateLimit-Reset that is a Unix time rather than a delay.
// Each call returns new maps.
func AbsurdHeaders() []HeaderSet {
	const maxInt = "9223372036854775807"
	huge := strings.Repeat("9", 10<<10)
	h := func(kv ...string) http.Header {
		out := make(http.Header)
		for i := 0; i < len(kv); i += 2 {
			out.Add(kv[i], kv[i+1])
		}
		return out
	}
	return []HeaderSet{
		{"mbx-maxint", h(BinanceUsedWeightHeader, maxInt)},
		{"mbx-maxint-minus-one", h(BinanceUsedWeightHeader, strconv.FormatInt(math.MaxInt64-1, 10))},
		{"mbx-beyond-int64", h(BinanceUsedWeightHeader, "99999999999999999999999")},
		{"mbx-negative", h(BinanceUsedWeightHeader, "-9223372036854775808")},
		{"mbx-garbage", h(BinanceUsedWeightHeader, "lots")},
		{"mbx-10KB", h(BinanceUsedWeightHeader, huge)},
		{"mbx-twice", h(BinanceUsedWeightHeader, "0", BinanceUsedWeightHeader, maxInt)},
		{"mbx-orders-maxint", h(BinanceOrderCount10sHeader, maxInt, BinanceOrderCount1dHeader, maxInt)},
		{"xrl-limit-maxint", h("X-RateLimit-Limit", maxInt, "X-RateLimit-Remaining", "0")},
		{"xrl-remaining-negative", h("X-RateLimit-Limit", "100", "X-RateLimit-Remaining", "-9223372036854775808")},
		{"xrl-garbage", h("X-RateLimit-Limit", "many", "X-RateLimit-Remaining", "few", "X-RateLimit-Reset", "later")},
		{"xrl-10KB", h("X-RateLimit-Limit", huge, "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", huge)},
		{"xrl-reset-overflow", h("X-RateLimit-Limit", "100", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "10000000000")},
		{"xrl-github-epoch", h("X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "0", "X-RateLimit-Used", "5000", "X-RateLimit-Reset", "1790000000")},
		{"ietf-maxint", h("RateLimit", `"default";r=0;t=`+maxInt, "RateLimit-Policy", `"default";q=`+maxInt+`;w=60`)},
		{"ietf-negative", h("RateLimit", `"default";r=-1;t=-1`, "RateLimit-Policy", `"default";q=-1;w=-1`)},
		{"ietf-draft-old", h("RateLimit-Limit", maxInt, "RateLimit-Remaining", "0", "RateLimit-Reset", maxInt)},
		{"ietf-draft-one-field", h("RateLimit", "limit="+maxInt+", remaining=0, reset="+maxInt)},
		{"ietf-10KB", h("RateLimit", `"default";r=0;t=`+huge, "RateLimit-Policy", `"default";q=`+huge+`;w=60`)},
	}
}

// AbsurdRetryAfters returns Retry-After values for Hostile.RetryAfter that
// give a client no usable delay or an absurd one: absent (""), zero,
// negative, fractional, text, a number beyond int64, 10 KB of digits, a
// year of seconds, an HTTP-date long past and one in the year 9999. Each
// call returns a new slice.
func AbsurdRetryAfters() []string {
	return []string{
		"", "0", "-1", "1.5", "soon", "99999999999999999999999",
		strings.Repeat("9", 10<<10), "31536000",
		"Wed, 21 Oct 2015 07:28:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT",
	}
}
