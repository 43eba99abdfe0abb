package accuracy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Latency is a distribution of round-trip latency: the time from a call's
// start (Acquire returned) to its response, the two one-way trips together
// (see the package documentation for the split).
type Latency struct {
	// Name labels the distribution in tables and charts, e.g. "uniform 10–30 ms".
	Name string

	// Desc describes the distribution in full for captions.
	Desc string

	// Margin is the start-window margin chosen for this distribution: the
	// spread of the outbound one-way trip, max − min, or for an unbounded
	// distribution the spread up to the percentile MarginNote states.
	Margin time.Duration

	// MarginNote says how Margin was chosen, e.g. "max − min".
	MarginNote string

	// Sample draws one round-trip latency (≥ 0) from r.
	Sample func(r *rand.Rand) time.Duration
}

// Fixed returns the distribution whose every round trip takes d. Both one-way
// trips take d/2, so Margin is 0.
func Fixed(d time.Duration) Latency {
	return Latency{
		Name:       "fixed " + ms(d),
		Desc:       "every round trip takes " + ms(d),
		Margin:     0,
		MarginNote: "max − min",
		Sample:     func(*rand.Rand) time.Duration { return d },
	}
}

// Uniform returns round trips drawn uniformly from [lo, hi] (nanosecond
// resolution). The outbound trip lies in [lo/2, hi/2], so Margin is
// hi/2 − lo/2. It panics unless 0 ≤ lo ≤ hi.
func Uniform(lo, hi time.Duration) Latency {
	if lo < 0 || hi < lo {
		panic(fmt.Sprintf("accuracy: Uniform(%v, %v): need 0 ≤ lo ≤ hi", lo, hi))
	}
	return Latency{
		Name:       fmt.Sprintf("uniform %s–%s", strings.TrimSuffix(ms(lo), " ms"), ms(hi)),
		Desc:       fmt.Sprintf("round trips uniform in [%s, %s]", ms(lo), ms(hi)),
		Margin:     hi/2 - lo/2,
		MarginNote: "max − min",
		Sample: func(r *rand.Rand) time.Duration {
			return lo + time.Duration(r.Uint64N(uint64(hi-lo)+1))
		},
	}
}

// z99 is the 99th percentile of the standard normal distribution.
const z99 = 2.3263478740408408

// HeavyTail returns a shifted, capped log-normal distribution of round trips:
// floor + X, X log-normal with median median and shape sigma (the standard
// deviation of ln X), capped at limit. The median round trip is
// floor + median. Margin is the spread of the outbound trip from its minimum
// (floor/2) to its 99th percentile ((floor + median·e^(2.326·sigma))/2,
// below the cap): about 1% of calls travel out slower than that. It panics
// on negative durations, sigma < 0 or limit < floor.
func HeavyTail(floor, median time.Duration, sigma float64, limit time.Duration) Latency {
	if floor < 0 || median < 0 || sigma < 0 || limit < floor {
		panic(fmt.Sprintf("accuracy: HeavyTail(%v, %v, %v, %v): invalid parameters", floor, median, sigma, limit))
	}
	p99 := min(floor+time.Duration(float64(median)*math.Exp(sigma*z99)), limit)
	return Latency{
		Name:       "heavy tail, median " + ms(floor+median),
		Desc:       fmt.Sprintf("round trips %s + log-normal (median %s, σ = %g), capped at %s", ms(floor), ms(median), sigma, ms(limit)),
		Margin:     p99/2 - floor/2,
		MarginNote: "p99 − min",
		Sample: func(r *rand.Rand) time.Duration {
			x := float64(median) * math.Exp(sigma*r.NormFloat64())
			if x > float64(limit-floor) {
				return limit
			}
			return floor + time.Duration(x)
		},
	}
}

// Latencies returns the three distributions of the report: fixed 20 ms,
// uniform 10–30 ms, and a heavy tail with median 20 ms (10 ms floor +
// log-normal with median 10 ms and σ = 1, capped at 200 ms; mean about
// 26.5 ms, p99 about 112 ms).
func Latencies() []Latency {
	return []Latency{
		Fixed(20 * time.Millisecond),
		Uniform(10*time.Millisecond, 30*time.Millisecond),
		HeavyTail(10*time.Millisecond, 10*time.Millisecond, 1, 200*time.Millisecond),
	}
}

// split returns the outbound and return trips of a round trip of l.
func split(l time.Duration) (out, back time.Duration) {
	out = l / 2
	return out, l - out
}

// ms formats d in milliseconds, e.g. "20 ms" or "2.5 ms".
func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', -1, 64) + " ms"
}
