package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// call is one admitted call of a hammering run, with the instants the
// scripts recorded on the server's clock (µs): its admission and, for the
// completion window, its release.
type call struct {
	start, end int64
	n          int64
}

// invariant checks a window's guarantee on a history; it returns the
// highest count it saw and an error at the first violation.
type invariant func(calls []call) (int64, error)

// completionInvariant: at every admission s, the units of calls admitted at
// or before s that were in flight at s or ended in (s−Per, s] are at most N.
// The instants are the server's (TIME inside the scripts, one clock for all
// clients, never going back for one limiter), so no tolerance is needed.
// Calls admitted in the same microsecond count for each other whatever
// their order: at that instant, after both, the window held both.
func completionInvariant(n int64, per time.Duration) invariant {
	p := per.Microseconds()
	return func(calls []call) (int64, error) {
		var peak int64
		for _, c := range calls {
			var units int64
			for _, d := range calls {
				if d.start <= c.start && d.end > c.start-p {
					units += d.n
				}
			}
			peak = max(peak, units)
			if units > n {
				return peak, fmt.Errorf("at %d µs: %d units in flight or ended within Per, limit %d", c.start, units, n)
			}
		}
		return peak, nil
	}
}

// slidingLogInvariant: the units of calls started in (s−Per−margin, s] are
// at most N at every start s.
func slidingLogInvariant(n int64, per, margin time.Duration) invariant {
	span := (per + margin).Microseconds()
	return func(calls []call) (int64, error) {
		var peak int64
		for _, c := range calls {
			var units int64
			for _, d := range calls {
				if d.start <= c.start && d.start > c.start-span {
					units += d.n
				}
			}
			peak = max(peak, units)
			if units > n {
				return peak, fmt.Errorf("at %d µs: %d units started within Per+margin, limit %d", c.start, units, n)
			}
		}
		return peak, nil
	}
}

// alignedInvariant: at most N units start in each window floor(s/Per).
func alignedInvariant(n int64, per time.Duration) invariant {
	p := per.Microseconds()
	return func(calls []call) (int64, error) {
		count := map[int64]int64{}
		var peak int64
		for _, c := range calls {
			count[c.start/p] += c.n
			peak = max(peak, count[c.start/p])
			if count[c.start/p] > n {
				return peak, fmt.Errorf("window %d: %d units, limit %d", c.start/p, count[c.start/p], n)
			}
		}
		return peak, nil
	}
}

// slidingCounterInvariant: at every start s, the units of the previous
// aligned window weighted by its overlap with (s−Per, s], plus the units
// started in s's window up to s, are at most N (in exact integers:
// prev·(Per−elapsed) + cur·Per ≤ N·Per). Calls started in the same
// microsecond count for each other, as in completionInvariant. The count
// it returns is the weighted count rounded up.
func slidingCounterInvariant(n int64, per time.Duration) invariant {
	p := per.Microseconds()
	return func(calls []call) (int64, error) {
		var peak int64
		for _, c := range calls {
			idx := c.start / p
			var prev, cur int64
			for _, d := range calls {
				switch {
				case d.start/p == idx-1:
					prev += d.n
				case d.start/p == idx && d.start <= c.start:
					cur += d.n
				}
			}
			weighted := prev*(p-(c.start-idx*p)) + cur*p
			peak = max(peak, (weighted+p-1)/p)
			if weighted > n*p {
				return peak, fmt.Errorf("at %d µs: %d units in the previous window (weighted), %d in this one, limit %d", c.start, prev, cur, n)
			}
		}
		return peak, nil
	}
}

// bucketInvariant: the units started in any closed span [a, b] are at most
// burst + floor((b−a)·N/Per): the bucket or the GCRA's tolerance, plus the
// refill during the span. The count it returns is the largest excess of
// units over the refill, whose bound is the burst.
func bucketInvariant(n, burst int64, per time.Duration) invariant {
	p := per.Microseconds()
	return func(calls []call) (int64, error) {
		cs := slices.Clone(calls)
		slices.SortFunc(cs, func(a, b call) int { return int(a.start - b.start) })
		var peak int64
		for i := range cs {
			var units int64
			for j := i; j < len(cs); j++ {
				units += cs[j].n
				refill := (cs[j].start - cs[i].start) * n / p
				peak = max(peak, units-refill)
				if bound := burst + refill; units > bound {
					return peak, fmt.Errorf("[%d, %d] µs: %d units, bound %d", cs[i].start, cs[j].start, units, bound)
				}
			}
		}
		return peak, nil
	}
}

