package redis

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/window"
)

// A twin is one in-memory window of package window and the constructor of
// its Redis twin, for one random configuration.
type twin struct {
	mem       window.Policy
	red       func(c goredis.UniversalClient, name string, opts ...Option) (*Window, error)
	l         window.Limit
	completes bool // Done/Release matter (the completion window)
}

// µs returns a random whole number of microseconds in [lo, hi].
func µs(r *rand.Rand, lo, hi time.Duration) time.Duration {
	a, b := int64(lo/time.Microsecond), int64(hi/time.Microsecond)
	return time.Duration(a+r.Int64N(b-a+1)) * time.Microsecond
}

// randLimit draws a limit with a Per of whole microseconds (not round
// ones: 1.234567 s). One schedule in five uses big numbers (N up to
// 300 000, Per up to 48 h), whose products N·Per pass 2^53 and so exercise
// the scripts' exact muldiv; one in five a Per of at most 300 µs, where
// instants often fall exactly on a boundary and remainders are small.
func randLimit(r *rand.Rand) window.Limit {
	switch r.IntN(5) {
	case 0:
		return window.Limit{N: 1 + r.Int64N(300_000), Per: µs(r, time.Hour, 48*time.Hour)}
	case 1:
		return window.Limit{N: 1 + r.Int64N(8), Per: µs(r, time.Microsecond, 300*time.Microsecond)}
	}
	return window.Limit{N: 1 + r.Int64N(8), Per: µs(r, time.Millisecond, 3*time.Second)}
}

// The configurations are chosen so that microseconds lose nothing: every
// instant of a schedule is on the microsecond grid and every Per and margin
// a whole number of microseconds. The one rounding that could differ is
// GCRA's emission interval (Per/N rounded up to a nanosecond in memory, to
// a microsecond in Redis), so its Per is drawn as N × a whole number of
// microseconds. The token bucket and the sliding window counter can return
// a retry instant with a nanosecond fraction; their scripts compute the same
// wait rounded up to a whole microsecond, and the test compares it so.
var twins = []struct {
	name string
	mk   func(r *rand.Rand) twin
}{
	{"Completion", func(r *rand.Rand) twin {
		l := randLimit(r)
		return twin{mem: window.NewCompletion(l), l: l, completes: true,
			red: func(c goredis.UniversalClient, name string, opts ...Option) (*Window, error) {
				// A lease longer than any schedule: calls stay in flight
				// until Release, as in memory.
				return NewCompletion(c, name, l, append(opts, WithLease(1000*time.Hour))...)
			}}
	}},
	{"SlidingLog", func(r *rand.Rand) twin {
		l := randLimit(r)
		margin := µs(r, 0, l.Per/2)
		if r.IntN(4) == 0 {
			margin = 0
		}
		return twin{mem: window.NewSlidingLog(l, margin), l: l,
			red: func(c goredis.UniversalClient, name string, opts ...Option) (*Window, error) {
				return NewSlidingLog(c, name, l, margin, opts...)
			}}
	}},
	{"GCRA", func(r *rand.Rand) twin {
		l := randLimit(r)
		l.Per = time.Duration(l.N) * µs(r, time.Microsecond, l.Per/time.Duration(l.N)+time.Microsecond)
		burst := int64(0)
		if r.IntN(2) == 0 {
			burst = 1 + r.Int64N(2*l.N)
		}
		return twin{mem: window.NewGCRA(l, burst), l: l,
			red: func(c goredis.UniversalClient, name string, opts ...Option) (*Window, error) {
				return NewGCRA(c, name, l, burst, opts...)
			}}
	}},
	{"TokenBucket", func(r *rand.Rand) twin {
		l := randLimit(r)
		burst := int64(0)
		if r.IntN(2) == 0 {
			burst = 1 + r.Int64N(2*l.N)
		}
		return twin{mem: window.NewTokenBucket(l, burst), l: l,
			red: func(c goredis.UniversalClient, name string, opts ...Option) (*Window, error) {
				return NewTokenBucket(c, name, l, burst, opts...)
			}}
	}},
	{"FixedWindow", func(r *rand.Rand) twin {
		l := randLimit(r)
		return twin{mem: window.NewFixedWindow(l), l: l,
			red: func(c goredis.UniversalClient, name string, opts ...Option) (*Window, error) {
				return NewFixedWindow(c, name, l, opts...)
			}}
	}},
	{"SlidingWindowCounter", func(r *rand.Rand) twin {
		l := randLimit(r)
		return twin{mem: window.NewSlidingWindowCounter(l), l: l,
			red: func(c goredis.UniversalClient, name string, opts ...Option) (*Window, error) {
				return NewSlidingWindowCounter(c, name, l, opts...)
			}}
	}},
}

