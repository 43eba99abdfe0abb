package semaphore

import (
	"testing"
	"time"

	"github.com/ratesem/ratesem/redistest"
)

// TestRedisFallbackRestartBackWithinAPer: 3 processes × 4 goroutines share
// 10 units per 2 s (WithFallback(1/3)); redis-server is stopped for 1.5 s,
// while the processes wait for the window, and started again empty, well
// within the time the processes know the scope's epoch key must exist. The
// waiters fall back (3 calls each), and the first round trip after the
// restart, the carry of the fallback's calls, finds the whole loss and
// holds the limit from then. From a Per after the stop on, every start sees
// at most 10 units in flight or ended within 2 s (fallback and Redis
// together); the first call Redis admits after the restart comes within
// about a Per of the restart (the hold overlaps the fallback's window
// draining), and the fleet then runs at full rate (20 calls within a Per
// and 300 ms). Before: the carry did not look at the epoch key; the loss
// was found only by the first admission, after the fallback's window had
// drained (a Per after the fallback's calls), and held a Per more: the
// first call came 3.6 s after the restart.
func TestRedisFallbackRestartBackWithinAPer(t *testing.T) {
	noLeaks(t)
	srv := redistest.Start(t)
	name := uniqueName(t)
	const (
		N, P, G = 10, 3, 4
		per     = 2 * time.Second
	)
	sems := make([]*RateSemaphore, P)
	for i := range sems {
		sems[i] = newRedisSem(t, newClient(t, srv.Addr()), name, N, per, WithFallback(1.0/3), WithLease(10*time.Second), WithRedisTimeout(250*time.Millisecond))
	}
	r := handoverRun(t, srv, sems, G, time.Second, 1500*time.Millisecond, 5500*time.Millisecond)
	from := r.stopAt.Add(per + 100*time.Millisecond)
	var local int
	var first time.Time // the first call of Redis after the restart
	for _, c := range sortByStart(r.calls) {
		if c.local {
			local++
		} else if c.start.After(r.started) && first.IsZero() {
			first = c.start
		}
	}
	var peak int64
	for _, c := range r.calls {
		if c.start.Before(from) {
			continue
		}
		var units int64
		for _, d := range r.calls {
			if !d.start.After(c.start) && d.end.After(c.start.Add(-per+clockTolerance)) {
				units += d.n
			}
		}
		peak = max(peak, units)
		if units > N {
			t.Fatalf("at a start %v after the restart: %d units in flight or ended within %v (fallback and Redis together), limit %d",
				c.start.Sub(r.started).Round(time.Millisecond), units, per, N)
		}
	}
	if local == 0 || first.IsZero() {
		t.Fatalf("%d calls of the fallback, first of Redis after the restart %v: the run did not cover the hand-over", local, first)
	}
	full := len(filter(r.calls, func(c call) bool {
		return !c.local && !c.start.Before(first) && c.start.Before(first.Add(per+300*time.Millisecond))
	}))
	var lost uint64
	for _, s := range sems {
		lost += s.Stats().StateLost
	}
	t.Logf("%d calls, %d of the fallback; the first of Redis %v after the restart, %d within a Per and 300 ms of it; peak %d of %d; %d admissions found the state lost",
		len(r.calls), local, first.Sub(r.started).Round(time.Millisecond), full, peak, N, lost)
	if lost == 0 {
		t.Error("no admission found the state lost")
	}
	if d := first.Sub(r.started); d > per+500*time.Millisecond {
		t.Errorf("the first call of Redis %v after the restart; want at most a Per and 500 ms", d.Round(time.Millisecond))
	}
	if full < 2*N {
		t.Errorf("%d calls within a Per and 300 ms of the first; want %d (full rate)", full, 2*N)
	}
	for p, s := range sems {
		if st := s.Stats(); st.Unavailable || st.InFlight != 0 || st.FallbackCarried == 0 {
			t.Errorf("process %d: %+v; want the fallback's calls carried, Redis answering, nothing in flight", p, st)
		}
	}
}
