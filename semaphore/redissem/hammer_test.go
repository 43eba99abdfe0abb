package redissem

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ratesem/ratesem/window/redis/redistest"
)

// TestCheckCompletionCatchesViolations makes sure the checker of the runs
// below can fail: a history one unit over the limit, in flight or ended
// within the interval, is caught; the same history spread out is not.
func TestCheckCompletionCatchesViolations(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	per := 200 * time.Millisecond
	// Two calls in flight together, limit 1.
	inFlight := []call{{start: at(0), end: at(50), n: 1}, {start: at(10), end: at(60), n: 1}}
	if _, err := checkCompletion(inFlight, 1, per); err == nil {
		t.Error("two calls in flight at once passed a limit of 1")
	}
	// The second starts 150 ms after the first ended: within the interval.
	ended := []call{{start: at(0), end: at(50), n: 1}, {start: at(200), end: at(210), n: 1}}
	if _, err := checkCompletion(ended, 1, per); err == nil {
		t.Error("a start 150 ms after an end passed a limit of 1 per 200 ms")
	}
	// Weights count.
	heavy := []call{{start: at(0), end: at(5), n: 2}, {start: at(100), end: at(105), n: 1}}
	if _, err := checkCompletion(heavy, 2, per); err == nil {
		t.Error("3 units passed a limit of 2")
	}
	// Spread out: the second starts a whole interval after the first ended.
	ok := []call{{start: at(0), end: at(50), n: 1}, {start: at(251), end: at(260), n: 1}}
	if peak, err := checkCompletion(ok, 1, per); err != nil || peak != 1 {
		t.Errorf("a legal history: peak %d, %v", peak, err)
	}
}

// TestManyProcessesShareTheLimit: four Semaphores on four go-redis clients
// (four processes, as far as Redis can tell), six goroutines each, hammer
// one limit of 8 units per 200 ms for 2 s with calls of 1 or 2 units that
// take 5 to 25 ms. The completion guarantee holds across all of them at
// every start, and the throughput is at least 80% of N / (interval +
// latency), the most the completion window allows.
func TestManyProcessesShareTheLimit(t *testing.T) {
	addr := redistest.Start(t)
	name := uniqueName(t)
	const (
		N, P, G = 8, 4, 6
		per     = 200 * time.Millisecond
		run     = 2 * time.Second
	)
	sems := make([]*Semaphore, P)
	for i := range sems {
		sems[i] = newSem(t, newClient(t, addr), name, N, per)
	}
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	var rec recorder
	var wg sync.WaitGroup
	began := time.Now()
	for p, s := range sems {
		for range G {
			wg.Go(func() {
				for ctx.Err() == nil {
					n := int64(1)
					if rand.IntN(5) == 0 {
						n = 2
					}
					if err := s.Acquire(ctx, n); err != nil {
						if ctx.Err() == nil && !errors.Is(err, ErrDeadline) {
							t.Errorf("process %d: %v", p, err)
						}
						return
					}
					start := time.Now()
					time.Sleep(5*time.Millisecond + rand.N(20*time.Millisecond))
					end := time.Now()
					s.Release(n)
					rec.add(call{start: start, end: end, n: n, proc: p})
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(began)
	calls := rec.all()
	peak, err := checkCompletion(calls, N, per)
	if err != nil {
		t.Fatal(err)
	}
	var units int64
	var latency time.Duration
	perProc := make([]int64, P)
	for _, c := range calls {
		units += c.n
		latency += c.end.Sub(c.start)
		perProc[c.proc] += c.n
	}
	latency /= time.Duration(len(calls))
	ideal := float64(N) * elapsed.Seconds() / (per + latency).Seconds()
	t.Logf("%d calls, %d units in %v (peak %d of %d); mean latency %v; ideal N/(interval+latency) gives %.1f units: %.0f%%; units per process %v",
		len(calls), units, elapsed.Round(time.Millisecond), peak, N, latency.Round(time.Microsecond), ideal, 100*float64(units)/ideal, perProc)
	if float64(units) < 0.8*ideal {
		t.Errorf("throughput %d units, below 80%% of %.1f", units, ideal)
	}
	var admitted uint64
	for i, s := range sems {
		st := s.Stats()
		t.Logf("process %d: %+v", i, st)
		admitted += st.Admitted
		if st.InFlight != 0 || st.RedisErrors != 0 || st.FallbackAdmitted != 0 {
			t.Errorf("process %d: %+v", i, st)
		}
	}
	if admitted != uint64(len(calls)) {
		t.Errorf("Stats count %d admissions, the run recorded %d calls", admitted, len(calls))
	}
	for p, u := range perProc {
		if u == 0 {
			t.Errorf("process %d made no call: starved", p)
		}
	}
}
