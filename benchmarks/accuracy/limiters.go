package accuracy

import (
	"context"
	"fmt"
	"time"

	xsem "golang.org/x/sync/semaphore"
	"golang.org/x/time/rate"

	"go.uber.org/ratelimit"

	"github.com/ratesem/ratesem/semaphore"
	"github.com/ratesem/ratesem/window"
)

// Limiter is the one interface every limiter under test is put behind.
type Limiter interface {
	// Acquire blocks until the limiter lets one call start, or ctx is done
	// (then it returns ctx's error, or the limiter's own). On success the
	// caller must call release exactly once, when the call's response is
	// back.
	Acquire(ctx context.Context) (release func(), err error)
}

// LimiterFunc adapts a function to the Limiter interface.
type LimiterFunc func(ctx context.Context) (release func(), err error)

// Acquire calls f(ctx).
func (f LimiterFunc) Acquire(ctx context.Context) (func(), error) { return f(ctx) }

// Peer is one row of the report: a named way to build a limiter for the
// limit N per T.
type Peer struct {
	// Name labels the row, e.g. "x/time/rate, burst N".
	Name string

	// Note says in one line how the limiter is built and used.
	Note string

	// UsesMargin is true when the limiter is built with the latency
	// distribution's Margin (the start window), so tables show it.
	UsesMargin bool

	// New builds a fresh limiter for cfg.N per cfg.Per under the latency
	// distribution lat. Run calls it once per run, on the goroutine that
	// calls Run (inside the synctest bubble in tests).
	New func(cfg Config, lat Latency) Limiter
}

func noop() {}

// rateSem puts a RateSemaphore behind Limiter: Acquire(ctx, 1) before the
// call, Release(1) when the response is back.
func rateSem(s *semaphore.RateSemaphore) Limiter {
	release := func() { s.Release(1) }
	return LimiterFunc(func(ctx context.Context) (func(), error) {
		if err := s.Acquire(ctx, 1); err != nil {
			return nil, err
		}
		return release, nil
	})
}

// CompletionWindow is ratesem's default: semaphore.New(N, T).
func CompletionWindow() Peer {
	return Peer{
		Name: "ratesem completion window",
		Note: "semaphore.New(N, T); Acquire(ctx, 1) before the call, Release(1) when the response is back",
		New: func(cfg Config, _ Latency) Limiter {
			return rateSem(semaphore.New(int64(cfg.N), cfg.Per))
		},
	}
}

// StartWindow is ratesem's start window with the latency distribution's
// margin: semaphore.New(N, T, semaphore.WithStartWindow(lat.Margin)).
func StartWindow() Peer {
	return Peer{
		Name:       "ratesem start window",
		Note:       "semaphore.New(N, T, semaphore.WithStartWindow(m)), m = the outbound trip's spread (see the latency's note)",
		UsesMargin: true,
		New: func(cfg Config, lat Latency) Limiter {
			return rateSem(semaphore.New(int64(cfg.N), cfg.Per, semaphore.WithStartWindow(lat.Margin)))
		},
	}
}

// SleepInPermit is the pattern `async with sem: call(); sleep(T)`: an
// x/sync semaphore.NewWeighted(N), held across the call and a sleep of T
// after the response.
func SleepInPermit() Peer {
	return Peer{
		Name: "x/sync semaphore + sleep T in permit",
		Note: "semaphore.NewWeighted(N); Acquire, call, time.Sleep(T), Release",
		New: func(cfg Config, _ Latency) Limiter {
			s := xsem.NewWeighted(int64(cfg.N))
			release := func() {
				time.Sleep(cfg.Per)
				s.Release(1)
			}
			return LimiterFunc(func(ctx context.Context) (func(), error) {
				if err := s.Acquire(ctx, 1); err != nil {
					return nil, err
				}
				return release, nil
			})
		},
	}
}

// TokenBucket is x/time/rate at N/T with the given burst, 0 meaning N:
// rate.NewLimiter(rate.Limit(N/T.Seconds()), burst); Wait, then call. It
// panics if burst is negative.
func TokenBucket(burst int) Peer {
	if burst < 0 {
		panic(fmt.Sprintf("accuracy: TokenBucket(%d): negative burst", burst))
	}
	b := "N"
	if burst > 0 {
		b = fmt.Sprint(burst)
	}
	return Peer{
		Name: "x/time/rate, burst " + b,
		Note: "rate.NewLimiter(rate.Limit(N/T.Seconds()), " + b + "); Wait(ctx), then call",
		New: func(cfg Config, _ Latency) Limiter {
			bb := burst
			if bb == 0 {
				bb = cfg.N
			}
			l := rate.NewLimiter(rate.Limit(float64(cfg.N)/cfg.Per.Seconds()), bb)
			return LimiterFunc(func(ctx context.Context) (func(), error) {
				if err := l.Wait(ctx); err != nil {
					return nil, err
				}
				return noop, nil
			})
		},
	}
}

// Uber is go.uber.org/ratelimit at N per T: Take, then call. With slack false
// it adds ratelimit.WithoutSlack; otherwise the default slack (10) applies.
func Uber(slack bool) Peer {
	p := Peer{
		Name: "uber ratelimit (slack 10)",
		Note: "ratelimit.New(N, ratelimit.Per(T)); Take(), then call",
	}
	opts := []ratelimit.Option(nil)
	if !slack {
		p.Name = "uber ratelimit, WithoutSlack"
		p.Note = "ratelimit.New(N, ratelimit.Per(T), ratelimit.WithoutSlack); Take(), then call"
		opts = append(opts, ratelimit.WithoutSlack)
	}
	p.New = func(cfg Config, _ Latency) Limiter {
		l := ratelimit.New(cfg.N, append([]ratelimit.Option{ratelimit.Per(cfg.Per)}, opts...)...)
		return LimiterFunc(func(context.Context) (func(), error) {
			l.Take()
			return noop, nil
		})
	}
	return p
}

// GCRA is ratesem's GCRA (a token bucket with burst N) as the policy of a
// RateSemaphore, which also caps the calls in flight at N:
// semaphore.NewWithPolicy(window.NewGCRA(window.Limit{N: N, Per: T}, 0)).
func GCRA() Peer {
	return Peer{
		Name: "ratesem GCRA policy, burst N",
		Note: "semaphore.NewWithPolicy(window.NewGCRA(window.Limit{N: N, Per: T}, 0)) (burst 0 means N); Acquire(ctx, 1) before the call, Release(1) when the response is back",
		New: func(cfg Config, _ Latency) Limiter {
			l := window.Limit{N: int64(cfg.N), Per: cfg.Per}
			return rateSem(semaphore.NewWithPolicy(window.NewGCRA(l, 0)))
		},
	}
}

// Peers returns the rows of the report, in order.
func Peers() []Peer {
	return []Peer{
		CompletionWindow(),
		StartWindow(),
		SleepInPermit(),
		TokenBucket(0),
		TokenBucket(1),
		Uber(true),
		Uber(false),
		GCRA(),
	}
}
