package win

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ratesem/ratesem"
)

// Limit is a rate limit of N units per Per: N calls per interval when every
// call has weight 1, or N weight units when calls carry weights (a Binance
// request of weight 20 spends 20 of its IP's 6000 units per minute).
//
// The zero Limit admits nothing but zero-weight calls. A Limit with N > 0
// and Per == 0 limits only how many units may be in flight at once (no rate).
// Negative fields are invalid; ParseLimit never returns them and the
// constructors in this package panic on them.
type Limit struct {
	// N is the number of units admitted per Per. It must be ≥ 0.
	N int64
	// Per is the length of the window, as a time.Duration. It must be ≥ 0.
	Per time.Duration
}

// ParseLimit parses a limit in the form people write in configuration files:
// a positive decimal count of units, a slash, and a positive Go duration,
// as in "10/2s", "6000/1m", "100/10s", "1/500ms" or "200000/24h". The
// duration may be a bare unit, so "10/s" means 10 per second. Surrounding
// white space is ignored.
//
// It returns an error that quotes the input and matches ratesem.ErrInvalidLimit
// (errors.Is) when the count is zero, negative, signed or not a number,
// when it overflows int64, when the duration is missing, not positive,
// lacks a unit or overflows time.Duration, or when the text is not of that
// form. ParseLimit(l.String()) == l for every Limit it returns.
func ParseLimit(s string) (Limit, error) {
	// The error reads "ratesem: invalid limit "10/2": <reason>".
	fail := func(format string, args ...any) (Limit, error) {
		return Limit{}, fmt.Errorf("%w %q: %s", ratesem.ErrInvalidLimit, s, fmt.Sprintf(format, args...))
	}
	count, per, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return fail(`want "N/duration", as in "10/2s"`)
	}
	count, per = strings.TrimSpace(count), strings.TrimSpace(per)
	if count == "" {
		return fail("missing count before '/'")
	}
	for _, c := range count {
		if c < '0' || c > '9' {
			return fail("count %q is not a non-negative decimal integer", count)
		}
	}
	n, err := strconv.ParseInt(count, 10, 64)
	if err != nil {
		return fail("count %q overflows int64", count)
	}
	if n == 0 {
		return fail("count must be positive")
	}
	if per == "" {
		return fail("missing duration after '/'")
	}
	if c := per[0]; c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == 0xc2 || c == 0xce {
		per = "1" + per // bare unit: "10/s" is 10 per second ("µs" starts with 0xc2 or 0xce)
	}
	d, err := time.ParseDuration(per)
	if err != nil {
		return fail("duration: %v", err)
	}
	if d <= 0 {
		return fail("duration must be positive")
	}
	return Limit{N: n, Per: d}, nil
}

// String formats l as ParseLimit reads it, with the duration in the largest
// whole unit: Limit{10, 2*time.Second} is "10/2s", Limit{6000, time.Minute}
// is "6000/1m", Limit{200000, 24*time.Hour} is "200000/24h".
func (l Limit) String() string {
	return strconv.FormatInt(l.N, 10) + "/" + formatDuration(l.Per)
}

// formatDuration writes d in the largest unit that divides it, so that
// "1m" stays "1m" rather than time.Duration's "1m0s".
func formatDuration(d time.Duration) string {
	units := []struct {
		size time.Duration
		name string
	}{
		{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"},
		{time.Millisecond, "ms"}, {time.Microsecond, "us"},
	}
	if d > 0 {
		for _, u := range units {
			if d%u.size == 0 {
				return strconv.FormatInt(int64(d/u.size), 10) + u.name
			}
		}
	}
	return d.String()
}

func (l Limit) check(pkgFunc string) {
	if l.N < 0 || l.Per < 0 {
		panic(fmt.Sprintf("ratesem: %s: negative limit %d per %v", pkgFunc, l.N, l.Per))
	}
}
