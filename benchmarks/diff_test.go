package benchmarks

// Differential tests: ratesem's windows against the libraries people already
// use for the same algorithm, decision by decision, on random schedules.
//
//   - window.NewTokenBucket, window.NewLeakyBucket and window.NewGCRA against
//     golang.org/x/time/rate's AllowN(t, n);
//   - window.NewPacer against go.uber.org/ratelimit without slack, driven by
//     a fake clock.

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"go.uber.org/ratelimit"
	"golang.org/x/time/rate"

	"github.com/ratesem/ratesem/internal/win"
	"github.com/ratesem/ratesem/window"
)

// grid is the spacing of every instant in the token bucket test: 1 s / 512.
//
// x/time/rate keeps tokens as a float64 and refills elapsed.Seconds()·limit;
// ratesem counts whole units and carries the remainder in integer
// nanoseconds. The two agree exactly only where the float arithmetic is
// exact, so the parameters are chosen to make it so:
//
//   - Per = 1 s, so x/time/rate's limit (events per second) is N itself;
//   - N is a power of two ≤ 512;
//   - every instant is a whole number of grid steps of 1953125 ns from the
//     base, which sits on a whole second.
//
// Then Duration.Seconds() = sec + nsec/1e9 with nsec = k·1953125, and
// nsec/1e9 = k/512 exactly (a correctly rounded division whose exact result
// is representable); times N = 2^j it is a multiple of 2^j/512, and every
// token count is a multiple of 1/512 far below 2^53: no rounding anywhere. Per
// = 1 s is also divisible by every such N (1e9 = 2^9·5^9), so GCRA's
// emission interval Per/N is exact too. With other parameters x/time/rate
// rounds (tokens such as 0.99999999 instead of 1), so a mismatch could come
// from the rounding alone and prove nothing about either limiter; on the
// grid every mismatch is a real difference of decision.
const grid = time.Second / 512

// diffBase is the first instant of every schedule: a whole second, wall
// clock only (no monotonic reading), as a clock.Mock would give.
var diffBase = time.Unix(1_700_000_000, 0)

// gapSteps returns a random gap in grid steps: often none (several calls at
// one instant), often less than one unit's refill, sometimes a whole window
// or more (the bucket fills up to the burst).
func gapSteps(r *rand.Rand, n int64) int64 {
	perUnit := 512 / n // grid steps to refill one unit
	switch k := r.IntN(10); {
	case k < 3:
		return 0
	case k < 6:
		return r.Int64N(perUnit + 1)
	case k < 9:
		return r.Int64N(4*perUnit + 1)
	default:
		return r.Int64N(2*512 + 1) // up to 2 s
	}
}

// weight returns a random weight: mostly 1 … burst, sometimes 0, sometimes
// above the burst (never admitted by either side).
func weight(r *rand.Rand, burst int64) int64 {
	switch k := r.IntN(20); {
	case k == 0:
		return 0
	case k == 1:
		return burst + 1 + r.Int64N(3)
	case k < 10:
		return 1
	default:
		return 1 + r.Int64N(burst)
	}
}

// tbCase is one schedule's parameters.
type tbCase struct {
	n, burst int64
	// rsBurst is the burst given to ratesem: burst, or 0 when burst == n
	// (ratesem's "burst follows N").
	rsBurst int64
}

func randomTB(r *rand.Rand) tbCase {
	n := int64(1) << r.IntN(10) // 1, 2, 4, … 512
	var c tbCase
	switch r.IntN(4) {
	case 0:
		c = tbCase{n: n, burst: n, rsBurst: 0}
	case 1:
		c = tbCase{n: n, burst: n, rsBurst: n}
	case 2:
		c = tbCase{n: n, burst: 1}
	default:
		c = tbCase{n: n, burst: 1 + r.Int64N(4*n)}
	}
	if c.rsBurst == 0 && c.burst != n {
		c.rsBurst = c.burst
	}
	return c
}

func TestTokenBucketMatchesXTimeRate(t *testing.T) {
	const seeds, steps = 400, 2000
	var admitted, refused int
	for seed := range uint64(seeds) {
		r := rand.New(rand.NewPCG(seed, 0x70b))
		c := randomTB(r)
		l := window.Limit{N: c.n, Per: time.Second}
		ours := []struct {
			name string
			lim  *window.Limiter
		}{
			{"TokenBucket", window.NewLimiter(window.NewTokenBucket(l, c.rsBurst))},
			{"LeakyBucket", window.NewLimiter(window.NewLeakyBucket(l, c.rsBurst))},
			{"GCRA", window.NewLimiter(window.NewGCRA(l, c.rsBurst))},
		}
		peer := rate.NewLimiter(rate.Limit(c.n), int(c.burst))

		at := int64(0) // grid steps since diffBase
		for step := range steps {
			at += gapSteps(r, c.n)
			now := diffBase.Add(time.Duration(at) * grid)
			w := weight(r, c.burst)
			before := peer.TokensAt(now)
			want := peer.AllowN(now, int(w))
			for _, o := range ours {
				if got := o.lim.AllowN(now, w); got != want {
					t.Fatalf("seed %d step %d: %s(%v, burst %d) AllowN(base+%d·grid, %d) = %v, x/time/rate says %v (it had %v tokens)",
						seed, step, o.name, l, c.rsBurst, at, w, got, want, before)
				}
			}
			if want {
				admitted++
			} else {
				refused++
			}
		}
	}
	// Both answers must be common, or the test checks little.
	if total := admitted + refused; admitted < total/5 || refused < total/10 {
		t.Fatalf("%d admitted, %d refused: the schedules should exercise both", admitted, refused)
	}
	t.Logf("%d decisions: %d admitted, %d refused, all equal", admitted+refused, admitted, refused)
}