// admission is a call admitted by both twins.
type admission struct {
	at    time.Time
	n     int64
	token string
	until time.Time // sliding log: when its record leaves the window
}

// TestConformance feeds each in-memory window and its Redis twin the same
// random schedules (admissions of random weights, some above the capacity;
// releases and cancellations of admitted calls; time moving on by random
// microseconds, sometimes by more than Per, sometimes exactly to the retry
// instant of the latest refusal, sometimes back a little) through WithClock,
// and expects the same decisions and, where the in-memory window returns a
// retry instant, the same instant to the microsecond. A refusal that the in-memory
// completion window cannot date (only a Done can help) must be flagged
// InFlight by the twin.
func TestConformance(t *testing.T) {
	addr := sharedAddr(t)
	const schedules, steps = 24, 250
	for _, tw := range twins {
		t.Run(tw.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, addr)
			ctx := ctxT(t)
			var decisions, admitted, refused, waits, fractional, inflight, heavy, releases, cancels int
			for seed := range uint64(schedules) {
				r := rand.New(rand.NewPCG(seed, 0x7ed15))
				x := tw.mk(r)
				clk := &manual{t: time.UnixMicro(1_700_000_000_000_000 + r.Int64N(1e12))}
				red, err := x.red(c, uniqueName(t), WithClock(clk.now))
				if err != nil {
					t.Fatal(err)
				}
				capacity := x.mem.Capacity()
				if red.Capacity() != capacity {
					t.Fatalf("seed %d: capacity %d in Redis, %d in memory", seed, red.Capacity(), capacity)
				}
				per := int64(x.l.Per / time.Microsecond)
				var live []admission
				var retry time.Time // the latest retry instant, if still ahead
				latest := clk.t     // the latest instant of the schedule
				var seen time.Time  // the latest instant given to Admit or Release (Cancel moves no clock)
				for step := range steps {
					switch k := r.IntN(20); {
					case k < 4:
					case k < 8 && !retry.IsZero():
						clk.t = retry // a refused caller back after its wait, to the µs
					case k < 17:
						clk.t = latest.Add(time.Duration(r.Int64N(per/4+1)) * time.Microsecond)
					case k < 18:
						clk.t = latest.Add(time.Duration(r.Int64N(2*per+1)) * time.Microsecond)
					default:
						// An instant a little older than the latest seen
						// (as callers that read the clock before a lock
						// produce): both twins take it as the latest. Not
						// for the completion window: its in-memory fast
						// admission path (AdmitCached) does not move its
						// clock, so it takes an earlier instant as the
						// latest one of its slow path, where the twin,
						// which has no fast path, takes the latest
						// admission's.
						if !x.completes {
							clk.t = latest.Add(-time.Duration(r.Int64N(per/4+1)) * time.Microsecond)
						}
					}
					now := clk.t
					if now.After(latest) {
						latest = now
					}
					if !retry.After(latest) {
						retry = time.Time{}
					}
					op := r.IntN(10)
					if len(live) == 0 || op < 6 || !x.completes && op < 9 {
						n := 1 + r.Int64N(min(capacity, 3))
						if capacity > 8 {
							n = 1 + r.Int64N(capacity/2+1)
						}
						if r.IntN(40) == 0 {
							n = capacity + 1
						}
						if n > capacity {
							// Refused without a round trip, so without
							// moving the twin's clock: the in-memory
							// window is asked at an instant it has seen.
							d, err := red.Admit(ctx, n)
							okM, atM := false, time.Time{}
							if !seen.IsZero() {
								atM, okM = x.mem.Admit(seen, n)
							}
							decisions++
							heavy++
							if okM || !atM.IsZero() || d.OK || !errors.Is(err, window.ErrWeightTooLarge) {
								t.Fatalf("%s seed %d step %d: %d units over capacity %d: memory (%v, %v), Redis err %v",
									x.l, seed, step, n, capacity, okM, atM, err)
							}
							continue
						}
						if now.After(seen) {
							seen = now
						}
						atM, okM := x.mem.Admit(now, n)
						d, err := red.Admit(ctx, n)
						decisions++
						if err != nil {
							t.Fatalf("seed %d step %d: %v", seed, step, err)
						}
						if !d.At.Equal(seen) {
							t.Fatalf("seed %d step %d: decision at %v, latest instant %v (clock %v)", seed, step, d.At, seen, now)
						}
						if okM != d.OK {
							t.Fatalf("%s seed %d step %d, t=%v: %d units: memory admitted %v, Redis %v (wait %v)",
								x.l, seed, step, now.Sub(time.Unix(0, 0)), n, okM, d.OK, d.Wait)
						}
						if okM {
							admitted++
							live = append(live, admission{at: seen, n: n, token: d.Token,
								until: seen.Add(x.l.Per + time.Duration(red.margin)*time.Microsecond)})
							continue
						}
						refused++
						if atM.IsZero() {
							if !x.completes || !d.InFlight {
								t.Fatalf("%s seed %d step %d: %d units: memory refused with no instant; Redis wait %v, in flight %v",
									x.l, seed, step, n, d.Wait, d.InFlight)
							}
							inflight++
							continue
						}
						if d.InFlight {
							t.Fatalf("%s seed %d step %d: Redis flags InFlight but memory dates the retry", x.l, seed, step)
						}
						// The retry instant, rounded up to a whole µs.
						ns := atM.UnixNano()
						want := time.UnixMicro((ns + 999) / 1000)
						if ns%1000 != 0 {
							fractional++
						}
						waits++
						if got := d.At.Add(d.Wait); !got.Equal(want) {
							t.Fatalf("%s seed %d step %d: %d units refused; memory retry at latest+%v (+%v rounded up to µs), Redis at latest+%v",
								x.l, seed, step, n, atM.Sub(seen), want.Sub(seen), got.Sub(seen))
						}
						retry = want
						continue
					}
					i := r.IntN(len(live))
					a := live[i]
					if x.completes && op < 9 {
						if now.After(seen) {
							seen = now
						}
						x.mem.Done(now, a.n)
						if err := red.Release(ctx, a.token); err != nil {
							t.Fatalf("seed %d step %d: release: %v", seed, step, err)
						}
						releases++
						live = append(live[:i], live[i+1:]...)
						continue
					}
					if tw.name == "SlidingLog" && !a.until.After(seen) {
						// The in-memory log's Cancel of a record that has
						// left the window takes units off newer records;
						// the twin erases exactly the call's own record.
						// Only records still counted are compared.
						live = append(live[:i], live[i+1:]...)
						continue
					}
					x.mem.Cancel(a.at, a.n)
					if err := red.Cancel(ctx, a.token); err != nil {
						t.Fatalf("seed %d step %d: cancel: %v", seed, step, err)
					}
					cancels++
					live = append(live[:i], live[i+1:]...)
				}
			}
			t.Logf("%s: %d schedules: %d decisions compared (%d admitted, %d refused, %d over capacity), %d waits equal to the µs (%d rounded up from a ns fraction), %d refusals flagged InFlight, %d releases, %d cancellations",
				tw.name, schedules, decisions, admitted, refused, heavy, waits, fractional, inflight, releases, cancels)
			if admitted == 0 || waits == 0 {
				t.Fatal("the schedules admitted or dated nothing: the comparison is empty")
			}
		})
	}
}
