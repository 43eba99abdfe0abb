package benchmarks

// Micro-benchmarks of ratesem against its peers, side by side in one run.
//
//	go test -run XXX -bench . -count 5 -benchmem
//
// Two groups:
//
//   - BenchmarkAcquireRelease: one admitted call through a semaphore-style
//     API (Acquire, then Release), serial and parallel. Every limit is set so
//     that it never binds, so what is measured is the bookkeeping of an
//     admitted call, never a wait.
//   - BenchmarkAllowN: one allow-style decision with an explicit instant
//     (window.Limiter.AllowN against x/time/rate's AllowN), serial and
//     parallel; and the pacer against go.uber.org/ratelimit's Take.
//
// BenchmarkHotPath is the performance target of issue 11: the completion
// window's admitted Acquire+Release against the floor (x/sync's Weighted and
// one time.Since read), the contenders alternating in blocks of calls.
//
// BenchmarkClock gives the cost of reading the clock for reference: every
// rate limiter that reads the clock pays it once per call.

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/ratelimit"
	xsem "golang.org/x/sync/semaphore"
	"golang.org/x/time/rate"

	"github.com/ratesem/ratesem/semaphore"
	"github.com/ratesem/ratesem/window"
)

// acquirer is what every semaphore-style limiter under test offers. Peers
// without a release (a rate limiter alone) release nothing.
type acquirer interface {
	Acquire(ctx context.Context, n int64) error
	Release(n int64)
}

// chanSem is the buffered-channel semaphore people write by hand.
type chanSem chan struct{}

