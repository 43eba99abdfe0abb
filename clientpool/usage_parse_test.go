package clientpool_test

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratesem/ratesem/clientpool"
)

// now is the instant the parsing tables are read at: Fri, 14 Mar 2025
// 15:09:26 UTC, Unix 1741964966.
var now = time.Date(2025, 3, 14, 15, 9, 26, 0, time.UTC)

// epoch returns now+d as Unix seconds, the way GitHub writes X-RateLimit-Reset.
func epoch(d time.Duration) string { return strconv.FormatInt(now.Add(d).Unix(), 10) }

const maxDur = time.Duration(math.MaxInt64)

// parseCase is one row of the ParseRateLimitAt table: the header lines, the
// prefix and policy asked for, and the info wanted, or bad for an error
// matching errMalformed.
type parseCase struct {
	name   string
	h      http.Header
	prefix string
	policy string
	want   clientpool.RateLimitInfo
	bad    bool
}

// runParse checks ParseRateLimitAt at now against each case.
func runParse(t *testing.T, cases []parseCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Helper()
			got, err := clientpool.ParseRateLimitAt(tc.h, tc.prefix, tc.policy, now)
			if tc.bad {
				if !errors.Is(err, clientpool.ErrMalformed) {
					t.Fatalf("ParseRateLimitAt(%.200v, %q, %q) = %+v, %v; want errMalformed", tc.h, tc.prefix, tc.policy, got, err)
				}
				if got != (clientpool.RateLimitInfo{}) {
					t.Fatalf("ParseRateLimitAt(%.200v) = %+v with an error; want the zero info", tc.h, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseRateLimitAt(%.200v, %q, %q) = %+v, %v; want %+v", tc.h, tc.prefix, tc.policy, got, err, tc.want)
			}
		})
	}
}

type info = clientpool.RateLimitInfo

