package semaphore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// newClient returns a go-redis client of its own (its own connection pool:
// a process of its own, as far as Redis can tell), with go-redis's default
// options, closed when the test ends.
func newClient(t testing.TB, addr string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newClusterClient is newClient for a Redis Cluster.
func newClusterClient(t testing.TB, addrs ...string) *goredis.ClusterClient {
	t.Helper()
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newRedisSem builds a RateSemaphore over Redis, closed when the test ends.
func newRedisSem(t testing.TB, c goredis.UniversalClient, name string, n int64, per time.Duration, opts ...Option) *RateSemaphore {
	t.Helper()
	s, err := redisNew(c, name, n, per, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// uniqueName returns a limit name unique to this run.
func uniqueName(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()) + "-" + hex.EncodeToString(b[:])
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// noLeaks checks, when the test ends (after the cleanups registered later
// have run: the semaphores closed, the clients closed, the server stopped),
// that no goroutine started during the test is left. Call it first.
func noLeaks(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

// waitUntil polls cond every millisecond for up to d (a test's wait for
// another goroutine to reach a state, not a timing claim).
func waitUntil(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// call is one call of a run: when Acquire returned (start), when Release
// was called (end), its units, the process that made it, and whether the
// fallback admitted it.
type call struct {
	start, end time.Time
	called     time.Time // when Acquire was called (hammer only): before the admission
	n          int64
	proc       int
	local      bool
}

// recorder collects calls from many goroutines.
type recorder struct {
	mu    sync.Mutex
	calls []call
}

func (r *recorder) add(c call) {
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
}

func (r *recorder) all() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

func filter(calls []call, keep func(call) bool) []call {
	var out []call
	for _, c := range calls {
		if keep(c) {
			out = append(out, c)
		}
	}
	return out
}

// clockTolerance is how much sooner than the interval a call's end may
// stop counting in checkCompletion. The instants are local monotonic
// readings, and no tolerance is needed for the order of events: the
// admission script ran (on the server's clock) before Acquire returned and
// the release script after Release was called (the release is sent after
// Release returns: later still), so a call the local record counts at a
// start, the server counted at its own admission of the latest of those
// calls (see checkCompletion). What differs is the rate of the two clocks:
// Redis's TIME reads the wall clock of this same host, which NTP may slew
// by at most 500 ppm against the monotonic one, 0.1 ms over a 200 ms
// interval; 1 ms covers that with room.
const clockTolerance = time.Millisecond

// checkCompletion checks the completion window's guarantee on calls: at
// every start s, the units of calls that started at or before s and had
// not ended by s − per are at most n (units in flight at s, plus units of
// calls that ended in (s − per, s]). Why local times suffice: let C be the
// calls counted at s_j and m the one among them Redis admitted last. Every
// call i in C was admitted by Redis no later than m, and ended on the
// server at e_i ≥ end_i > s_j − per ≥ a_m − per, since a_m ≤ start_m ≤
// s_j. So at a_m Redis counted all of C, and admitted m only if their units
// were at most n. It returns the peak count and the first violation.
func checkCompletion(calls []call, n int64, per time.Duration) (int64, error) {
	return checkCompletionFrom(calls, n, per, time.Time{})
}

// checkCompletionFrom is checkCompletion at the starts from from on (the
// calls before it still count at those starts).
func checkCompletionFrom(calls []call, n int64, per time.Duration, from time.Time) (int64, error) {
	var peak int64
	for _, c := range calls {
		if c.start.Before(from) {
			continue
		}
		var units int64
		for _, d := range calls {
			if !d.start.After(c.start) && d.end.After(c.start.Add(-per+clockTolerance)) {
				units += d.n
			}
		}
		peak = max(peak, units)
		if units > n {
			return peak, fmt.Errorf("at a start %v into the run: %d units in flight or ended within %v, limit %d",
				c.start.Sub(calls[0].start), units, per, n)
		}
	}
	return peak, nil
}

// checkStarts checks the start window's guarantee: the units of calls
// that started within any interval are at most n (margin 0). Local starts
// come after the server's admissions, and the gap between two local starts
// may be shorter than between the admissions by the spread of the
// admission's return; slack covers it.
func checkStarts(calls []call, n int64, per, slack time.Duration) (int64, error) {
	var peak int64
	for _, c := range calls {
		var units int64
		for _, d := range calls {
			if !d.start.After(c.start) && d.start.After(c.start.Add(-per+slack)) {
				units += d.n
			}
		}
		peak = max(peak, units)
		if units > n {
			return peak, fmt.Errorf("%d units started within %v of a start, limit %d", units, per, n)
		}
	}
	return peak, nil
}

// evalCalls returns how many EVALSHA and EVAL the server has run (INFO
// commandstats), every client together.
func evalCalls(t testing.TB, c *goredis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
			continue
		}
		_, rest, _ := strings.Cut(line, "calls=")
		v, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("commandstats line %q: %v", line, err)
		}
		total += n
	}
	return total
}

// TestCheckersCatchViolations makes sure the checkers of the runs can
// fail: a history one unit over the limit, in flight or ended within the
// interval, is caught; the same history spread out is not.
func TestCheckersCatchViolations(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	per := 200 * time.Millisecond
	inFlight := []call{{start: at(0), end: at(50), n: 1}, {start: at(10), end: at(60), n: 1}}
	if _, err := checkCompletion(inFlight, 1, per); err == nil {
		t.Error("two calls in flight at once passed a limit of 1")
	}
	ended := []call{{start: at(0), end: at(50), n: 1}, {start: at(200), end: at(210), n: 1}}
	if _, err := checkCompletion(ended, 1, per); err == nil {
		t.Error("a start 150 ms after an end passed a limit of 1 per 200 ms")
	}
	heavy := []call{{start: at(0), end: at(5), n: 2}, {start: at(100), end: at(105), n: 1}}
	if _, err := checkCompletion(heavy, 2, per); err == nil {
		t.Error("3 units passed a limit of 2")
	}
	ok := []call{{start: at(0), end: at(50), n: 1}, {start: at(251), end: at(260), n: 1}}
	if peak, err := checkCompletion(ok, 1, per); err != nil || peak != 1 {
		t.Errorf("a legal history: peak %d, %v", peak, err)
	}
	starts := []call{{start: at(0), n: 1}, {start: at(150), n: 1}}
	if _, err := checkStarts(starts, 1, per, time.Millisecond); err == nil {
		t.Error("two starts 150 ms apart passed 1 per 200 ms")
	}
	if _, err := checkStarts([]call{{start: at(0), n: 1}, {start: at(201), n: 1}}, 1, per, time.Millisecond); err != nil {
		t.Error(err)
	}
}
