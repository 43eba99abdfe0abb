package accuracy

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Config sets the limit and the load of a run.
type Config struct {
	N       int           // the server's rule: at most N arrivals in any window of Per
	Per     time.Duration // T, the window
	Calls   int           // calls in a run
	Workers int           // goroutines sharing the calls
	Seed    uint64        // seeds the latency draws
}

// DefaultConfig returns the report's parameters: 20 per 500 ms, 400 calls
// (20 windows' worth) on 100 goroutines, seed 1. A run takes about 10 s of
// (real or virtual) time.
func DefaultConfig() Config {
	return Config{N: 20, Per: 500 * time.Millisecond, Calls: 400, Workers: 100, Seed: 1}
}

func (c Config) check() {
	if c.N <= 0 || c.Per <= 0 || c.Calls <= 0 || c.Workers <= 0 {
		panic(fmt.Sprintf("accuracy: invalid Config %+v: N, Per, Calls and Workers must be positive", c))
	}
}

// Result is the outcome of one run: one limiter under one latency
// distribution.
type Result struct {
	Peer       string        // Peer.Name
	Latency    string        // Latency.Name
	Margin     time.Duration // the start-window margin used; 0 unless the peer uses one
	UsesMargin bool          // Peer.UsesMargin

	Calls    int // calls made (Config.Calls, unless some failed to acquire)
	Accepted int // arrivals the server accepted
	Rejected int // arrivals the server rejected

	// Peak is the most arrivals, accepted or not, in any window (t−T, t].
	Peak int

	// Throughput is the steady-state rate of accepted arrivals, in calls per
	// second: (M − N) / (t_M − t_N) over the M accepted arrivals; 0 when
	// M ≤ N.
	Throughput float64
	// ShareNT is Throughput / (N/T): 1 means the full rate of the rule.
	ShareNT float64
	// ShareNTL is Throughput / (N/(T + MeanRTT)), the completion window's
	// ceiling.
	ShareNTL float64

	// MeanRTT is the mean measured round trip: from Acquire's return to the
	// response, before release.
	MeanRTT time.Duration

	// WaitP50 and WaitP99 are the median and 99th percentile (nearest rank)
	// of the time each call blocked in Acquire; WaitMax is the longest.
	WaitP50, WaitP99, WaitMax time.Duration

	// OutSpread is the observed spread (max − min) of the outbound trip,
	// from Acquire's return to the arrival at the server. On virtual time it
	// is the distribution's; in real time goroutine wake-ups and timer
	// overshoot add to it.
	OutSpread time.Duration

	// Elapsed is the time from the run's start to the last release.
	Elapsed time.Duration

	// Errors counts calls whose Acquire failed (none are expected: the
	// harness uses no deadlines).
	Errors int
}

// seedFor derives the latency generator's seed from cfg.Seed and the
// distribution's name, so each distribution has its own sequence and every
// limiter sees the same one.
func seedFor(cfg Config, lat Latency) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(lat.Name))
	return rand.New(rand.NewPCG(cfg.Seed, h.Sum64()))
}

