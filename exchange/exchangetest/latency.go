package exchangetest

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// FixedLatency returns a latency function for [OKXConfig.Latency] or
// [BinanceConfig.Latency] that always returns d. It is safe for concurrent
// use. A negative d is treated by the server as zero.
func FixedLatency(d time.Duration) func() time.Duration {
	return func() time.Duration { return d }
}

// uniformLatencySeed seeds every function returned by UniformLatency, so that
// a sequence of calls made in a fixed order is reproducible across runs.
const uniformLatencySeed = 0x6f6b78 // "okx"

// UniformLatency returns a latency function for [OKXConfig.Latency] or
// [BinanceConfig.Latency] whose results are drawn uniformly from the closed
// interval [min, max] (nanosecond resolution). The generator is seeded with
// a fixed seed, so the sequence of values is the same in every run; the
// order in which concurrent requests draw from it is up to the scheduler.
// The returned function is safe for concurrent use (it holds its own lock
// while drawing).
//
// UniformLatency panics if min < 0 or max < min.
func UniformLatency(min, max time.Duration) func() time.Duration {
	if min < 0 || max < min {
		panic(fmt.Sprintf("exchangetest: UniformLatency: need 0 <= min <= max, got min=%v max=%v", min, max))
	}
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(uniformLatencySeed, uniformLatencySeed))
	span := uint64(max-min) + 1 // max-min <= MaxInt64, so this cannot overflow
	return func() time.Duration {
		mu.Lock()
		n := r.Uint64N(span)
		mu.Unlock()
		return min + time.Duration(n)
	}
}