func (c chanSem) Acquire(ctx context.Context, _ int64) error {
	select {
	case c <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (c chanSem) Release(int64) { <-c }

// xtimeWait is x/time/rate's blocking API: Wait(ctx) reads time.Now.
type xtimeWait struct{ l *rate.Limiter }

func (x xtimeWait) Acquire(ctx context.Context, _ int64) error { return x.l.Wait(ctx) }
func (xtimeWait) Release(int64)                                {}

// xtimeAllow is x/time/rate's Allow(), which reads time.Now: the decision a
// caller makes before a call when it drops calls instead of waiting.
type xtimeAllow struct{ l *rate.Limiter }

func (x xtimeAllow) Acquire(context.Context, int64) error {
	if !x.l.Allow() {
		return errRefused
	}
	return nil
}
func (xtimeAllow) Release(int64) {}

// weightedRate is how a user composes a concurrency cap and a rate with the
// usual tools: Acquire the semaphore, Wait on the limiter, call, Release.
type weightedRate struct {
	w *xsem.Weighted
	l *rate.Limiter
}

func (x weightedRate) Acquire(ctx context.Context, n int64) error {
	if err := x.w.Acquire(ctx, n); err != nil {
		return err
	}
	if err := x.l.WaitN(ctx, int(n)); err != nil {
		x.w.Release(n)
		return err
	}
	return nil
}
func (x weightedRate) Release(n int64) { x.w.Release(n) }

// weightedSince is the floor of any rate-limited semaphore: x/sync's
// Weighted Acquire+Release plus one read of the monotonic clock (time.Since
// of a fixed instant), the least a limiter that counts time must add.
// The reading is compared so that it is used; it is never negative.
type weightedSince struct {
	w     *xsem.Weighted
	epoch time.Time
}

func (x weightedSince) Acquire(ctx context.Context, n int64) error { return x.w.Acquire(ctx, n) }
func (x weightedSince) Release(n int64) {
	if time.Since(x.epoch) < 0 {
		panic("the monotonic clock went back")
	}
	x.w.Release(n)
}

// uberTake is go.uber.org/ratelimit's Take: a pacer with no release.
type uberTake struct{ l ratelimit.Limiter }

func (u uberTake) Acquire(context.Context, int64) error { u.l.Take(); return nil }
func (uberTake) Release(int64)                          {}

type refusedError struct{}

func (refusedError) Error() string {
	return "refused: the limit was reached, which the benchmark never expects"
}

var errRefused error = refusedError{}

const (
	// huge is a count of units that no benchmark reaches.
	huge = 1 << 50
	// xtimeHuge is a finite rate for x/time/rate that never binds. rate.Inf
	// would skip the token arithmetic altogether (reserveN returns at once),
	// so a huge finite limit and burst are used: x/time/rate then advances
	// its bucket in float64 on every call, the work a real limit costs.
	xtimeHuge = rate.Limit(1e15)
)

// unbound is a limit that never binds for the windows whose state does not
// grow with the rate: 2^50 units per second.
var unbound = window.Limit{N: huge, Per: time.Second}

// logPer is the window of the two logs (completion and start windows). Their
// memory is one 16-byte entry per distinct instant in the last Per, so with
// Per = 1 s and a call every ~60 ns the ring would hold ~16 M entries
// (256 MB); 1 ms keeps it at ~16 k entries, already far more than a real
// limit (N entries at most) ever holds.
const logPer = time.Millisecond

type semCase struct {
	name string
	mk   func() acquirer
	// stats, for the ratesem semaphores, to check afterwards that no call
	// waited: a wait would mean the benchmark measured a timer, not the
	// admitted path.
	stats func(acquirer) (semaphore.Stats, bool)
}

func rsStats(a acquirer) (semaphore.Stats, bool) {
	return a.(*semaphore.RateSemaphore).Stats(), true
}

func policySem(p func() window.Policy) func() acquirer {
	return func() acquirer { return semaphore.NewWithPolicy(p()) }
}

func semCases() []semCase {
	return []semCase{
		{name: "xsync-Weighted", mk: func() acquirer { return xsem.NewWeighted(huge) }},
		{name: "floor-Weighted+Since", mk: func() acquirer { return weightedSince{xsem.NewWeighted(huge), time.Now()} }},
		{name: "chan", mk: func() acquirer { return make(chanSem, 1<<10) }},
		{name: "ratesem-norate", mk: func() acquirer { return semaphore.New(huge, 0) }, stats: rsStats},
		{name: "ratesem-completion", mk: func() acquirer { return semaphore.New(huge, logPer) }, stats: rsStats},
		{name: "ratesem-start", mk: func() acquirer {
			return semaphore.New(huge, logPer, semaphore.WithStartWindow(time.Millisecond))
		}, stats: rsStats},
		{name: "ratesem-fixed", mk: policySem(func() window.Policy { return window.NewFixedWindow(unbound) }), stats: rsStats},
		{name: "ratesem-slidingcounter", mk: policySem(func() window.Policy { return window.NewSlidingWindowCounter(unbound) }), stats: rsStats},
		{name: "ratesem-subwindow", mk: policySem(func() window.Policy { return window.NewSubWindowCounter(unbound, 10) }), stats: rsStats},
		{name: "ratesem-tokenbucket", mk: policySem(func() window.Policy { return window.NewTokenBucket(unbound, 0) }), stats: rsStats},
		{name: "ratesem-leakybucket", mk: policySem(func() window.Policy { return window.NewLeakyBucket(unbound, 0) }), stats: rsStats},
		{name: "ratesem-gcra", mk: policySem(func() window.Policy { return window.NewGCRA(unbound, 0) }), stats: rsStats},
		// The pacer spaces calls Per/N apart: 2^50 per second is 1 ns, less
		// than the time between two clock reads under the semaphore's mutex,
		// so it never waits (checked after the loop).
		{name: "ratesem-pacer", mk: policySem(func() window.Policy { return window.NewPacer(unbound) }), stats: rsStats},
		{name: "xtime-Wait", mk: func() acquirer { return xtimeWait{rate.NewLimiter(xtimeHuge, huge)} }},
		{name: "xtime-Allow", mk: func() acquirer { return xtimeAllow{rate.NewLimiter(xtimeHuge, huge)} }},
		{name: "xsync-Weighted+xtime-Wait", mk: func() acquirer {
			return weightedRate{xsem.NewWeighted(huge), rate.NewLimiter(xtimeHuge, huge)}
		}},
		// 1e9 per second is uber's smallest interval, 1 ns per call (it
		// truncates per/rate); without slack, as ratesem's pacer.
		{name: "uber-Take", mk: func() acquirer {
			return uberTake{ratelimit.New(1e9, ratelimit.WithoutSlack)}
		}},
	}
}

func checkNoWait(b *testing.B, c semCase, s acquirer) {
	if c.stats == nil {
		return
	}
	st, _ := c.stats(s)
	if st.MaxWait > 0 || st.InFlight != 0 {
		b.Fatalf("%s: a call waited (max wait %v) or units are still held (%d): the limit bound", c.name, st.MaxWait, st.InFlight)
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		for _, c := range semCases() {
			b.Run(c.name, func(b *testing.B) {
				s := c.mk()
				b.ReportAllocs()
				for b.Loop() {
					if err := s.Acquire(ctx, 1); err != nil {
						b.Fatal(err)
					}
					s.Release(1)
				}
				checkNoWait(b, c, s)
			})
		}
	})
	b.Run("parallel", func(b *testing.B) {
		for _, c := range semCases() {
			b.Run(c.name, func(b *testing.B) {
				s := c.mk()
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := s.Acquire(ctx, 1); err != nil {
							b.Error(err)
							return
						}
						s.Release(1)
					}
				})
				checkNoWait(b, c, s)
			})
		}
	})
}