// TestInvariantCheckersCatchViolations makes sure the checkers of the
// hammering test can fail: each is given a history one unit over its bound.
func TestInvariantCheckersCatchViolations(t *testing.T) {
	per := 100 * time.Millisecond
	cases := map[string]struct {
		inv   invariant
		calls []call
	}{
		"completion": {completionInvariant(2, per), []call{{0, 50_000, 1}, {10, 20, 1}, {100_010, 100_011, 1}}},
		"sliding log": {slidingLogInvariant(2, per, 10*time.Millisecond), []call{
			{0, 0, 1}, {50_000, 0, 1}, {109_999, 0, 1}}},
		"aligned": {alignedInvariant(2, per), []call{{100_000, 0, 1}, {150_000, 0, 1}, {199_999, 0, 1}}},
		"bucket":  {bucketInvariant(2, 2, per), []call{{0, 0, 2}, {49_999, 0, 1}}},
		"sliding counter": {slidingCounterInvariant(2, per), []call{
			{99_999, 0, 2}, {100_000, 0, 0}, {149_999, 0, 1}}},
		"bucket 2": {bucketInvariant(2, 1, per), []call{{0, 0, 1}, {50_000, 0, 1}, {99_999, 0, 1}}},
	}
	for name, c := range cases {
		if _, err := c.inv(c.calls); err == nil {
			t.Errorf("%s: a history over the bound passed: %v", name, c.calls)
		}
		if _, err := c.inv(c.calls[:len(c.calls)-1]); err != nil {
			t.Errorf("%s: a history within the bound failed: %v", name, err)
		}
	}
}

// TestHammer runs several clients, each with its own go-redis client and
// connections, against one limiter in real time, for every kind of window:
// they take random weights, hold completion-window calls for a random time
// and release them, and sleep after a refusal as told (capped, to keep the
// pressure on). The history, stamped by the scripts with the server's
// clock, must keep the window's guarantee; and the limit must have been
// reached, or the run proved nothing.
func TestHammer(t *testing.T) {
	addr := sharedAddr(t)
	const clients = 6
	per := 100 * time.Millisecond
	kinds := []struct {
		name string
		mk   func(c goredis.UniversalClient, name string) (*Window, error)
		inv  invariant
		n    int64 // the most units the invariant can count
	}{
		{"Completion", func(c goredis.UniversalClient, name string) (*Window, error) {
			return NewCompletion(c, name, Limit{N: 4, Per: per}, WithLease(5*time.Second))
		}, completionInvariant(4, per), 4},
		{"SlidingLog", func(c goredis.UniversalClient, name string) (*Window, error) {
			return NewSlidingLog(c, name, Limit{N: 5, Per: per}, 10*time.Millisecond)
		}, slidingLogInvariant(5, per, 10*time.Millisecond), 5},
		{"GCRA", func(c goredis.UniversalClient, name string) (*Window, error) {
			return NewGCRA(c, name, Limit{N: 5, Per: per}, 3)
		}, bucketInvariant(5, 3, per), 3},
		{"TokenBucket", func(c goredis.UniversalClient, name string) (*Window, error) {
			return NewTokenBucket(c, name, Limit{N: 5, Per: per}, 3)
		}, bucketInvariant(5, 3, per), 3},
		{"FixedWindow", func(c goredis.UniversalClient, name string) (*Window, error) {
			return NewFixedWindow(c, name, Limit{N: 5, Per: per})
		}, alignedInvariant(5, per), 5},
		{"SlidingWindowCounter", func(c goredis.UniversalClient, name string) (*Window, error) {
			return NewSlidingWindowCounter(c, name, Limit{N: 5, Per: per})
		}, slidingCounterInvariant(5, per), 5},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			name := uniqueName(t)
			ctx := ctxT(t)
			var (
				mu      sync.Mutex
				calls   []call
				refused int
			)
			stop := time.Now().Add(time.Second)
			var wg sync.WaitGroup
			for i := range clients {
				w, err := k.mk(newClient(t, addr), name)
				if err != nil {
					t.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(i), 99))
					for time.Now().Before(stop) {
						n := 1 + r.Int64N(2)
						d, err := w.Admit(ctx, n)
						if err != nil {
							t.Error(err)
							return
						}
						if !d.OK {
							mu.Lock()
							refused++
							mu.Unlock()
							sleep := min(d.Wait, 5*time.Millisecond)
							if d.InFlight {
								sleep = time.Millisecond
							}
							time.Sleep(sleep + time.Duration(r.Int64N(int64(time.Millisecond))))
							continue
						}
						c := call{start: d.At.UnixMicro(), n: n}
						time.Sleep(time.Duration(r.Int64N(int64(10 * time.Millisecond))))
						end, err := w.release(context.Background(), d.Token)
						if err != nil {
							t.Error(err)
							return
						}
						c.end = end
						mu.Lock()
						calls = append(calls, c)
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			peak, err := k.inv(calls)
			t.Logf("%s, %d clients: %d calls admitted, %d refusals, peak count %d (limit %d)", k.name, clients, len(calls), refused, peak, k.n)
			if err != nil {
				t.Fatal(err)
			}
			if refused == 0 || peak < k.n {
				t.Fatalf("the limit was never reached (peak %d of %d, %d refusals): the run proved nothing", peak, k.n, refused)
			}
		})
	}
}
