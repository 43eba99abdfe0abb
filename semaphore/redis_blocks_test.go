package semaphore

import (
	"testing"
	"time"

	"github.com/ratesem/ratesem/internal/engine"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// withBlocks is redisrate.WithBlocks (see export_test.go).
var withBlocks = engine.WithBlocks

// TestRedisBlocksFleet: four processes with blocks on (8 calls, a hold of
// 50 ms) hammer one completion limit small enough to bind (20 units per
// 200 ms, calls of 1 and 2 units: two signatures); the completion
// guarantee holds at every start over every call, and most calls came
// from blocks (few admissions per call).
func TestRedisBlocksFleet(t *testing.T) {
	addr := redistest.Start(t).Addr()
	name := uniqueName(t)
	const (
		N, P, G = 20, 4, 6
		per     = 200 * time.Millisecond
		run     = 2 * time.Second
	)
	sems := make([]*RateSemaphore, P)
	for i := range sems {
		sems[i] = newRedisSem(t, newClient(t, addr), name, N, per, withBlocks(8, 50*time.Millisecond))
	}
	calls := hammer(t, sems, G, run, nil)
	peak, err := checkCompletion(calls, N, per)
	if err != nil {
		t.Fatal(err)
	}
	var admits uint64
	for i, s := range sems {
		st := s.Stats()
		admits += st.RedisAdmits
		if st.InFlight != 0 || st.RedisErrors != 0 || st.ReleasesDropped != 0 {
			t.Errorf("process %d: %+v", i, st)
		}
	}
	t.Logf("%d calls (peak %d of %d), %d admission round trips", len(calls), peak, N, admits)
	if len(calls) < 50 {
		t.Errorf("only %d calls", len(calls))
	}
}

// TestRedisBlocksFixedFleet: the same over a fixed completion window
// (window.NewFixedCompletion): in every window aligned to the epoch, the
// units of the calls whose span touches it are at most N.
func TestRedisBlocksFixedFleet(t *testing.T) {
	addr := redistest.Start(t).Addr()
	name := uniqueName(t)
	const (
		N, P, G = 20, 4, 6
		per     = 200 * time.Millisecond
		run     = 2 * time.Second
	)
	sems := make([]*RateSemaphore, P)
	for i := range sems {
		s, err := redisNewPolicy(newClient(t, addr), name, window.NewFixedCompletion(window.Limit{N: N, Per: per}), withBlocks(8, 50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		sems[i] = s
	}
	calls := hammer(t, sems, G, run, nil)
	wins := map[int64]int64{}
	for _, c := range calls {
		for k := c.start.UnixNano() / int64(per); k <= c.end.UnixNano()/int64(per); k++ {
			wins[k] += c.n
		}
	}
	var peak int64
	for k, u := range wins {
		peak = max(peak, u)
		if u > N {
			t.Errorf("aligned window at %v: %d units touch it, limit %d", time.Unix(0, k*int64(per)).UTC(), u, N)
		}
	}
	t.Logf("%d calls, %d windows, peak %d of %d", len(calls), len(wins), peak, N)
	if len(calls) < 50 {
		t.Errorf("only %d calls", len(calls))
	}
}