// BenchmarkHotPath measures the performance target of the completion window
// (issue 11): an admitted Acquire(ctx, 1)+Release(1) of semaphore.New(n,
// interval) against the floor (x/sync's Weighted Acquire+Release and one
// time.Since read), serial and with GOMAXPROCS goroutines. On a shared
// machine whose load drifts, contenders measured one after the other in
// separate sub-benchmarks can differ by 2× from load alone, so here they
// alternate in blocks of hotBlock calls (a few ms each), the order rotating
// every round, and the ratio is taken per round, between blocks measured
// milliseconds apart: the reported numbers are medians over the rounds.
//
// b.N is the calls per contender; ns/op is then the time of one call of
// each contender together. The metrics are the medians: ns/call of each
// contender, and ratesem/floor and ratesem/Weighted, the ratios per round.
func BenchmarkHotPath(b *testing.B) {
	ctx := context.Background()
	for _, parallel := range []bool{false, true} {
		name := "serial"
		if parallel {
			name = "parallel"
		}
		b.Run(name, func(b *testing.B) {
			cs := []struct {
				name string
				a    acquirer
			}{
				{"floor", weightedSince{xsem.NewWeighted(huge), time.Now()}},
				{"ratesem", semaphore.New(huge, logPer)},
				{"Weighted", xsem.NewWeighted(huge)},
			}
			block := func(a acquirer, calls int) time.Duration {
				procs := 1
				if parallel {
					procs = runtime.GOMAXPROCS(0)
				}
				start := time.Now()
				var wg sync.WaitGroup
				for range procs {
					wg.Go(func() {
						for range calls / procs {
							if err := a.Acquire(ctx, 1); err != nil {
								panic(err)
							}
							a.Release(1)
						}
					})
				}
				wg.Wait()
				return time.Since(start)
			}
			var perCall [3][]float64
			var vsFloor, vsWeighted []float64
			b.ReportAllocs()
			for round := 0; round*hotBlock < b.N; round++ {
				calls := min(hotBlock, b.N-round*hotBlock)
				var t [3]float64
				for k := range 3 {
					i := (round + k) % 3
					t[i] = float64(block(cs[i].a, calls)) / float64(calls)
					perCall[i] = append(perCall[i], t[i])
				}
				vsFloor = append(vsFloor, t[1]/t[0])
				vsWeighted = append(vsWeighted, t[1]/t[2])
			}
			if st := cs[1].a.(*semaphore.RateSemaphore).Stats(); st.MaxWait > 0 || st.InFlight != 0 {
				b.Fatalf("a call waited (max wait %v) or units are still held (%d)", st.MaxWait, st.InFlight)
			}
			for i, c := range cs {
				b.ReportMetric(median(perCall[i]), "ns/call-"+c.name)
			}
			b.ReportMetric(median(vsFloor), "ratesem/floor")
			b.ReportMetric(median(vsWeighted), "ratesem/Weighted")
		})
	}
}

// hotBlock is the calls per contender between two switches in
// BenchmarkHotPath: about 2 ms of each.
const hotBlock = 20000

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// allowStep is how far the explicit instant moves on between two decisions,
// and allowRate the rate of the bucket-like limiters: 10^6 units per second
// (one per µs) against one call per 900 ns, so the bucket refills 0.9 units
// per call and never becomes full (no shortcut: the refill arithmetic runs
// with a fraction on every call), while its huge burst keeps every decision
// admitted for 10^12 calls.
const (
	allowStep  = 900 * time.Nanosecond
	allowRateN = 1_000_000
	allowBurst = 1 << 40
)

