package semaphore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/internal/win"
	"github.com/ratesem/ratesem/semaphore"
	"github.com/ratesem/ratesem/window"
)

// record is one call of the property test.
type record struct {
	arrive   time.Duration // when Acquire was called, offset from the bubble's start
	weight   int64
	hold     time.Duration
	timeout  time.Duration // 0: no deadline
	cancelAt time.Duration // 0: never cancelled explicitly

	ok         bool
	err        error
	start, end time.Duration // offsets; valid when ok
	startSeq   int64         // global order of start and end events
	endSeq     int64
}

type propertyCase struct {
	n, conc  int64
	interval time.Duration
	margin   time.Duration // with start
	start    bool
	// policy, when set, is the window (NewWithPolicy); checkProperty then
	// checks the completion invariant only for a *win.Completion.
	policy func(window.Limit) window.Policy
}

// runProperty fans out calls with random weights, holds, arrival gaps,
// deadlines and cancellations through one RateSemaphore on virtual time and
// returns every call's record.
func runProperty(t *testing.T, pc propertyCase, seed uint64, calls int) ([]record, semaphore.Stats) {
	var recs []record
	var stats semaphore.Stats
	synctest.Test(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(seed, 99))
		opts := []semaphore.Option{}
		if pc.conc > 0 {
			opts = append(opts, semaphore.WithMaxUnitsInFlight(pc.conc))
		}
		if pc.start {
			opts = append(opts, semaphore.WithStartWindow(pc.margin))
		}
		var s *semaphore.RateSemaphore
		maxW := pc.n
		if pc.policy != nil {
			p := pc.policy(window.Limit{N: pc.n, Per: pc.interval})
			s = semaphore.NewWithPolicy(p, opts...)
			maxW = min(maxW, p.Capacity())
		} else {
			s = semaphore.New(pc.n, pc.interval, opts...)
		}
		if pc.conc > 0 {
			maxW = min(maxW, pc.conc)
		}
		recs = make([]record, calls)
		var arrive time.Duration
		for i := range recs {
			// Distinct arrivals fix the FIFO order; bursts (1ns gaps) and lulls.
			gap := time.Duration(1 + rng.IntN(3))
			if rng.IntN(4) == 0 {
				gap = time.Duration(rng.IntN(int(pc.interval / 2)))
			}
			arrive += max(gap, 1)
			r := record{arrive: arrive, weight: rng.Int64N(maxW + 1), hold: time.Duration(rng.IntN(int(pc.interval)))}
			switch rng.IntN(10) {
			case 0:
				r.timeout = time.Duration(1 + rng.IntN(int(2*pc.interval)))
			case 1:
				r.cancelAt = time.Duration(1 + rng.IntN(int(2*pc.interval)))
			}
			recs[i] = r
		}
		begin := time.Now()
		var seq atomic.Int64
		var wg sync.WaitGroup
		for i := range recs {
			r := &recs[i]
			wg.Go(func() {
				time.Sleep(r.arrive)
				ctx := t.Context()
				if r.timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, r.timeout)
					defer cancel()
				}
				if r.cancelAt > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithCancel(ctx)
					stop := time.AfterFunc(r.cancelAt, cancel)
					defer stop.Stop()
				}
				if r.err = s.Acquire(ctx, r.weight); r.err != nil {
					return
				}
				r.ok = true
				r.start, r.startSeq = time.Since(begin), seq.Add(1)
				time.Sleep(r.hold)
				r.end, r.endSeq = time.Since(begin), seq.Add(1)
				s.Release(r.weight)
			})
		}
		wg.Wait()
		stats = s.Stats()
	})
	return recs, stats
}

// checkProperty asserts every guarantee over the records.
func checkProperty(t *testing.T, pc propertyCase, recs []record, stats semaphore.Stats) {
	t.Helper()
	capN := pc.n
	if pc.conc > 0 {
		capN = min(capN, pc.conc)
	}
	var okRecs []record
	failed := 0
	for _, r := range recs {
		if r.ok {
			okRecs = append(okRecs, r)
			continue
		}
		failed++
		if !errors.Is(r.err, context.Canceled) && !errors.Is(r.err, context.DeadlineExceeded) {
			t.Fatalf("Acquire failed with %v; want a context error", r.err)
		}
	}
	if failed == 0 || len(okRecs) < len(recs)/2 {
		t.Fatalf("%d of %d calls failed: the test should mix both", failed, len(recs))
	}

	// Cancelled waiters consumed nothing: the counters balance.
	if stats.InFlight != 0 || stats.Waiting != 0 || stats.Admitted != uint64(len(okRecs)) {
		t.Fatalf("Stats() = %+v after %d successful calls; want nothing in flight or waiting", stats, len(okRecs))
	}

	completion := !pc.start
	if pc.policy != nil {
		_, completion = pc.policy(window.Limit{N: 1, Per: time.Second}).(*win.Completion)
	}
	for _, ri := range okRecs {
		t0 := ri.start
		var window, inflight int64
		for _, rj := range okRecs {
			if pc.start {
				// Start window: units started in (t − interval − margin, t].
				if rj.start <= t0 && rj.start > t0-pc.interval-pc.margin {
					window += rj.weight
				}
			} else if completion && rj.start <= t0 && rj.end+pc.interval > t0 {
				// Completion window: in flight at t, or ended in (t − interval, t].
				window += rj.weight
			}
			// Concurrency: overlapping by the global event order.
			if rj.startSeq <= ri.startSeq && rj.endSeq > ri.startSeq {
				inflight += rj.weight
			}
		}
		if window > pc.n {
			t.Fatalf("window invariant broken at t=%v: %d units > %d (%+v)", t0, window, pc.n, pc)
		}
		if inflight > capN {
			t.Fatalf("concurrency cap broken at t=%v: %d units in flight > %d", t0, inflight, capN)
		}
	}

	// FIFO: in arrival order, successful calls start in non-decreasing order.
	sort.Slice(okRecs, func(i, j int) bool { return okRecs[i].arrive < okRecs[j].arrive })
	for i := 1; i < len(okRecs); i++ {
		if okRecs[i].start < okRecs[i-1].start {
			t.Fatalf("FIFO broken: call arriving at %v started at %v, before the one arriving at %v (started %v)",
				okRecs[i].arrive, okRecs[i].start, okRecs[i-1].arrive, okRecs[i-1].start)
		}
	}
}

func TestPropertyWindowInvariant(t *testing.T) {
	cases := []propertyCase{
		{n: 10, interval: 2 * time.Second},
		{n: 10, conc: 4, interval: 2 * time.Second},
		{n: 3, interval: 100 * time.Millisecond},
		{n: 10, interval: 2 * time.Second, start: true, margin: 50 * time.Millisecond},
		{n: 5, conc: 2, interval: time.Second, start: true},
	}
	for _, pc := range cases {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%+v/seed%d", pc, seed), func(t *testing.T) {
				recs, stats := runProperty(t, pc, seed, 1500)
				checkProperty(t, pc, recs, stats)
			})
		}
	}
}
