package clientpool_test

import (
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratesem/ratesem/clientpool"
)

// lines splits a fuzzed value on '\n' into header lines, so the fuzzer can
// try repeated fields.
func lines(v string) []string { return strings.Split(v, "\n") }

// checkInfo fails unless i is in range: counts and reset non-negative,
// Used in [0, Limit].
func checkInfo(t *testing.T, call string, i clientpool.RateLimitInfo, err error) {
	t.Helper()
	if err != nil {
		if !errors.Is(err, clientpool.ErrMalformed) {
			t.Fatalf("%s error %v does not match errMalformed", call, err)
		}
		if i != (clientpool.RateLimitInfo{}) {
			t.Fatalf("%s = %+v with error %v; want the zero info", call, i, err)
		}
		if len(err.Error()) > 1024 {
			t.Fatalf("%s error is %d bytes; want a short message: %s", call, len(err.Error()), err)
		}
		return
	}
	if i.Limit < 0 || i.Remaining < 0 || i.Reset < 0 {
		t.Fatalf("%s = %+v; want non-negative fields", call, i)
	}
	if u := i.Used(); u < 0 || u > i.Limit {
		t.Fatalf("%s = %+v, Used() = %d; want in [0, %d]", call, i, u, i.Limit)
	}
}

// FuzzParseRateLimit feeds ParseRateLimitAt and the X-RateLimit and IETF
// UsageFuncs arbitrary fields (a '\n' in a value makes several lines), at an
// arbitrary now.
func FuzzParseRateLimit(f *testing.F) {
	f.Add("100", "40", "30", "", "", "", int64(1741964966))
	f.Add("9223372036854775807", "0", "10000000000", "", "", "", int64(0))
	f.Add("100, 100;w=60", "7\n3", "1741964966.250", "", "", "", int64(1741964966))
	f.Add("", "", "", `"default";r=50;t=30`, `"burst";q=10;w=1`+"\n"+`"default";q=100;w=60`, "", int64(1741964966))
	f.Add("", "", "", `"a,b";r=2;t=3`, `"a,b";q=5`, "a,b", int64(0))
	f.Add("", "", "", "limit=100, remaining=50, reset=5", "", "", int64(0))
	f.Add("", "", "", `daily;r=10;t=999999999999999`, `burst;q=100;w=60,daily;q=1000`, "daily", int64(math.MinInt64))
	f.Add("-1", "+5", "1e3", `"a";r`, `"a";q=-5`, "", int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, limit, remaining, reset, rl, policyField, policy string, unix int64) {
		now := time.Unix(unix, 0)
		h := http.Header{}
		for _, f := range []struct{ name, v string }{
			{"X-RateLimit-Limit", limit}, {"X-RateLimit-Remaining", remaining}, {"X-RateLimit-Reset", reset},
			{"RateLimit-Limit", limit}, {"RateLimit-Remaining", remaining}, {"RateLimit-Reset", reset},
			{"RateLimit", rl}, {"RateLimit-Policy", policyField},
		} {
			if f.v != "" {
				for _, l := range lines(f.v) {
					h.Add(f.name, l)
				}
			}
		}
		for _, prefix := range []string{"X-RateLimit-", "RateLimit-"} {
			i, err := clientpool.ParseRateLimitAt(h, prefix, policy, now)
			checkInfo(t, "ParseRateLimitAt("+prefix+")", i, err)
		}
		for name, u := range map[string]clientpool.UsageFunc{
			`RateLimitUsage("X-RateLimit-", policy)`: clientpool.RateLimitUsage("X-RateLimit-", policy),
			`RateLimitUsage("RateLimit-", policy)`:   clientpool.RateLimitUsage("RateLimit-", policy),
		} {
			if used, ok := u(h); used < 0 || (!ok && used != 0) {
				t.Fatalf("%s(%v) = %d, %v; want used ≥ 0, and 0 when not ok", name, h, used, ok)
			}
		}
	})
}

// FuzzBinanceUsage feeds BinanceUsage arbitrary values ('\n' makes several
// lines): the result is never negative, and a plain count reads as itself.
func FuzzBinanceUsage(f *testing.F) {
	for _, v := range []string{"1234", "0", " 12\t", "9223372036854775807", "99999999999999999999", "5\n7", "-3", "+3", "1.5", "١٢", "", "5, 7"} {
		f.Add(v)
	}
	u := clientpool.BinanceUsage("X-MBX-USED-WEIGHT-1M")
	f.Fuzz(func(t *testing.T, v string) {
		h := http.Header{}
		for _, l := range lines(v) {
			h.Add("X-MBX-USED-WEIGHT-1M", l)
		}
		used, ok := u(h)
		if used < 0 || (!ok && used != 0) {
			t.Fatalf("BinanceUsage(%q) = %d, %v; want used ≥ 0, and 0 when not ok", v, used, ok)
		}
		if ok && !strings.ContainsAny(v, "\n") && len(v) <= 18 && strings.Trim(v, " \t0123456789") == "" && strings.Trim(v, " \t") != "" {
			// At most 18 digits: no saturation, the count reads as itself.
			var want int64
			for _, c := range strings.Trim(v, " \t") {
				want = want*10 + int64(c-'0')
			}
			if used != want {
				t.Fatalf("BinanceUsage(%q) = %d; want %d", v, used, want)
			}
		}
	})
}
