package httpclient_test

import (
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ratesem/ratesem/httpclient"
)

// FuzzParseRetryAfter: for any value and any now, ParseRetryAfter does not
// panic, returns a delay in [0, math.MaxInt64] (0 with an error), a short
// error, and reads plain delay-seconds as themselves.
func FuzzParseRetryAfter(f *testing.F) {
	for _, v := range []string{
		"120", "0", " 7 ", "9223372036", "9223372037", "99999999999999999999", "-5", "+5", "1.5", "soon", "",
		"١٢", "Fri, 14 Mar 2025 15:11:56 GMT", "Friday, 14-Mar-25 15:11:56 GMT", "Fri Mar 14 15:11:56 2025",
		"Fri, 14 Mar 2025 15:11:56 UTC", "Fri, 14 Mar 2025 15:11:56 EST", "Fri, 31 Dec 9999 23:59:59 GMT",
		"Sat, 01 Jan 0000 00:00:00 GMT",
	} {
		f.Add(v, fixedNow.Unix())
	}
	f.Add("Fri, 31 Dec 9999 23:59:59 GMT", int64(math.MinInt64))
	f.Add("Sat, 01 Jan 0000 00:00:00 GMT", int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, v string, unix int64) {
		d, err := httpclient.ParseRetryAfter(v, time.Unix(unix, 0))
		if d < 0 {
			t.Fatalf("ParseRetryAfter(%q) = %v; want ≥ 0", v, d)
		}
		if err != nil {
			if d != 0 || !strings.HasPrefix(err.Error(), "ratesem: ") || len(err.Error()) > 512 {
				t.Fatalf("ParseRetryAfter(%q) = %v, %.600q; want 0 and a short error prefixed httpclient: ", v, d, err)
			}
			return
		}
		if s := strings.TrimSpace(v); len(s) > 0 && len(s) <= 9 && strings.Trim(s, "0123456789") == "" {
			var n int64
			for _, c := range s {
				n = n*10 + int64(c-'0')
			}
			if d != time.Duration(n)*time.Second {
				t.Fatalf("ParseRetryAfter(%q) = %v; want %ds", v, d, n)
			}
		}
	})
}

// A 1 MB or 10 MB Retry-After costs time linear in its length and a bounded,
// small number of bytes, whatever it holds.
func TestParseRetryAfterHugeBoundedAllocs(t *testing.T) {
	for _, tc := range []struct {
		name, v string
	}{
		{"1MB digits", strings.Repeat("9", 1<<20)},
		{"10MB digits", strings.Repeat("9", 10<<20)},
		{"10MB zeros", strings.Repeat("0", 10<<20)},
		{"10MB negative", "-" + strings.Repeat("9", 10<<20)},
		{"1MB text", strings.Repeat("x", 1<<20)},
		{"10MB text", strings.Repeat("x", 10<<20)},
		{"10MB invalid UTF-8", strings.Repeat("\xff", 10<<20)},
		{"date + 10MB junk", "Fri, 14 Mar 2025 15:11:56 GMT" + strings.Repeat("x", 10<<20)},
	} {
		allocs := testing.AllocsPerRun(10, func() { _, _ = httpclient.ParseRetryAfter(tc.v, fixedNow) })
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		const runs = 10
		for range runs {
			_, _ = httpclient.ParseRetryAfter(tc.v, fixedNow)
		}
		runtime.ReadMemStats(&after)
		bytes := (after.TotalAlloc - before.TotalAlloc) / runs
		t.Logf("%s: %.0f allocs, %d B per call", tc.name, allocs, bytes)
		if allocs > 16 || bytes > 4<<10 {
			t.Errorf("ParseRetryAfter(%s): %.0f allocs, %d B per call; want ≤ 16 allocs and ≤ 4 KiB, whatever the size", tc.name, allocs, bytes)
		}
	}
}

func BenchmarkParseRetryAfter(b *testing.B) {
	for _, tc := range []struct{ name, v string }{
		{"seconds", "120"},
		{"date", "Fri, 14 Mar 2025 15:11:56 GMT"},
		{"soon", "soon"},
		{"10MB_digits", strings.Repeat("9", 10<<20)},
		{"10MB_text", strings.Repeat("x", 10<<20)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = httpclient.ParseRetryAfter(tc.v, fixedNow)
			}
		})
	}
}
