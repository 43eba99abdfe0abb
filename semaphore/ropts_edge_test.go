package semaphore

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/redistest"
)

// The Redis options' edge values are refused at construction, before any
// round trip: a lease that is not a whole number of microseconds or is
// longer than 2^40 µs (as documented), a negative or zero timeout, a
// negative jitter, a share outside (0, 1] (NaN and the infinities too).
func TestRedisOptionsEdgeValuesRefused(t *testing.T) {
	c := newClient(t, "127.0.0.1:1") // never dialled: the checks come first
	bad := map[string]Option{
		"lease 1ns":          WithLease(time.Nanosecond),
		"lease 2^40µs+1µs":   WithLease((1<<40 + 1) * time.Microsecond),
		"lease MaxInt64":     WithLease(math.MaxInt64),
		"lease MinInt64":     WithLease(math.MinInt64),
		"timeout -1":         WithRedisTimeout(-1),
		"timeout MinInt64":   WithRedisTimeout(math.MinInt64),
		"jitter MinInt64":    WithJitter(math.MinInt64),
		"fallback -0.5":      WithFallback(-0.5),
		"fallback NaN":       WithFallback(math.NaN()),
		"fallback +Inf":      WithFallback(math.Inf(1)),
		"fallback -Inf":      WithFallback(math.Inf(-1)),
		"fallback 1+epsilon": WithFallback(math.Nextafter(1, 2)),
		"fallback -0":        WithFallback(math.Copysign(0, -1)),
	}
	for name, o := range bad {
		s, err := redisNew(c, "x", 1, time.Second, o)
		if err == nil {
			_ = s.Close()
			t.Errorf("%s: accepted", name)
			continue
		}
		// refused for the option, not because Redis does not answer
		if errors.Is(err, ratesem.ErrUnavailable) {
			t.Errorf("%s: %v; want the option refused before any round trip", name, err)
		}
	}
}

// The largest values the Redis options accept work: a lease of 2^40 µs, a
// timeout and a jitter of math.MaxInt64 (no overflow of a deadline or a
// sleep), a share so small that the fallback keeps its floor of one unit.
func TestRedisOptionsHugeValuesWork(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	c := newClient(t, redistest.Start(t).Addr())
	s := newRedisSem(t, c, uniqueName(t), 2, time.Second,
		WithLease((1<<40)*time.Microsecond), WithRedisTimeout(math.MaxInt64),
		WithJitter(math.MaxInt64), WithFallback(math.SmallestNonzeroFloat64))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := s.Acquire(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if d, err := s.TryAcquireWait(1); d != 0 || !errors.Is(err, ratesem.ErrInFlight) {
		t.Fatalf("full: %v, %v; want ratesem.ErrInFlight", d, err)
	}
	s.Release(2)
	// the completion window: one interval from the release, jitter bounded by wait/10
	begin := time.Now()
	if err := s.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d > 1500*time.Millisecond {
		t.Fatalf("Acquire after the release took %v; want about 1s (jitter at most a tenth)", d)
	}
	s.Release(1)
}