// fakeClock is a ratelimit.Clock: Now returns the instant set by the test,
// Sleep moves it on (uber's Take sleeps until the admission).
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time        { return c.now }
func (c *fakeClock) Sleep(d time.Duration) { c.now = c.now.Add(d) }

// TestPacerMatchesUber drives go.uber.org/ratelimit (without slack) and
// window.NewPacer with the same arrivals and checks that every call is
// admitted at the same instant.
//
// Uber's Take is called at each arrival instant (the fake clock is set to
// it, even when that is before the previous call's admission: that call
// models a caller arriving while the one before it sleeps), and returns the
// admission instant. For ratesem the admission is found as a caller of the
// allow-style API would: Admit at the arrival (or at the previous admission,
// if the arrival is earlier: instants given to a window must not go back);
// if refused, Admit again at the instant returned, where it must be
// admitted, and not 1 ns earlier.
//
// Per is a multiple of N, so both take the same interval per call (uber
// truncates Per/N, ratesem rounds it up).
func TestPacerMatchesUber(t *testing.T) {
	const seeds, steps = 300, 2000
	var immediate, delayed int
	for seed := range uint64(seeds) {
		r := rand.New(rand.NewPCG(seed, 0x9ace))
		n := 1 + r.Int64N(1000)
		interval := time.Duration(1 + r.Int64N(5_000_000))
		l := window.Limit{N: n, Per: time.Duration(n) * interval}

		clk := &fakeClock{}
		uber := ratelimit.New(int(n), ratelimit.Per(l.Per), ratelimit.WithoutSlack, ratelimit.WithClock(clk))
		pacer := win.NewPacer(l)
		if pacer.EmissionInterval() != interval {
			t.Fatalf("seed %d: %v: emission interval %v, want %v", seed, l, pacer.EmissionInterval(), interval)
		}

		arrival := diffBase
		var last time.Time // the latest instant given to the pacer
		for step := range steps {
			arrival = arrival.Add(pacerGap(r, interval))
			clk.now = arrival
			want := uber.Take()

			q := arrival
			if q.Before(last) {
				q = last
			}
			got, err := admitAt(pacer, q)
			if err != nil {
				t.Fatalf("seed %d step %d: %v, arrival base+%v: %v", seed, step, l, arrival.Sub(diffBase), err)
			}
			if !got.Equal(want) {
				t.Fatalf("seed %d step %d: %v, arrival base+%v: pacer admits at base+%v, uber at base+%v",
					seed, step, l, arrival.Sub(diffBase), got.Sub(diffBase), want.Sub(diffBase))
			}
			if got.Equal(arrival) {
				immediate++
			} else {
				delayed++
			}
			last = got
		}
	}
	if total := immediate + delayed; immediate < total/10 || delayed < total/10 {
		t.Fatalf("%d admitted on arrival, %d delayed: the schedules should exercise both", immediate, delayed)
	}
	t.Logf("%d calls: %d admitted on arrival, %d delayed, all at uber's instant", immediate+delayed, immediate, delayed)
}

// admitAt admits one unit on the pacer at q or, if refused, at the instant it
// returns, checking that the retry instant is exact: refused 1 ns before,
// admitted at it.
func admitAt(p *win.GCRA, q time.Time) (time.Time, error) {
	retry, ok := p.Admit(q, 1)
	if ok {
		return q, nil
	}
	if !retry.After(q) {
		return time.Time{}, fmt.Errorf("refused at base+%v with retry instant base+%v, not after it", q.Sub(diffBase), retry.Sub(diffBase))
	}
	if _, ok := p.Admit(retry.Add(-1), 1); ok {
		return time.Time{}, fmt.Errorf("admitted at base+%v, 1 ns before the retry instant it gave", retry.Add(-1).Sub(diffBase))
	}
	if _, ok := p.Admit(retry, 1); !ok {
		return time.Time{}, fmt.Errorf("refused at the retry instant base+%v it gave", retry.Sub(diffBase))
	}
	return retry, nil
}

// pacerGap returns a random time between arrivals: none (a burst of callers),
// less than the interval (they queue), about the interval, or an idle spell.
func pacerGap(r *rand.Rand, interval time.Duration) time.Duration {
	switch k := r.IntN(10); {
	case k < 2:
		return 0
	case k < 5:
		return time.Duration(r.Int64N(int64(interval)))
	case k < 7:
		return interval - 1 + time.Duration(r.Int64N(3)) // interval − 1 ns … interval + 1 ns
	case k < 9:
		return time.Duration(r.Int64N(4 * int64(interval)))
	default:
		return time.Duration(r.Int64N(100 * int64(interval)))
	}
}
