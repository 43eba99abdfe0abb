package semaphore

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// TestReviewHostileInputsNeverPanic: huge and negative weights, MaxInt64
// durations and binary names give errors, never a panic or a hang.
func TestReviewHostileInputsNeverPanic(t *testing.T) {
	addr := redistest.Start(t).Addr()
	c := newClient(t, addr)
	ctx := ctxT(t, 10*time.Second)
	for _, iv := range []time.Duration{math.MaxInt64, -1, 0, 1, time.Duration(math.MinInt64)} {
		if s, err := redisNew(c, uniqueName(t), 1, iv); err == nil {
			done := make(chan error, 1)
			go func() { done <- s.Acquire(ctx, 1) }()
			select {
			case err := <-done:
				t.Logf("interval %v: Acquire %v", iv, err)
			case <-time.After(3 * time.Second):
				t.Errorf("interval %v: Acquire hangs", iv)
			}
			s.Close()
		}
	}
	for _, n := range []int64{math.MaxInt64, math.MinInt64, 1 << 53, 1<<53 + 1} {
		if s, err := redisNew(c, uniqueName(t), n, time.Second); err == nil {
			for _, w := range []int64{n, math.MaxInt64, 1 << 53, 1} {
				if err := s.Acquire(ctx, w); err == nil {
					s.Release(w)
				}
			}
			s.Close()
		}
	}
	for _, name := range []string{"\x00", "{", "}", "{x}", "\xff\xfe", string(make([]byte, 1<<16))} {
		s, err := redisNew(c, name, 2, time.Second)
		if err != nil {
			t.Logf("name %q: %v", name[:min(len(name), 8)], err)
			continue
		}
		if err := s.Acquire(ctx, 1); err != nil {
			t.Logf("name %q: Acquire %v", name[:min(len(name), 8)], err)
		} else {
			s.Release(1)
		}
		s.Close()
	}
	s := newRedisSem(t, c, uniqueName(t), 3, time.Second)
	for _, w := range []int64{-1, math.MinInt64, 4, math.MaxInt64} {
		if err := s.Acquire(ctx, w); err == nil {
			t.Errorf("Acquire(%d) admitted over a limit of 3", w)
		}
		if s.TryAcquire(w) {
			t.Errorf("TryAcquire(%d) admitted", w)
		}
	}
	if st := s.Stats(); st.InFlight != 0 {
		t.Errorf("refused calls left %d units in flight", st.InFlight)
	}
	// the refused ones left no trace: 3 units still fit
	if !s.TryAcquire(3) {
		t.Error("refused calls left units taken in Redis")
	}
}

// reviewSpan is one admitted call, as the caller saw it.
type reviewSpan struct {
	w          int64
	start, end time.Time
}

// TestReviewFleetCompletionInvariantUnderCancels: four processes over one
// Redis, random weights, contexts cancelled at random moments and random
// deadlines, a Pause and a SCRIPT FLUSH mid-run. Every call's span is
// recorded as its caller saw it (inside the span Redis counts), and at
// every admission instant: units in flight + units ended in the last Per ≤ N.
func TestReviewFleetCompletionInvariantUnderCancels(t *testing.T) {
	srv := redistest.Start(t)
	name := uniqueName(t)
	const n, per = 6, 300 * time.Millisecond
	var sems []*RateSemaphore
	for range 4 {
		sems = append(sems, newRedisSem(t, newClient(t, srv.Addr()), name, n, per))
	}
	var mu sync.Mutex
	var spans []reviewSpan
	stop := time.Now().Add(4 * time.Second)
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			s := sems[g%len(sems)]
			for time.Now().Before(stop) {
				w := 1 + rng.Int64N(3)
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(400))*time.Millisecond)
				if rng.IntN(3) == 0 {
					go func(d time.Duration) { time.Sleep(d); cancel() }(time.Duration(rng.IntN(50)) * time.Millisecond)
				}
				err := s.Acquire(ctx, w)
				start := time.Now()
				cancel()
				if err != nil {
					continue
				}
				time.Sleep(time.Duration(rng.IntN(60)) * time.Millisecond)
				end := time.Now()
				s.Release(w)
				mu.Lock()
				spans = append(spans, reviewSpan{w, start, end})
				mu.Unlock()
			}
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	sems[0].Pause(time.Now().Add(200 * time.Millisecond))
	time.Sleep(1000 * time.Millisecond)
	if err := newClient(t, srv.Addr()).ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	sort.Slice(spans, func(i, j int) bool { return spans[i].start.Before(spans[j].start) })
	for _, a := range spans {
		var u int64
		for _, b := range spans {
			if !b.start.After(a.start) && b.end.Add(per).After(a.start) {
				u += b.w
			}
		}
		if u > n {
			t.Fatalf("at %v: %d units in flight or ended within %v, limit %d (of %d calls)", a.start.Format("15:04:05.000000"), u, per, n, len(spans))
		}
	}
	t.Logf("%d calls admitted", len(spans))
}

