package clientpool_test

import (
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/ratesem/ratesem/clientpool"
)

// hugeHeaders are responses whose rate-limit fields are 1 MB or 10 MB: a
// hostile or broken server. The old code allocated 398 MB to parse the 10 MB
// RateLimit-Policy.
func hugeHeaders() []struct {
	name  string
	h     http.Header
	parse func(http.Header)
} {
	ietf := func(h http.Header) { _, _ = clientpool.ParseRateLimitAt(h, "RateLimit-", "", now) }
	x := func(h http.Header) { _, _ = clientpool.ParseRateLimitAt(h, "X-RateLimit-", "", now) }
	binance := clientpool.BinanceUsage("X-MBX-USED-WEIGHT-1M")
	b := func(h http.Header) { _, _ = binance(h) }
	policy := func(n int) string { return strings.Repeat(`"p";q=1;w=60, `, n/14) }
	return []struct {
		name  string
		h     http.Header
		parse func(http.Header)
	}{
		{"RateLimit-Policy 1MB", hdr("RateLimit", `"d";r=1`, "RateLimit-Policy", policy(1<<20)), ietf},
		{"RateLimit-Policy 10MB", hdr("RateLimit", `"d";r=1`, "RateLimit-Policy", policy(10<<20)), ietf},
		{"RateLimit 10MB", hdr("RateLimit", policy(10<<20), "RateLimit-Policy", `"d";q=5`), ietf},
		{"RateLimit-Policy 10MB in 1KB lines", func() http.Header {
			h := hdr("RateLimit", `"d";r=1`)
			for range 10 << 10 {
				h.Add("RateLimit-Policy", policy(1<<10))
			}
			return h
		}(), ietf},
		{"X-RateLimit-Limit 10MB", hdr("X-RateLimit-Limit", strings.Repeat("9", 10<<20), "X-RateLimit-Remaining", "0"), x},
		{"X-RateLimit-Reset 10MB", hdr("X-RateLimit-Limit", "1", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", strings.Repeat("x", 10<<20)), x},
		{"X-MBX-USED-WEIGHT-1M 10MB", hdr("X-MBX-USED-WEIGHT-1M", strings.Repeat("9", 10<<20)), b},
	}
}

// A 1 MB or 10 MB field costs a bounded, small number of allocations and
// bytes: it is rejected on its length, before it is parsed.
func TestParseRateLimitHugeFieldBoundedAllocs(t *testing.T) {
	for _, tc := range hugeHeaders() {
		allocs := testing.AllocsPerRun(10, func() { tc.parse(tc.h) })
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		const runs = 10
		for range runs {
			tc.parse(tc.h)
		}
		runtime.ReadMemStats(&after)
		bytes := (after.TotalAlloc - before.TotalAlloc) / runs
		t.Logf("%s: %.0f allocs, %d B per parse", tc.name, allocs, bytes)
		if allocs > 32 || bytes > 4<<10 {
			t.Errorf("parsing %s: %.0f allocs, %d B per call; want ≤ 32 allocs and ≤ 4 KiB, whatever the size", tc.name, allocs, bytes)
		}
	}
}

func BenchmarkParseRateLimitHuge(b *testing.B) {
	for _, tc := range hugeHeaders() {
		b.Run(strings.ReplaceAll(tc.name, " ", "_"), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				tc.parse(tc.h)
			}
		})
	}
}

// The cost of the common, small headers, for comparison.
func BenchmarkParseRateLimit(b *testing.B) {
	for _, tc := range []struct {
		name   string
		h      http.Header
		prefix string
	}{
		{"X-RateLimit", hdr("X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "4999", "X-RateLimit-Reset", "1741965026"), "X-RateLimit-"},
		{"structured", hdr("RateLimit", `"default";r=50;t=30`, "RateLimit-Policy", `"burst";q=10;w=1, "default";q=100;w=60`), "RateLimit-"},
		{"draft07", hdr("RateLimit", "limit=100, remaining=50, reset=5"), "RateLimit-"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = clientpool.ParseRateLimitAt(tc.h, tc.prefix, "", now)
			}
		})
	}
}

// The worst a field within MaxFieldBytes can cost: a RateLimit-Policy of
// 8 KiB made of the shortest items ("a;q=1," × 1365), each of which the
// Structured Field parser allocates for, and one item with 4095 parameters.
func BenchmarkParseRateLimitWorstWithinBound(b *testing.B) {
	for _, tc := range []struct{ name, pol string }{
		{"1365_items", strings.Repeat("a;q=1,", clientpool.MaxFieldBytes/6)[:clientpool.MaxFieldBytes/6*6-1]},
		{"4095_parameters", "a" + strings.Repeat(";a", (clientpool.MaxFieldBytes-1)/2)},
	} {
		h := hdr("RateLimit", `"d";r=1`, "RateLimit-Policy", tc.pol)
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = clientpool.ParseRateLimitAt(h, "RateLimit-", "", now)
			}
		})
	}
}