// Run makes cfg.Calls calls through a limiter built by p.New under the
// latency distribution lat and returns the measures. It blocks for the
// run's duration, about cfg.Calls/cfg.N windows of cfg.Per (more for
// limiters slower than the rule). It uses only the time package, so inside a
// testing/synctest bubble it runs on virtual time. It panics on an invalid
// cfg.
func Run(cfg Config, p Peer, lat Latency) Result {
	cfg.check()
	r := seedFor(cfg, lat)
	rtts := make([]time.Duration, cfg.Calls)
	for i := range rtts {
		rtts[i] = max(lat.Sample(r), 0)
	}

	srv := NewServer(cfg.N, cfg.Per)
	lim := p.New(cfg, lat)
	ctx := context.Background()

	var (
		claimed, started atomic.Int64
		waits            = make([]time.Duration, cfg.Calls)
		outs             = make([]time.Duration, cfg.Calls)
		measured         = make([]time.Duration, cfg.Calls)
		errs             atomic.Int64
		wg               sync.WaitGroup
	)
	begin := time.Now()
	for range cfg.Workers {
		wg.Go(func() {
			for claimed.Add(1) <= int64(cfg.Calls) {
				t0 := time.Now()
				release, err := lim.Acquire(ctx)
				if err != nil {
					errs.Add(1)
					continue
				}
				t1 := time.Now()
				// Latencies go out in admission order (see the package doc).
				i := started.Add(1) - 1
				out, back := split(rtts[i])
				time.Sleep(out)
				a := srv.Arrive()
				time.Sleep(back)
				waits[i] = t1.Sub(t0)
				outs[i] = a.At.Sub(t1)
				measured[i] = time.Since(t1)
				release()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)

	n := int(started.Load())
	res := Result{
		Peer:       p.Name,
		Latency:    lat.Name,
		UsesMargin: p.UsesMargin,
		Calls:      n,
		Elapsed:    elapsed,
		Errors:     int(errs.Load()),
	}
	if p.UsesMargin {
		res.Margin = lat.Margin
	}
	waits, measured, outs = waits[:n], measured[:n], outs[:n]
	if n > 0 {
		res.OutSpread = slices.Max(outs) - slices.Min(outs)
	}

	arr := srv.Arrivals()
	all := make([]time.Time, 0, len(arr))
	var acc []time.Time
	for _, a := range arr {
		all = append(all, a.At)
		if a.Accepted {
			acc = append(acc, a.At)
		}
	}
	res.Accepted, res.Rejected = len(acc), len(arr)-len(acc)
	res.Peak = MaxInWindow(all, cfg.Per)

	var sum time.Duration
	for _, d := range measured {
		sum += d
	}
	if n > 0 {
		res.MeanRTT = sum / time.Duration(n)
	}
	res.Throughput = SteadyThroughput(acc, cfg.N)
	res.ShareNT = res.Throughput / (float64(cfg.N) / cfg.Per.Seconds())
	res.ShareNTL = res.Throughput / (float64(cfg.N) / (cfg.Per + res.MeanRTT).Seconds())

	slices.Sort(waits)
	res.WaitP50 = Percentile(waits, 50)
	res.WaitP99 = Percentile(waits, 99)
	if n > 0 {
		res.WaitMax = waits[n-1]
	}
	return res
}

// SteadyThroughput returns (M − N) / (t_M − t_N) in calls per second, where
// the M instants in accepted are sorted here (a copy) and t_k is the k-th of
// them: the rate after the first N. It returns 0 when M ≤ N or t_M = t_N.
func SteadyThroughput(accepted []time.Time, n int) float64 {
	m := len(accepted)
	if m <= n || n <= 0 {
		return 0
	}
	s := slices.Clone(accepted)
	slices.SortFunc(s, func(a, b time.Time) int { return a.Compare(b) })
	span := s[m-1].Sub(s[n-1])
	if span <= 0 {
		return 0
	}
	return float64(m-n) / span.Seconds()
}

// Percentile returns the p-th percentile (0 < p ≤ 100) of sorted by the
// nearest-rank method: the smallest value with at least p% of the values at
// or below it. It returns 0 for an empty slice.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	k := int(math.Ceil(float64(len(sorted))*p/100)) - 1
	k = min(max(k, 0), len(sorted)-1)
	return sorted[k]
}

// RunAll runs every peer under every latency distribution, one run after
// another, latency by latency, and returns the results in that order. Each
// run builds its limiter afresh. If progress is not nil it is called after
// each run.
func RunAll(cfg Config, peers []Peer, lats []Latency, progress func(Result)) []Result {
	var out []Result
	for _, lat := range lats {
		for _, p := range peers {
			r := Run(cfg, p, lat)
			if progress != nil {
				progress(r)
			}
			out = append(out, r)
		}
	}
	return out
}
