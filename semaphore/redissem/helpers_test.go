package redissem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
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

// newSem builds a Semaphore closed when the test ends.
func newSem(t testing.TB, c goredis.UniversalClient, name string, n int64, per time.Duration, opts ...Option) *Semaphore {
	t.Helper()
	s, err := New(c, name, n, per, opts...)
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

// call is one call of a run: when Acquire returned (start), when Release
// was called (end), its units, the process that made it, and whether the
// fallback admitted it.
type call struct {
	start, end time.Time
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
// the release script after Release was called, so a call the local record
// counts at a start, the server counted at its own admission of the latest
// of those calls (see checkCompletion). What differs is the rate of the two
// clocks: Redis's TIME reads the wall clock of this same host, which NTP
// may slew by at most 500 ppm against the monotonic one, 0.1 ms over a
// 200 ms interval; 1 ms covers that with room.
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
	var peak int64
	for _, c := range calls {
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