// X-RateLimit-* as GitHub, Twitter and others send it: counts, and a reset
// that is delta-seconds or a Unix epoch depending on the API.
func TestParseRateLimitX(t *testing.T) {
	x := "X-RateLimit-"
	lr := func(kv ...string) http.Header {
		return hdr(append([]string{"X-RateLimit-Limit", "100", "X-RateLimit-Remaining", "40"}, kv...)...)
	}
	runParse(t, []parseCase{
		{name: "absent", h: hdr(), prefix: x},
		{name: "no reset", h: lr(), prefix: x, want: info{Limit: 100, Remaining: 40}},
		{name: "delta reset", h: lr("X-RateLimit-Reset", "30"), prefix: x, want: info{100, 40, 30 * time.Second}},
		{name: "delta reset, whitespace", h: lr("X-RateLimit-Reset", " \t30 "), prefix: x, want: info{100, 40, 30 * time.Second}},
		// The old code read GitHub's epoch as 1741965026 s to wait: 55.2 years.
		{name: "GitHub epoch reset", h: lr("X-RateLimit-Reset", epoch(time.Minute)), prefix: x, want: info{100, 40, time.Minute}},
		{name: "epoch reset in the past", h: lr("X-RateLimit-Reset", epoch(-time.Hour)), prefix: x, want: info{100, 40, 0}},
		{name: "epoch reset now", h: lr("X-RateLimit-Reset", epoch(0)), prefix: x, want: info{100, 40, 0}},
		{name: "smallest epoch 1e9 (2001)", h: lr("X-RateLimit-Reset", "1000000000"), prefix: x, want: info{100, 40, 0}},
		// Below 1e9 is a delay: 999999999 s = 31.7 years, still a valid Duration.
		{name: "largest delay 1e9-1", h: lr("X-RateLimit-Reset", "999999999"), prefix: x, want: info{100, 40, 999999999 * time.Second}},
		// Discord: epoch seconds with a fraction, and a fractional delay.
		{name: "epoch with fraction", h: lr("X-RateLimit-Reset", epoch(0)+".250"), prefix: x, want: info{100, 40, 250 * time.Millisecond}},
		{name: "delay with fraction", h: lr("X-RateLimit-Reset", "0.5"), prefix: x, want: info{100, 40, 500 * time.Millisecond}},
		{name: "delay with nine fraction digits", h: lr("X-RateLimit-Reset", "1.000000001"), prefix: x, want: info{100, 40, time.Second + 1}},
		{name: "epoch milliseconds", h: lr("X-RateLimit-Reset", strconv.FormatInt(now.Add(1500*time.Millisecond).UnixMilli(), 10)), prefix: x, want: info{100, 40, 1500 * time.Millisecond}},
		// The old code multiplied 1e10 by 1e9 ns and wrapped to a negative Duration.
		// 1e10 is epoch seconds (the year 2286): 261 years from now, still < MaxInt64 ns.
		{name: "reset 1e10 does not wrap", h: lr("X-RateLimit-Reset", "10000000000"), prefix: x, want: info{100, 40, time.Unix(1e10, 0).Sub(now)}},
		{name: "reset MaxInt64 saturates", h: lr("X-RateLimit-Reset", "9223372036854775807"), prefix: x, want: info{100, 40, maxDur}},
		{name: "reset beyond int64 saturates", h: lr("X-RateLimit-Reset", "99999999999999999999999"), prefix: x, want: info{100, 40, maxDur}},
		{name: "reset 1 KB of digits saturates", h: lr("X-RateLimit-Reset", strings.Repeat("9", 1024)), prefix: x, want: info{100, 40, maxDur}},
		{name: "reset list takes the first", h: lr("X-RateLimit-Reset", "5, 7"), prefix: x, want: info{100, 40, 5 * time.Second}},
		{name: "reset negative", h: lr("X-RateLimit-Reset", "-5"), prefix: x, bad: true},
		{name: "reset plus", h: lr("X-RateLimit-Reset", "+5"), prefix: x, bad: true},
		{name: "reset soon", h: lr("X-RateLimit-Reset", "soon"), prefix: x, bad: true},
		{name: "reset empty", h: lr("X-RateLimit-Reset", ""), prefix: x, bad: true},
		{name: "reset unicode digits", h: lr("X-RateLimit-Reset", "١٢"), prefix: x, bad: true},
		{name: "reset trailing dot", h: lr("X-RateLimit-Reset", "5."), prefix: x, bad: true},
		{name: "reset ten fraction digits", h: lr("X-RateLimit-Reset", "5.0000000001"), prefix: x, bad: true},
		{name: "reset exponent", h: lr("X-RateLimit-Reset", "1e3"), prefix: x, bad: true},

		// Counts saturate; limit − remaining never wraps.
		{name: "limit MaxInt64, remaining 0", h: hdr("X-RateLimit-Limit", "9223372036854775807", "X-RateLimit-Remaining", "0"), prefix: x,
			want: info{Limit: math.MaxInt64, Remaining: 0}},
		{name: "limit beyond int64 saturates", h: hdr("X-RateLimit-Limit", "99999999999999999999", "X-RateLimit-Remaining", "1"), prefix: x,
			want: info{Limit: math.MaxInt64, Remaining: 1}},
		// The old code rejected this; a quota raised mid-window is plausible, and Used is then 0.
		{name: "remaining above limit", h: hdr("X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "11"), prefix: x, want: info{Limit: 10, Remaining: 11}},
		{name: "remaining repeated takes the smallest", h: hdr("X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "7", "X-RateLimit-Remaining", "3"), prefix: x,
			want: info{Limit: 10, Remaining: 3}},
		{name: "remaining list takes the smallest", h: hdr("X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "7, 3"), prefix: x, want: info{Limit: 10, Remaining: 3}},
		{name: "limit garbage", h: hdr("X-RateLimit-Limit", "lots", "X-RateLimit-Remaining", "4"), prefix: x, bad: true},
		{name: "limit negative", h: hdr("X-RateLimit-Limit", "-10", "X-RateLimit-Remaining", "4"), prefix: x, bad: true},
		{name: "limit plus", h: hdr("X-RateLimit-Limit", "+10", "X-RateLimit-Remaining", "4"), prefix: x, bad: true},
		{name: "limit fraction", h: hdr("X-RateLimit-Limit", "10.5", "X-RateLimit-Remaining", "4"), prefix: x, bad: true},
		{name: "remaining negative", h: hdr("X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "-1"), prefix: x, bad: true},
		{name: "remaining MinInt64", h: hdr("X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "-9223372036854775808"), prefix: x, bad: true},
		{name: "remaining missing", h: hdr("X-RateLimit-Limit", "10"), prefix: x, bad: true},
		{name: "limit missing", h: hdr("X-RateLimit-Remaining", "10"), prefix: x, bad: true},
	})
}

// The IETF draft's forms, newest first.
func TestParseRateLimitIETF(t *testing.T) {
	r := "RateLimit-"
	runParse(t, []parseCase{
		{name: "absent", h: hdr(), prefix: r},
		// draft-ietf-httpapi-ratelimit-headers-08 and later.
		{name: "structured", h: hdr("RateLimit", `"default";r=50;t=30`, "RateLimit-Policy", `"burst";q=10;w=1, "default";q=100;w=60`), prefix: r,
			want: info{Limit: 100, Remaining: 50, Reset: 30 * time.Second}},
		{name: "structured named", h: hdr("RateLimit", `"a";r=1, "b";r=7`, "RateLimit-Policy", `"a";q=5, "b";q=9`), prefix: r, policy: "b",
			want: info{Limit: 9, Remaining: 7}},
		// The old code read only the first line of RateLimit-Policy.
		{name: "policy split over two lines", h: hdr("RateLimit", `"default";r=50;t=30`, "RateLimit-Policy", `"burst";q=10;w=1`, "RateLimit-Policy", `"default";q=100;w=60`), prefix: r,
			want: info{Limit: 100, Remaining: 50, Reset: 30 * time.Second}},
		{name: "ratelimit split over two lines", h: hdr("RateLimit", `"a";r=1`, "RateLimit", `"b";r=7`, "RateLimit-Policy", `"a";q=5, "b";q=9`), prefix: r, policy: "b",
			want: info{Limit: 9, Remaining: 7}},
		// The old code split on every comma, inside quotes too.
		{name: "quoted name with a comma", h: hdr("RateLimit", `"a,b";r=2;t=3`, "RateLimit-Policy", `"x";q=1, "a,b";q=5`), prefix: r, policy: "a,b",
			want: info{Limit: 5, Remaining: 2, Reset: 3 * time.Second}},
		{name: "quoted name with a semicolon and escapes", h: hdr("RateLimit", `"a;\"b\"";r=2`, "RateLimit-Policy", `"a;\"b\"";q=5`), prefix: r,
			want: info{Limit: 5, Remaining: 2}},
		{name: "token names", h: hdr("RateLimit", `daily;r=10`, "RateLimit-Policy", `burst;q=100;w=60,daily;q=1000;w=86400`), prefix: r, policy: "daily",
			want: info{Limit: 1000, Remaining: 10}},
		{name: "mixed token and string", h: hdr("RateLimit", `daily;r=10`, "RateLimit-Policy", `burst;q=100;w=60,"daily";q=1000;w=86400`), prefix: r,
			want: info{Limit: 1000, Remaining: 10}},
		{name: "remaining above quota", h: hdr("RateLimit", `"d";r=9`, "RateLimit-Policy", `"d";q=5`), prefix: r, want: info{Limit: 5, Remaining: 9}},
		{name: "largest Integer", h: hdr("RateLimit", `"d";r=0;t=999999999999999`, "RateLimit-Policy", `"d";q=999999999999999`), prefix: r,
			want: info{Limit: 999999999999999, Remaining: 0, Reset: maxDur}},
		{name: "t as epoch seconds", h: hdr("RateLimit", `"d";r=1;t=`+epoch(time.Minute), "RateLimit-Policy", `"d";q=5`), prefix: r,
			want: info{Limit: 5, Remaining: 1, Reset: time.Minute}},
		{name: "unknown policy", h: hdr("RateLimit", `"a";r=1`, "RateLimit-Policy", `"b";q=5`), prefix: r, bad: true},
		{name: "unknown policy asked", h: hdr("RateLimit", `"a";r=1`, "RateLimit-Policy", `"a";q=5`), prefix: r, policy: "z", bad: true},
		{name: "no RateLimit-Policy", h: hdr("RateLimit", `"a";r=1`), prefix: r, bad: true},
		{name: "parameter without a value", h: hdr("RateLimit", `"a";r`, "RateLimit-Policy", `"a";q=5`), prefix: r, bad: true},
		{name: "r negative", h: hdr("RateLimit", `"a";r=-1`, "RateLimit-Policy", `"a";q=5`), prefix: r, bad: true},
		{name: "q negative", h: hdr("RateLimit", `"a";r=1`, "RateLimit-Policy", `"a";q=-5`), prefix: r, bad: true},
		{name: "q a string", h: hdr("RateLimit", `"a";r=1`, "RateLimit-Policy", `"a";q="5"`), prefix: r, bad: true},
		{name: "q a decimal", h: hdr("RateLimit", `"a";r=1`, "RateLimit-Policy", `"a";q=5.5`), prefix: r, bad: true},
		{name: "t negative", h: hdr("RateLimit", `"a";r=1;t=-3`, "RateLimit-Policy", `"a";q=5`), prefix: r, bad: true},
		{name: "r 16 digits", h: hdr("RateLimit", `"a";r=1000000000000000`, "RateLimit-Policy", `"a";q=5`), prefix: r, bad: true},
		{name: "unterminated string", h: hdr("RateLimit", `"a;r=1`, "RateLimit-Policy", `"a";q=5`), prefix: r, bad: true},
		{name: "policy garbage", h: hdr("RateLimit", `"a";r=1`, "RateLimit-Policy", `"a";q=5,,`), prefix: r, bad: true},

		// draft-ietf-httpapi-ratelimit-headers-07: a Dictionary. The old code rejected it.
		{name: "draft 07", h: hdr("RateLimit", "limit=100, remaining=50, reset=5"), prefix: r, want: info{Limit: 100, Remaining: 50, Reset: 5 * time.Second}},
		{name: "draft 07 with policy", h: hdr("RateLimit", "limit=10, remaining=1, reset=7", "RateLimit-Policy", "10;w=1, 50;w=60"), prefix: r,
			want: info{Limit: 10, Remaining: 1, Reset: 7 * time.Second}},
		{name: "draft 07 no reset", h: hdr("RateLimit", "limit=100, remaining=50"), prefix: r, want: info{Limit: 100, Remaining: 50}},
		{name: "draft 07 over two lines", h: hdr("RateLimit", "limit=100", "RateLimit", "remaining=50"), prefix: r, want: info{Limit: 100, Remaining: 50}},
		{name: "draft 07 no remaining", h: hdr("RateLimit", "limit=100, reset=5"), prefix: r, bad: true},
		{name: "draft 07 negative", h: hdr("RateLimit", "limit=100, remaining=-1"), prefix: r, bad: true},
		{name: "draft 07 inner list", h: hdr("RateLimit", "limit=(1 2), remaining=1"), prefix: r, bad: true},
		{name: "neither list nor dictionary", h: hdr("RateLimit", "limit=100 remaining=50"), prefix: r, bad: true},

		// drafts 00 to 06: separate fields.
		{name: "draft list limit", h: hdr("RateLimit-Limit", "100, 100;w=60", "RateLimit-Remaining", "99", "RateLimit-Reset", "50"), prefix: r,
			want: info{Limit: 100, Remaining: 99, Reset: 50 * time.Second}},
		{name: "draft limit with parameters", h: hdr("RateLimit-Limit", "100;w=60", "RateLimit-Remaining", "0"), prefix: r, want: info{Limit: 100}},
		{name: "draft negative", h: hdr("RateLimit-Limit", "100", "RateLimit-Remaining", "-1"), prefix: r, bad: true},
	})
}

// A field longer than MaxFieldBytes is rejected before it is parsed; one of
// exactly MaxFieldBytes is read.
func TestParseRateLimitSizeBound(t *testing.T) {
	r, x := "RateLimit-", "X-RateLimit-"
	pad := func(v string, n int) string { return v + strings.Repeat(" ", n-len(v)) }
	pol := `"d";q=5`
	runParse(t, []parseCase{
		{name: "policy at the bound", h: hdr("RateLimit", `"d";r=1`, "RateLimit-Policy", pad(pol, clientpool.MaxFieldBytes)), prefix: r,
			want: info{Limit: 5, Remaining: 1}},
		{name: "policy one byte over", h: hdr("RateLimit", `"d";r=1`, "RateLimit-Policy", pad(pol, clientpool.MaxFieldBytes+1)), prefix: r, bad: true},
		{name: "policy 10 MB", h: hdr("RateLimit", `"d";r=1`, "RateLimit-Policy", pad(pol, 10<<20)), prefix: r, bad: true},
		// Two lines joined by ", " count with their separator.
		{name: "policy lines over the bound together", h: hdr("RateLimit", `"d";r=1`, "RateLimit-Policy", pad(pol, clientpool.MaxFieldBytes/2),
			"RateLimit-Policy", pad(`"e";q=1`, clientpool.MaxFieldBytes/2)), prefix: r, bad: true},
		{name: "ratelimit 1 MB", h: hdr("RateLimit", pad(`"d";r=1`, 1<<20), "RateLimit-Policy", pol), prefix: r, bad: true},
		{name: "many short lines", h: func() http.Header {
			h := hdr("RateLimit", `"d";r=1`)
			h["Ratelimit-Policy"] = make([]string, 10000)
			for i := range h["Ratelimit-Policy"] {
				h["Ratelimit-Policy"][i] = pol
			}
			return h
		}(), prefix: r, bad: true},
		{name: "limit 1 MB of digits", h: hdr("X-RateLimit-Limit", strings.Repeat("9", 1<<20), "X-RateLimit-Remaining", "0"), prefix: x, bad: true},
		{name: "reset 10 MB", h: hdr("X-RateLimit-Limit", "1", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", strings.Repeat("9", 10<<20)), prefix: x, bad: true},
	})
}

// Used is limit − remaining saturated to [0, Limit], whatever the fields.
func TestRateLimitInfoUsed(t *testing.T) {
	for _, tc := range []struct {
		i    info
		want int64
	}{
		{info{Limit: 100, Remaining: 40}, 60},
		{info{Limit: 100, Remaining: 100}, 0},
		{info{Limit: 10, Remaining: 11}, 0},                                   // remaining above limit: nothing spent
		{info{Limit: math.MaxInt64, Remaining: 0}, math.MaxInt64},             // saturated; the pool clamps to its rule
		{info{Limit: math.MaxInt64, Remaining: -1}, math.MaxInt64},            // would wrap to MinInt64
		{info{Limit: 5, Remaining: math.MinInt64}, 5},                         // would wrap negative
		{info{Limit: -5, Remaining: 0}, 0},                                    // no quota
		{info{Limit: math.MinInt64, Remaining: math.MaxInt64}, 0},             // would wrap to 1
		{info{Limit: math.MaxInt64, Remaining: math.MaxInt64 - 1}, 1},         // exact at the top
		{info{Limit: math.MaxInt64, Remaining: math.MinInt64}, math.MaxInt64}, // would wrap to -1
	} {
		if got := tc.i.Used(); got != tc.want {
			t.Errorf("%+v.Used() = %d, want %d", tc.i, got, tc.want)
		}
	}
}

// usageCase is one row of a UsageFunc table: the header lines and the used
// units wanted, or !ok for "not said".
type usageCase struct {
	name string
	h    http.Header
	used int64
	ok   bool
}

func runUsage(t *testing.T, fname string, u clientpool.UsageFunc, cases []usageCase) {
	t.Helper()
	for _, tc := range cases {
		used, ok := u(tc.h)
		if used != tc.used || ok != tc.ok {
			t.Errorf("%s: %s(%.80v) = %d, %v; want %d, %v", tc.name, fname, tc.h, used, ok, tc.used, tc.ok)
		}
	}
}

func TestBinanceUsage(t *testing.T) {
	n := "X-MBX-USED-WEIGHT-1M"
	runUsage(t, "BinanceUsage", clientpool.BinanceUsage(n), []usageCase{
		{"count", hdr(n, "1234"), 1234, true},
		{"any case", hdr("X-Mbx-Used-Weight-1m", "1234"), 1234, true},
		{"zero", hdr(n, "0"), 0, true},
		{"whitespace", hdr(n, " 12\t"), 12, true},
		// Saturated, not wrapped: the pool clamps what it consumes to the rule's limit.
		{"MaxInt64", hdr(n, "9223372036854775807"), math.MaxInt64, true},
		{"beyond int64 saturates", hdr(n, "99999999999999999999"), math.MaxInt64, true},
		{"repeated takes the largest", hdr(n, "5", n, "7", n, "6"), 7, true},
		{"absent", hdr(), 0, false},
		{"empty", hdr(n, ""), 0, false},
		{"garbage", hdr(n, "x"), 0, false},
		{"negative", hdr(n, "-3"), 0, false},
		{"MinInt64", hdr(n, "-9223372036854775808"), 0, false},
		{"plus", hdr(n, "+3"), 0, false},
		{"fraction", hdr(n, "1.5"), 0, false},
		{"unicode digits", hdr(n, "١٢"), 0, false},
		{"list", hdr(n, "5, 7"), 0, false},
		{"one bad line", hdr(n, "5", n, "x"), 0, false},
		{"10 MB of digits", hdr(n, strings.Repeat("9", 10<<20)), 0, false},
	})
}

func TestRateLimitUsageX(t *testing.T) {
	l, r := "X-RateLimit-Limit", "X-RateLimit-Remaining"
	runUsage(t, `RateLimitUsage("X-RateLimit-", "")`, clientpool.RateLimitUsage("X-RateLimit-", ""), []usageCase{
		{"used", hdr(l, "100", r, "40"), 60, true},
		{"GitHub epoch reset", hdr(l, "5000", r, "4999", "X-RateLimit-Reset", "1741965026"), 1, true},
		// The old code returned MaxInt64 here too; the pool clamps it to the rule's limit.
		{"limit MaxInt64, remaining 0", hdr(l, "9223372036854775807", r, "0"), math.MaxInt64, true},
		{"remaining above limit", hdr(l, "10", r, "11"), 0, true},
		{"zero limit", hdr(l, "0", r, "0"), 0, false},
		{"absent", hdr(), 0, false},
		{"negative remaining", hdr(l, "10", r, "-1"), 0, false},
		{"bad reset", hdr(l, "10", r, "1", "X-RateLimit-Reset", "soon"), 0, false},
	})
}

func TestRateLimitUsageIETF(t *testing.T) {
	runUsage(t, `RateLimitUsage("RateLimit-", "")`, clientpool.RateLimitUsage("RateLimit-", ""), []usageCase{
		{"structured", hdr("RateLimit", `"d";r=3`, "RateLimit-Policy", `"d";q=5`), 2, true},
		{"draft 07", hdr("RateLimit", "limit=100, remaining=50, reset=5"), 50, true},
		{"draft 06", hdr("RateLimit-Limit", "10", "RateLimit-Remaining", "4"), 6, true},
		{"remaining above quota", hdr("RateLimit", `"d";r=9`, "RateLimit-Policy", `"d";q=5`), 0, true},
		{"absent", hdr(), 0, false},
		{"malformed", hdr("RateLimit", `"d";r=-3`, "RateLimit-Policy", `"d";q=5`), 0, false},
		{"10 MB policy", hdr("RateLimit", `"d";r=3`, "RateLimit-Policy", `"d";q=5`+strings.Repeat(" ", 10<<20)), 0, false},
	})
	runUsage(t, `RateLimitUsage("RateLimit-", "a,b")`, clientpool.RateLimitUsage("RateLimit-", "a,b"), []usageCase{
		{"quoted name with a comma", hdr("RateLimit", `"x";r=0, "a,b";r=1`, "RateLimit-Policy", `"x";q=1`, "RateLimit-Policy", `"a,b";q=5`), 4, true},
	})
}

// ParseRateLimit measures the reset from the machine's clock; the
// explicit-time variant from its argument.
func TestParseRateLimitNow(t *testing.T) {
	h := hdr("X-RateLimit-Limit", "1", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10))
	got, err := clientpool.ParseRateLimit(h, "X-RateLimit-", "")
	if err != nil || got.Reset <= 59*time.Minute || got.Reset > time.Hour {
		t.Fatalf("ParseRateLimit(reset in an hour) = %+v, %v; want a Reset of about an hour", got, err)
	}
	at := time.Unix(0, 0).Add(50 * 365 * 24 * time.Hour)
	got, err = clientpool.ParseRateLimitAt(hdr("X-RateLimit-Limit", "1", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", strconv.FormatInt(at.Add(time.Minute).Unix(), 10)), "X-RateLimit-", "", at)
	if err != nil || got.Reset != time.Minute {
		t.Fatalf("ParseRateLimitAt(reset at+1m, at) = %+v, %v; want Reset 1m", got, err)
	}
}