var allowRate = window.Limit{N: allowRateN, Per: time.Second}

// allower is one allow-style decision at an explicit instant.
type allower func(now time.Time) bool

type allowCase struct {
	name string
	mk   func() allower
}

func rsAllow(p func() window.Policy) func() allower {
	return func() allower {
		l := window.NewLimiter(p())
		return func(now time.Time) bool { return l.AllowN(now, 1) }
	}
}

// allowCases are grouped by the algorithm's nearest peer: x/time/rate's
// AllowN(now, 1) for the token bucket, GCRA and leaky bucket (the same
// decisions); the counters and logs have no peer among the dependencies and
// are listed beside x/time/rate as the reference allow-style decision.
func allowCases() []allowCase {
	xtime := func() allower {
		l := rate.NewLimiter(rate.Limit(allowRateN), allowBurst)
		return func(now time.Time) bool { return l.AllowN(now, 1) }
	}
	// The windows below count every unit in the window: 2^20 per 1 ms
	// against a call per 900 ns (~1111 per window) never binds, and the
	// logs keep ~1111 entries, expiring one per call.
	counted := window.Limit{N: 1 << 20, Per: time.Millisecond}
	return []allowCase{
		{"xtime-AllowN", xtime},
		{"ratesem-tokenbucket", rsAllow(func() window.Policy { return window.NewTokenBucket(allowRate, allowBurst) })},
		{"ratesem-gcra", rsAllow(func() window.Policy { return window.NewGCRA(allowRate, allowBurst) })},
		{"ratesem-leakybucket", rsAllow(func() window.Policy { return window.NewLeakyBucket(allowRate, allowBurst) })},
		{"ratesem-fixed", rsAllow(func() window.Policy { return window.NewFixedWindow(counted) })},
		{"ratesem-slidingcounter", rsAllow(func() window.Policy { return window.NewSlidingWindowCounter(counted) })},
		{"ratesem-subwindow", rsAllow(func() window.Policy { return window.NewSubWindowCounter(counted, 10) })},
		{"ratesem-slidinglog", rsAllow(func() window.Policy { return window.NewSlidingLog(counted, 0) })},
		// The completion window counts calls in flight, so a decision is
		// AllowN then DoneN (two lock round trips), the call ending at once.
		{"ratesem-completion-AllowN+DoneN", func() allower {
			l := window.NewLimiter(window.NewCompletion(counted))
			return func(now time.Time) bool {
				if !l.AllowN(now, 1) {
					return false
				}
				l.DoneN(now, 1)
				return true
			}
		}},
		// The pacer at 10^9 per second (1 ns apart) against a call per
		// 900 ns: admitted every time, and the TAT is recomputed each call.
		// Its peer, uber's Take, is below (it reads its own clock).
		{"ratesem-pacer", rsAllow(func() window.Policy {
			return window.NewPacer(window.Limit{N: 1e9, Per: time.Second})
		})},
	}
}

// base is the first instant of the explicit-time benchmarks: a real reading,
// with its monotonic clock, as a caller's time.Now would give.
func allowBase() time.Time { return time.Now() }

func BenchmarkAllowN(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		for _, c := range allowCases() {
			b.Run(c.name, func(b *testing.B) {
				allow := c.mk()
				now := allowBase()
				b.ReportAllocs()
				for b.Loop() {
					now = now.Add(allowStep)
					if !allow(now) {
						b.Fatal("refused: the benchmark must measure admitted decisions")
					}
				}
			})
		}
	})
	// In parallel the goroutines share one instant, moved on by an atomic
	// add (a cost both sides pay); a goroutine may reach the lock with an
	// instant a little older than one already used, which x/time/rate and
	// the ratesem windows treat as the later one, except the pacer, which
	// has no tolerance and refuses it (counted as refused/op).
	b.Run("parallel", func(b *testing.B) {
		for _, c := range allowCases() {
			b.Run(c.name, func(b *testing.B) {
				allow := c.mk()
				base := allowBase()
				var tick, refused atomic.Int64
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						now := base.Add(time.Duration(tick.Add(int64(allowStep))))
						if !allow(now) {
							refused.Add(1)
						}
					}
				})
				reportRefused(b, refused.Load())
			})
		}
	})
}