// TestReviewFixedCompletionFleet: the same with redisrate.NewSemaphoreWithPolicy over a
// fixed completion window: per aligned window, calls whose span touches it
// ≤ N.
func TestReviewFixedCompletionFleet(t *testing.T) {
	addr := redistest.Start(t).Addr()
	name := uniqueName(t)
	const n, per = 5, 250 * time.Millisecond
	var sems []*RateSemaphore
	for range 3 {
		s, err := redisNewPolicy(newClient(t, addr), name, window.NewFixedCompletion(window.Limit{N: n, Per: per}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		sems = append(sems, s)
	}
	var mu sync.Mutex
	var spans []reviewSpan
	stop := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for g := range 9 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			s := sems[g%len(sems)]
			for time.Now().Before(stop) {
				w := 1 + rng.Int64N(2)
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(300))*time.Millisecond)
				err := s.Acquire(ctx, w)
				start := time.Now()
				cancel()
				if err != nil {
					continue
				}
				time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
				end := time.Now()
				s.Release(w)
				mu.Lock()
				spans = append(spans, reviewSpan{w, start, end})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	wins := map[int64]int64{}
	for _, s := range spans {
		for k := s.start.UnixNano() / int64(per); k <= s.end.UnixNano()/int64(per); k++ {
			wins[k] += s.w
		}
	}
	for k, u := range wins {
		if u > n {
			t.Errorf("aligned window %d: %d units touch it, limit %d", k, u, n)
		}
	}
	t.Logf("%d calls, %d windows", len(spans), len(wins))
}

// TestReviewMismatchedCapAcrossProcesses: two processes opening one name,
// one with a concurrency cap of 1 and one without, must not silently
// enforce the looser one.
func TestReviewMismatchedCapAcrossProcesses(t *testing.T) {
	addr := redistest.Start(t).Addr()
	name := uniqueName(t)
	a := newRedisSem(t, newClient(t, addr), name, 5, time.Minute, WithMaxUnitsInFlight(1))
	b := newRedisSem(t, newClient(t, addr), name, 5, time.Minute)
	ctx := ctxT(t, 5*time.Second)
	if err := a.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	err := b.Acquire(ctx, 1)
	if err == nil {
		t.Fatal("a process without the cap admitted a second call in flight while another process caps the name at 1: the looser limit is enforced silently")
	}
	if !errors.Is(err, ratesem.ErrLimitMismatch) {
		t.Logf("error: %v", err)
	}
}

// TestReviewAcquireAfterRedisDeathReturns: Acquire with no deadline on a
// dead server returns (ratesem.ErrUnavailable) instead of blocking forever, and
// after Close every Acquire returns ratesem.ErrClosed.
func TestReviewAcquireAfterRedisDeathReturns(t *testing.T) {
	srv := redistest.Start(t)
	s, err := redisNew(newClient(t, srv.Addr()), uniqueName(t), 1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Acquire(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	done := make(chan error, 2)
	go func() { done <- s.Acquire(context.Background(), 1) }()
	select {
	case err := <-done:
		if !errors.Is(err, ratesem.ErrUnavailable) {
			t.Errorf("dead Redis: %v", err)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("Acquire blocks forever on a dead Redis")
	}
	go func() { done <- s.Acquire(context.Background(), 1) }()
	time.Sleep(50 * time.Millisecond)
	s.Close()
	select {
	case err := <-done:
		t.Logf("after Close: %v", err)
	case <-time.After(3 * time.Second):
		t.Fatal("Acquire blocks after Close")
	}
	if err := s.Acquire(context.Background(), 1); !errors.Is(err, ratesem.ErrClosed) {
		t.Errorf("after Close: %v; want ratesem.ErrClosed", err)
	}
	s.Release(1)
}

// TestReviewOverlongNameIsNotAnOutage: a name too long for Redis is a
// caller's mistake. redisrate.NewSemaphore accepts it, and every Acquire then fails with
// ratesem.ErrUnavailable (as if Redis were down); with WithFallback every call runs
// on the local fallback forever, sharing nothing across the fleet, silently.
func TestReviewOverlongNameIsNotAnOutage(t *testing.T) {
	addr := redistest.Start(t).Addr()
	name := string(make([]byte, 600))
	s, err := redisNew(newClient(t, addr), name, 2, time.Second, WithFallback(0.5))
	if err != nil {
		t.Logf("redisrate.NewSemaphore refuses it: %v", err)
		return
	}
	defer s.Close()
	err = s.Acquire(ctxT(t, 5*time.Second), 1)
	st := s.Stats()
	if errors.Is(err, ratesem.ErrUnavailable) || st.FallbackAdmitted > 0 || st.Unavailable {
		t.Fatalf("a 600-byte name: redisrate.NewSemaphore ok, Acquire %v, Stats %+v: a caller's error taken for a Redis outage (fallback used, nothing shared)", err, st)
	}
}