// reportRefused reports the share of refused decisions in a parallel run.
// The instant is read before the limiter's lock, so two goroutines may reach
// it out of order; a limiter with no tolerance (the pacer) then refuses the
// older instant, which is its rule and not a fault of the benchmark.
func reportRefused(b *testing.B, refused int64) {
	b.ReportMetric(float64(refused)/float64(b.N), "refused/op")
}

// steppingClock is a ratelimit.Clock whose Now moves on allowStep per read,
// so uber's Take sees the same advancing instants as the explicit-time
// benchmarks. Serially Sleep is never reached (the rate never binds); in
// parallel uber reads the clock before its state, so a goroutine that loses
// the race can find its instant behind the state and sleep: Sleep counts
// those, which are reported as refused/op, and returns at once.
type steppingClock struct{ now, slept atomic.Int64 }

func (c *steppingClock) Now() time.Time {
	return time.Unix(0, c.now.Add(int64(allowStep)))
}
func (c *steppingClock) Sleep(time.Duration) { c.slept.Add(1) }

// countingClock is the real clock (as uber's default, which calls
// time.Now and time.Sleep through an interface) that counts sleeps.
type countingClock struct{ slept atomic.Int64 }

func (*countingClock) Now() time.Time { return time.Now() }
func (c *countingClock) Sleep(d time.Duration) {
	c.slept.Add(1)
	time.Sleep(d)
}

// BenchmarkPacer compares the pacer with go.uber.org/ratelimit, the leaky
// bucket as a pacer without slack. Uber's Take reads its own clock, so the
// fair pairs are Allow (ratesem reads time.Now) against Take on the real
// clock, and AllowN at an explicit instant against Take on a clock that
// steps. Both are set to one call per ns (uber's finest), which a call every
// 900 ns or every clock read never reaches.
func BenchmarkPacer(b *testing.B) {
	fast := window.Limit{N: 1e9, Per: time.Second}
	type pcase struct {
		name string
		mk   func() func() bool
	}
	cases := []pcase{
		{"uber-Take-realclock", func() func() bool {
			c := &countingClock{}
			l := ratelimit.New(1e9, ratelimit.WithoutSlack, ratelimit.WithClock(c))
			return func() bool {
				before := c.slept.Load()
				l.Take()
				return c.slept.Load() == before
			}
		}},
		{"ratesem-Allow", func() func() bool { // AllowN on the real clock
			l := window.NewLimiter(window.NewPacer(fast))
			return func() bool { return l.AllowN(time.Now(), 1) }
		}},
		{"uber-Take-steppingclock", func() func() bool {
			c := &steppingClock{}
			c.now.Store(time.Now().UnixNano())
			l := ratelimit.New(1e9, ratelimit.WithoutSlack, ratelimit.WithClock(c))
			return func() bool {
				// The load is only to tell a sleep: it is paid serially
				// too, where it is 1 ns of an uncontended cache line.
				before := c.slept.Load()
				l.Take()
				return c.slept.Load() == before
			}
		}},
		{"ratesem-AllowN", func() func() bool {
			l := window.NewLimiter(window.NewPacer(fast))
			var now atomic.Int64
			now.Store(time.Now().UnixNano())
			return func() bool { return l.AllowN(time.Unix(0, now.Add(int64(allowStep))), 1) }
		}},
	}
	for _, mode := range []string{"serial", "parallel"} {
		b.Run(mode, func(b *testing.B) {
			for _, c := range cases {
				b.Run(c.name, func(b *testing.B) {
					f := c.mk()
					b.ReportAllocs()
					if mode == "serial" {
						for b.Loop() {
							if !f() {
								b.Fatal("refused")
							}
						}
						return
					}
					var refused atomic.Int64
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							if !f() {
								refused.Add(1)
							}
						}
					})
					reportRefused(b, refused.Load())
				})
			}
		})
	}
}

// BenchmarkClock is the cost of reading the clock, for reference: every rate
// limiter pays at least one read per call.
func BenchmarkClock(b *testing.B) {
	b.Run("time.Now", func(b *testing.B) {
		for b.Loop() {
			_ = time.Now()
		}
	})
	epoch := time.Now()
	b.Run("time.Since", func(b *testing.B) {
		for b.Loop() {
			_ = time.Since(epoch)
		}
	})
}
