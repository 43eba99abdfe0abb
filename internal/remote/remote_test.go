package remote

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/rstore"
	"github.com/ratesem/ratesem/window"
)

func init() {
	// The engine's tests run on the fake store: a completion window whose
	// capacity is N, whatever rstore says.
	capacity = func(s rstore.Spec) int64 { return s.Limit.N }
}

func spec(n int64, per time.Duration) *rstore.Spec {
	return &rstore.Spec{Kind: rstore.Completion, Limit: window.Limit{N: n, Per: per}}
}

func charge(rule string, s *rstore.Spec, w int64) rstore.Charge {
	return rstore.Charge{Rule: rule, Spec: s, Weight: w}
}

// newEngine returns an Engine over f, closed when the test ends.
func newEngine(t *testing.T, f *fakeStore, cfg Config) *Engine {
	t.Helper()
	cfg.Store = f
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

var errSentinel = errors.New("test: deadline")

func TestNewChecksConfig(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Store: newFake(), Timeout: -1},
		{Store: newFake(), ReleaseQueue: -1},
		{Store: newFake(), MaxPause: -1},
	} {
		if e, err := New(cfg); err == nil {
			_ = e.Close()
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

func TestChargesChecked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		e := newEngine(t, f, Config{})
		s := spec(3, time.Second)
		ctx := context.Background()
		if _, err := e.Acquire(ctx, "s", []rstore.Charge{charge("a", s, -1)}); !errors.Is(err, ratesem.ErrNegativeWeight) {
			t.Fatalf("negative weight: %v", err)
		}
		if _, err := e.Acquire(ctx, "s", []rstore.Charge{charge("a", s, 4)}); !errors.Is(err, ratesem.ErrWeightTooLarge) {
			t.Fatalf("weight above capacity: %v", err)
		}
		if _, err := e.Acquire(ctx, "s", []rstore.Charge{{Rule: "a", Weight: 1}}); err == nil {
			t.Fatal("nil Spec accepted")
		}
		c, err := e.Acquire(ctx, "s", nil)
		if err != nil {
			t.Fatal(err)
		}
		c.Release()
		if a, _, _ := f.counts(); a != 0 {
			t.Fatalf("%d round trips for invalid or empty calls", a)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Error("a second Release did not panic")
				}
			}()
			c.Release()
		}()
	})
}

// TestAdmittedAtOnceCostsTwoRoundTrips: a call admitted at once costs one
// admission and one release, and Release returns before the release
// reaches Redis.
func TestAdmittedAtOnceCostsTwoRoundTrips(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		e := newEngine(t, f, Config{})
		s := spec(10, time.Second)
		for range 5 {
			c, err := e.Acquire(context.Background(), "s", []rstore.Charge{charge("a", s, 1), charge("b", s, 2)})
			if err != nil {
				t.Fatal(err)
			}
			c.Release()
		}
		synctest.Wait()
		if a, r, cn := f.counts(); a != 5 || r != 5 || cn != 0 {
			t.Fatalf("admits %d, releases %d, cancels %d; want 5, 5, 0", a, r, cn)
		}
		if st := e.Stats(); st.Admitted != 5 || st.InFlight != 0 || st.RedisAdmits != 5 {
			t.Fatalf("%+v", st)
		}
	})
}

// TestFIFOAcrossLimiters: B waits for a (held) and b; C, which needs only
// b, arrives after B and must not overtake it on b, though b is free.
func TestFIFOAcrossLimiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		e := newEngine(t, f, Config{})
		s := spec(1, time.Second)
		ctx := context.Background()
		h, err := e.Acquire(ctx, "s", []rstore.Charge{charge("a", s, 1)})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var order []string
		admit := func(name string, cs ...rstore.Charge) {
			c, err := e.Acquire(ctx, "s", cs)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
			c.Release()
		}
		var wg sync.WaitGroup
		wg.Go(func() { admit("B", charge("a", s, 1), charge("b", s, 1)) })
		synctest.Wait()
		wg.Go(func() { admit("C", charge("b", s, 1)) })
		time.Sleep(3 * time.Second)
		mu.Lock()
		if len(order) != 0 {
			t.Fatalf("admitted %v while a is held: C overtook B", order)
		}
		mu.Unlock()
		h.Release()
		wg.Wait()
		if len(order) != 2 || order[0] != "B" {
			t.Fatalf("order %v; want B then C", order)
		}
	})
}

// TestManyChargesNeverDeadlock: goroutines with random sets of three
// limiters, each taking 1 or 2 units of 2, all finish (synctest would
// report a deadlock), and every process-side count is back to zero.
func TestManyChargesNeverDeadlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		e := newEngine(t, f, Config{})
		s := spec(2, 50*time.Millisecond)
		rules := []string{"a", "b", "c"}
		var wg sync.WaitGroup
		var admitted atomic.Int64
		for range 30 {
			wg.Go(func() {
				for range 10 {
					var cs []rstore.Charge
					for _, r := range rules {
						if rand.IntN(2) == 0 {
							cs = append(cs, charge(r, s, 1+rand.Int64N(2)))
						}
					}
					if len(cs) == 0 {
						cs = append(cs, charge("a", s, 1))
					}
					rand.Shuffle(len(cs), func(i, j int) { cs[i], cs[j] = cs[j], cs[i] })
					c, err := e.Acquire(context.Background(), "s", cs)
					if err != nil {
						t.Error(err)
						return
					}
					admitted.Add(1)
					time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
					c.Release()
				}
			})
		}
		wg.Wait()
		synctest.Wait()
		st := e.Stats()
		if admitted.Load() != 300 || st.InFlight != 0 || st.Waiting != 0 || f.inFlight() != 0 {
			t.Fatalf("admitted %d; %+v; fake in flight %d", admitted.Load(), st, f.inFlight())
		}
		e.mu.Lock()
		left := len(e.lims)
		e.mu.Unlock()
		time.Sleep(time.Second) // every notBefore passes
		t.Logf("%d admissions, %d admission round trips, %d limiters left", st.Admitted, st.RedisAdmits, left)
	})
}

// TestDeadlineFailsFast: when Redis's wait ends after ctx's deadline,
// Acquire fails at once with Config.ErrDeadline and
// context.DeadlineExceeded, and the next caller with the same deadline
// fails without a round trip (the wait handed on).
func TestDeadlineFailsFast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		e := newEngine(t, f, Config{ErrDeadline: errSentinel})
		s := spec(1, 10*time.Second)
		cs := []rstore.Charge{charge("a", s, 1)}
		c, err := e.Acquire(context.Background(), "s", cs)
		if err != nil {
			t.Fatal(err)
		}
		c.Release()
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		begin := time.Now()
		for i := range 2 {
			_, err := e.Acquire(ctx, "s", cs)
			if !errors.Is(err, errSentinel) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%v; want the sentinel and DeadlineExceeded", err)
			}
			if d := time.Since(begin); d != 0 {
				t.Fatalf("attempt %d failed after %v, not at once", i, d)
			}
		}
		if a, _, _ := f.counts(); a != 2 {
			t.Fatalf("%d admission round trips; want 2 (the second caller used the wait handed on)", a)
		}
	})
}

// TestReleaseNeverBlocks: with Redis stalled on every release, Release
// returns at once; beyond the queue releases are dropped and counted;
// Close gives up on the rest within twice Timeout, and no goroutine is
// left (synctest reports one).
func TestReleaseNeverBlocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		stall := make(chan struct{})
		f.releaseHook = func(ctx context.Context) error {
			select {
			case <-stall:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		e, err := New(Config{Store: f, ReleaseQueue: 2, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		s := spec(100, time.Second)
		var calls []*Call
		for range 10 {
			c, err := e.Acquire(context.Background(), "s", []rstore.Charge{charge("a", s, 1)})
			if err != nil {
				t.Fatal(err)
			}
			calls = append(calls, c)
		}
		begin := time.Now()
		for _, c := range calls {
			c.Release()
			synctest.Wait() // a worker takes it, if one is free
		}
		if d := time.Since(begin); d != 0 {
			t.Fatalf("Release blocked %v", d)
		}
		// 4 workers stalled, 2 queued, 4 dropped.
		if st := e.Stats(); st.ReleasesDropped != 4 || st.InFlight != 0 {
			t.Fatalf("%+v; want 4 releases dropped", st)
		}
		begin = time.Now()
		_ = e.Close()
		if d := time.Since(begin); d > 2*time.Second {
			t.Fatalf("Close took %v", d)
		}
		st := e.Stats()
		if st.ReleasesDropped+st.ReleasesFailed != 10 {
			t.Fatalf("%+v; want all 10 releases dropped or failed", st)
		}
		close(stall)
	})
}

// TestCancelledAdmissionLeavesNoTrace: the caller leaves while its
// admission is on the way; when Redis admits it, the engine cancels it.
func TestCancelledAdmissionLeavesNoTrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		gate := make(chan struct{})
		f.admitHook = func(context.Context) error { <-gate; return nil }
		e := newEngine(t, f, Config{})
		s := spec(1, time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if _, err := e.Acquire(ctx, "s", []rstore.Charge{charge("a", s, 1)}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%v", err)
		}
		close(gate)
		synctest.Wait()
		if _, _, cn := f.counts(); cn != 1 || f.inFlight() != 0 {
			t.Fatalf("cancels %d, in flight %d", cn, f.inFlight())
		}
		if st := e.Stats(); st.Cancelled != 1 || st.Admitted != 0 || st.InFlight != 0 {
			t.Fatalf("%+v", st)
		}
	})
}

// TestAdmittedAsCtxEnds: the context ends between Redis's admission and
// the caller's check: ctx.Err(), and the admission is cancelled.
func TestAdmittedAsCtxEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		ctx, cancel := context.WithCancel(context.Background())
		e := newEngine(t, f, Config{TestAfterAdmit: cancel})
		if _, err := e.Acquire(ctx, "s", []rstore.Charge{charge("a", spec(1, time.Second), 1)}); !errors.Is(err, context.Canceled) {
			t.Fatalf("%v", err)
		}
		if f.inFlight() != 0 || e.Stats().Cancelled != 1 {
			t.Fatalf("in flight %d, %+v", f.inFlight(), e.Stats())
		}
	})
}

// TestOnlyTheHeadTalksToRedis: 200 goroutines wait on 5 per 200 ms for a
// second: about two round trips per admission, not one per goroutine.
func TestOnlyTheHeadTalksToRedis(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		e := newEngine(t, f, Config{})
		s := spec(5, 200*time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var wg sync.WaitGroup
		var admitted atomic.Int64
		for range 200 {
			wg.Go(func() {
				c, err := e.Acquire(ctx, "s", []rstore.Charge{charge("a", s, 1)})
				if err == nil {
					admitted.Add(1)
					time.Sleep(time.Millisecond)
					c.Release()
				}
			})
		}
		wg.Wait()
		st := e.Stats()
		t.Logf("%d admitted, %d admission round trips", admitted.Load(), st.RedisAdmits)
		if admitted.Load() < 20 {
			t.Errorf("only %d admitted in 1 s at 5 per 200 ms", admitted.Load())
		}
		if bound := 3*uint64(admitted.Load()) + 20; st.RedisAdmits > bound {
			t.Errorf("%d admission round trips for %d admissions (bound %d)", st.RedisAdmits, admitted.Load(), bound)
		}
	})
}

// TestReleaseWaitIsCappedAndWoken: another process holds the limit (a
// call the fake knows, not this engine's): the head re-asks every Per/4,
// not after the lease; a release of this process wakes it at once.
func TestReleaseWaitIsCappedAndWoken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		e := newEngine(t, f, Config{})
		s := spec(1, 2*time.Second)
		cs := []rstore.Charge{charge("a", s, 1)}
		other, err := f.Admit(context.Background(), "s", cs)
		if err != nil || !other.OK {
			t.Fatal(other, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2100*time.Millisecond)
		defer cancel()
		if _, err := e.Acquire(ctx, "s", cs); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%v", err)
		}
		// Asked at 0, then about every 500 ms: 0, 0.5, 1, 1.5, 2.
		if a, _, _ := f.counts(); a < 4 || a > 6 {
			t.Fatalf("%d admission round trips in 2.1 s with Per/4 = 500 ms; want about 5", a)
		}
		// Now the holder is this process: its release wakes the head.
		_ = f.end("s", other.Token, false)
		mine, err := e.Acquire(context.Background(), "s", cs)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan time.Time, 1)
		go func() {
			c, err := e.Acquire(context.Background(), "s", cs)
			if err != nil {
				t.Error(err)
			}
			done <- time.Now()
			c.Release()
		}()
		time.Sleep(100 * time.Millisecond)
		released := time.Now()
		mine.Release()
		at := <-done
		// Woken at the release, told the exact wait (2 s), admitted then
		// (+ jitter ≤ 5 ms + MinRetry ≤ 2 ms), not 400 ms later.
		if d := at.Sub(released); d < 2*time.Second || d > 2*time.Second+10*time.Millisecond {
			t.Fatalf("admitted %v after the release; want 2 s after", d)
		}
	})
}

// TestPause holds this process's waiters at once and writes the pause to
// Redis; MaxPause caps it.
func TestPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		e := newEngine(t, f, Config{MaxPause: time.Second})
		c := charge("a", spec(5, time.Second), 1)
		e.Pause("s", c, time.Hour)
		synctest.Wait()
		if f.pauses != 1 {
			t.Fatalf("%d pauses in Redis", f.pauses)
		}
		if _, ok, err := e.TryAcquire("s", []rstore.Charge{c}); ok || err != nil {
			t.Fatalf("TryAcquire during a pause: %v %v", ok, err)
		}
		begin := time.Now()
		call, err := e.Acquire(context.Background(), "s", []rstore.Charge{c})
		if err != nil {
			t.Fatal(err)
		}
		call.Release()
		if d := time.Since(begin); d < time.Second || d > time.Second+10*time.Millisecond {
			t.Fatalf("admitted after %v; want the pause capped at 1 s", d)
		}
		if a, _, _ := f.counts(); a != 1 {
			t.Fatalf("%d round trips; want 1: the local pause is known", a)
		}
	})
}

// TestUnavailable: a failing Redis gives ErrUnavailable (not
// DeadlineExceeded), then fails at once until the next probe; a probe that
// gets an answer closes the circuit.
func TestUnavailable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		var failing atomic.Bool
		failing.Store(true)
		stall := make(chan struct{})
		f.admitHook = func(ctx context.Context) error {
			if failing.Load() {
				<-stall // ignores ctx, as go-redis without ContextTimeoutEnabled
				return errors.New("i/o timeout")
			}
			return nil
		}
		e := newEngine(t, f, Config{Timeout: 200 * time.Millisecond})
		cs := []rstore.Charge{charge("a", spec(5, time.Second), 1)}
		begin := time.Now()
		_, err := e.Acquire(context.Background(), "s", cs)
		if !errors.Is(err, ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%v; want ErrUnavailable only", err)
		}
		if d := time.Since(begin); d != 200*time.Millisecond {
			t.Fatalf("failed after %v; want the Timeout", d)
		}
		if _, err := e.Acquire(context.Background(), "s", cs); !errors.Is(err, ErrUnavailable) {
			t.Fatal(err)
		}
		if st := e.Stats(); st.RedisAdmits != 1 || !st.Unavailable {
			t.Fatalf("%+v; want one round trip, the circuit open", st)
		}
		failing.Store(false)
		close(stall)
		time.Sleep(probeMin)
		c, err := e.Acquire(context.Background(), "s", cs)
		if err != nil {
			t.Fatal(err)
		}
		c.Release()
		if st := e.Stats(); st.Unavailable || st.Recoveries != 1 {
			t.Fatalf("%+v", st)
		}
	})
}

// localFallback admits one call at a time.
type localFallback struct {
	mu    sync.Mutex
	held  bool
	pause time.Time
}

func (l *localFallback) Acquire(ctx context.Context, scope string, cs []rstore.Charge) (func(), error) {
	for {
		if r, ok := l.TryAcquire(scope, cs); ok {
			return r, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

func (l *localFallback) TryAcquire(string, []rstore.Charge) (func(), bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held || time.Now().Before(l.pause) {
		return nil, false
	}
	l.held = true
	return func() { l.mu.Lock(); l.held = false; l.mu.Unlock() }, true
}

func (l *localFallback) Pause(_ string, _ rstore.Charge, until time.Time) {
	l.mu.Lock()
	l.pause = until
	l.mu.Unlock()
}

func TestFallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		f.admitHook = func(context.Context) error { return errors.New("connection refused") }
		fb := &localFallback{}
		e := newEngine(t, f, Config{Fallback: fb})
		cs := []rstore.Charge{charge("a", spec(5, time.Second), 1)}
		c, err := e.Acquire(context.Background(), "s", cs)
		if err != nil || !c.Local() {
			t.Fatalf("%v, local %v", err, c != nil && c.Local())
		}
		if _, ok, err := e.TryAcquire("s", cs); ok || err != nil {
			t.Fatalf("TryAcquire over the fallback's one unit: %v %v", ok, err)
		}
		c.Release()
		if st := e.Stats(); st.FallbackAdmitted != 1 || st.InFlight != 0 || st.ReleasesDropped != 0 {
			t.Fatalf("%+v", st)
		}
		e.Pause("s", cs[0], time.Second)
		if _, ok, _ := e.TryAcquire("s", cs); ok {
			t.Fatal("the pause did not hold the fallback")
		}
	})
}

// TestCloseFailsWaiters: Close makes every waiter return ErrClosed, later
// calls too, and leaves no goroutine (synctest reports one).
func TestCloseFailsWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		e, err := New(Config{Store: f})
		if err != nil {
			t.Fatal(err)
		}
		cs := []rstore.Charge{charge("a", spec(1, time.Hour), 1)}
		h, err := e.Acquire(context.Background(), "s", cs)
		if err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 3)
		for range 3 {
			go func() {
				_, err := e.Acquire(context.Background(), "s", cs)
				errs <- err
			}()
		}
		synctest.Wait()
		if st := e.Stats(); st.Waiting != 3 {
			t.Fatalf("%+v", st)
		}
		_ = e.Close()
		_ = e.Close()
		for range 3 {
			if err := <-errs; !errors.Is(err, ErrClosed) {
				t.Fatalf("%v", err)
			}
		}
		if _, err := e.Acquire(context.Background(), "s", cs); !errors.Is(err, ErrClosed) {
			t.Fatal(err)
		}
		h.Release() // after Close: dropped, counted
		if st := e.Stats(); st.ReleasesDropped != 1 || st.InFlight != 0 {
			t.Fatalf("%+v", st)
		}
	})
}

// TestHostileDecisions: whatever a refusal says (a negative, zero or
// never-ending wait, a refusing index out of range, only a release can
// help with no wait), the head neither spins (at most one round trip per
// MinRetry) nor panics nor sleeps past MaxPause, and fails at once when the
// wait ends after the deadline.
func TestHostileDecisions(t *testing.T) {
	const forever = time.Duration(1<<63 - 1)
	cases := []struct {
		name string
		d    rstore.Decision
	}{
		{"negative wait", rstore.Decision{Wait: -time.Hour}},
		{"zero wait", rstore.Decision{}},
		{"zero wait, release", rstore.Decision{Release: true}},
		{"negative index", rstore.Decision{Wait: time.Millisecond, Refused: -1}},
		{"index too large", rstore.Decision{Wait: time.Millisecond, Refused: 1 << 30}},
		{"never-ending release wait", rstore.Decision{Wait: forever, Release: true, Refused: 5}},
		{"never-ending pause", rstore.Decision{Wait: forever, Paused: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFake()
				f.decide = func() *rstore.Decision { d := c.d; return &d }
				e := newEngine(t, f, Config{MaxPause: 300 * time.Millisecond})
				cs := []rstore.Charge{charge("a", spec(5, 40*time.Millisecond), 1)}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				_, err := e.Acquire(ctx, "s", cs)
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("%v; want DeadlineExceeded", err)
				}
				a, _, _ := f.counts()
				t.Logf("%v; %d round trips in 1 s", err, a)
				if a > 1000 {
					t.Fatalf("%d round trips in 1 s: the head spins", a)
				}
				if a < 2 && c.d.Wait < forever {
					t.Fatalf("%d round trips in 1 s", a)
				}
				// The cap on what is remembered: a free limiter again
				// within MaxPause.
				f.decide = nil
				time.Sleep(300 * time.Millisecond)
				if call, ok, err := e.TryAcquire("s", cs); !ok || err != nil {
					t.Fatalf("after MaxPause: %v %v", ok, err)
				} else {
					call.Release()
				}
			})
		})
	}
}

// TestObserverAndSetLimit: the observer sees admissions, refusals,
// releases and pauses, outside the engine's lock (it may call Stats);
// SetLimit reaches the store and forgets the wait handed on.
func TestObserverAndSetLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		var mu sync.Mutex
		kinds := map[EventKind]int{}
		var e *Engine
		e = newEngine(t, f, Config{Observer: func(ev Event) {
			_ = e.Stats() // outside the lock: no deadlock
			mu.Lock()
			kinds[ev.Kind]++
			mu.Unlock()
		}})
		s := spec(1, time.Second)
		cs := []rstore.Charge{charge("a", s, 1)}
		c, err := e.Acquire(context.Background(), "s", cs)
		if err != nil {
			t.Fatal(err)
		}
		c.Release()
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if _, err := e.Acquire(ctx, "s", cs); !errors.Is(err, ErrDeadline) {
			t.Fatalf("%v", err)
		}
		e.mu.Lock()
		nb := e.lims[limKey{"s", "a", ""}].notBefore
		e.mu.Unlock()
		if nb.IsZero() {
			t.Fatal("no wait handed on")
		}
		if err := e.SetLimit(context.Background(), "s", charge("a", spec(2, time.Second), 0)); err != nil {
			t.Fatal(err)
		}
		e.mu.Lock()
		l := e.lims[limKey{"s", "a", ""}]
		e.mu.Unlock()
		if l != nil && !l.notBefore.IsZero() {
			t.Fatal("SetLimit kept the wait learned under the old limit")
		}
		e.Pause("s", cs[0], time.Millisecond)
		e.Reconcile("s", cs[0], 3)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, k := range []EventKind{Admitted, Refused, Released, Paused} {
			if kinds[k] == 0 {
				t.Errorf("no event of kind %d: %v", k, kinds)
			}
		}
	})
}

// TestQueueWaitBudget: a waiter whose queue-wait budget runs out fails
// with ErrQueueTimeout, not DeadlineExceeded: at once when the wait Redis
// names is longer, at the budget when only a release can help; ctx's own
// earlier deadline still gives the deadline error.
func TestQueueWaitBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		e := newEngine(t, f, Config{ErrDeadline: errSentinel})
		s := spec(1, 10*time.Second)
		cs := []rstore.Charge{charge("a", s, 1)}
		c, err := e.Acquire(context.Background(), "s", cs)
		if err != nil {
			t.Fatal(err)
		}
		// Held: only a release helps; the budget ends the wait.
		begin := time.Now()
		_, err = e.Acquire(ratesem.WithQueueWait(context.Background(), 300*time.Millisecond), "s", cs)
		if !errors.Is(err, ratesem.ErrQueueTimeout) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("held: %v; want ErrQueueTimeout only", err)
		}
		if d := time.Since(begin); d > 300*time.Millisecond {
			t.Fatalf("held: failed after %v, budget 300ms", d)
		}
		c.Release()
		synctest.Wait()
		// Released: the next admission is 10 s away, beyond the budget.
		begin = time.Now()
		_, err = e.Acquire(ratesem.WithQueueWait(context.Background(), time.Second), "s", cs)
		if !errors.Is(err, ratesem.ErrQueueTimeout) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("released: %v; want ErrQueueTimeout only", err)
		}
		if d := time.Since(begin); d != 0 {
			t.Fatalf("released: failed after %v, want at once", d)
		}
		// ctx's deadline comes first: the deadline error.
		ctx, cancel := context.WithTimeout(ratesem.WithQueueWait(context.Background(), 5*time.Second), time.Second)
		defer cancel()
		if _, err = e.Acquire(ctx, "s", cs); !errors.Is(err, errSentinel) || errors.Is(err, ratesem.ErrQueueTimeout) {
			t.Fatalf("deadline first: %v; want the deadline sentinel", err)
		}
		// A budget longer than the wait: admitted.
		c, err = e.Acquire(ratesem.WithQueueWait(context.Background(), 20*time.Second), "s", cs)
		if err != nil {
			t.Fatalf("long budget: %v", err)
		}
		c.Release()
	})
}

// TestPriorityOrder: while a limiter is held, a PriorityHigh waiter that
// queues last is admitted first, then the others in arrival order.
func TestPriorityOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		e := newEngine(t, f, Config{})
		s := spec(1, 100*time.Millisecond)
		cs := []rstore.Charge{charge("a", s, 1)}
		h, err := e.Acquire(context.Background(), "s", cs)
		if err != nil {
			t.Fatal(err)
		}
		var (
			mu    sync.Mutex
			order []string
			wg    sync.WaitGroup
		)
		call := func(name string, p ratesem.Priority) {
			wg.Go(func() {
				c, err := e.Acquire(ratesem.WithPriority(context.Background(), p), "s", cs)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				order = append(order, name)
				mu.Unlock()
				c.Release()
			})
			synctest.Wait()
		}
		call("low", ratesem.PriorityLow)
		call("normal1", ratesem.PriorityNormal)
		call("normal2", ratesem.PriorityNormal)
		call("high", ratesem.PriorityHigh)
		h.Release()
		wg.Wait()
		want := []string{"high", "normal1", "normal2", "low"}
		if len(order) != len(want) {
			t.Fatalf("order %v, want %v", order, want)
		}
		for i := range want {
			if order[i] != want[i] {
				t.Fatalf("order %v, want %v", order, want)
			}
		}
	})
}

// TestManyChargesPrioritiesNeverDeadlock: TestManyChargesNeverDeadlock
// with random priority classes, which reorder the queues: all finish.
func TestManyChargesPrioritiesNeverDeadlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		e := newEngine(t, f, Config{})
		s := spec(2, 50*time.Millisecond)
		rules := []string{"a", "b", "c"}
		var wg sync.WaitGroup
		var admitted atomic.Int64
		for range 30 {
			wg.Go(func() {
				for range 10 {
					var cs []rstore.Charge
					for _, r := range rules {
						if rand.IntN(2) == 0 {
							cs = append(cs, charge(r, s, 1+rand.Int64N(2)))
						}
					}
					if len(cs) == 0 {
						cs = append(cs, charge("a", s, 1))
					}
					rand.Shuffle(len(cs), func(i, j int) { cs[i], cs[j] = cs[j], cs[i] })
					ctx := ratesem.WithPriority(context.Background(), ratesem.Priority(rand.IntN(3)-1))
					c, err := e.Acquire(ctx, "s", cs)
					if err != nil {
						t.Error(err)
						return
					}
					admitted.Add(1)
					time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
					c.Release()
				}
			})
		}
		wg.Wait()
		synctest.Wait()
		st := e.Stats()
		if admitted.Load() != 300 || st.InFlight != 0 || st.Waiting != 0 || f.inFlight() != 0 {
			t.Fatalf("admitted %d; %+v; fake in flight %d", admitted.Load(), st, f.inFlight())
		}
	})
}

// TestMaxQueue: with Config.MaxQueue 2, a third call that must queue on
// the limiter fails at once with ErrQueueFull, leaving no trace; the two
// queued ones are admitted after the release.
func TestMaxQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		e := newEngine(t, f, Config{MaxQueue: 2})
		s := spec(1, 100*time.Millisecond)
		cs := []rstore.Charge{charge("a", s, 1)}
		h, err := e.Acquire(context.Background(), "s", cs)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				c, err := e.Acquire(context.Background(), "s", cs)
				if err != nil {
					t.Error(err)
					return
				}
				c.Release()
			})
			synctest.Wait()
		}
		begin := time.Now()
		_, err = e.Acquire(ratesem.WithPriority(context.Background(), ratesem.PriorityHigh), "s", cs)
		if !errors.Is(err, ratesem.ErrQueueFull) {
			t.Fatalf("third waiter: %v, want ErrQueueFull", err)
		}
		if d := time.Since(begin); d != 0 {
			t.Fatalf("failed after %v, want at once", d)
		}
		if st := e.Stats(); st.Waiting != 2 {
			t.Fatalf("%+v: want 2 waiting", st)
		}
		h.Release()
		wg.Wait()
		synctest.Wait()
		if st := e.Stats(); st.InFlight != 0 || st.Waiting != 0 || f.inFlight() != 0 {
			t.Fatalf("%+v; fake in flight %d", st, f.inFlight())
		}
	})
}

// TestReconcileGiveBackWakes: the head sleeps until the next fixed window
// (the window is full as far as Redis counts), then a usage report of this
// process gives units back (ReconcileAt's reply is negative: a tighter
// bound on the units from elsewhere): the head asks again at once and is
// admitted in the same window, not when the window moves.
func TestReconcileGiveBackWakes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		var full atomic.Bool
		full.Store(true)
		f.decide = func() *rstore.Decision {
			if full.Load() {
				return &rstore.Decision{Now: time.Now(), Wait: 50 * time.Second}
			}
			return nil
		}
		f.reconcile = func(used int64) int64 {
			full.Store(false)
			return -20
		}
		e := newEngine(t, f, Config{MaxPause: time.Minute})
		s := &rstore.Spec{Kind: rstore.FixedCompletion, Limit: window.Limit{N: 100, Per: time.Minute}}
		cs := []rstore.Charge{charge("w", s, 20)}
		start := time.Now()
		got := make(chan time.Time, 1)
		go func() {
			c, err := e.Acquire(context.Background(), "s", cs)
			if err != nil {
				t.Error(err)
				got <- time.Time{}
				return
			}
			got <- time.Now()
			c.Release()
		}()
		time.Sleep(time.Second) // the head sleeps on its 50 s
		synctest.Wait()
		e.ReconcileAt("s", charge("w", s, 0), 50, rstore.Read{})
		at := <-got
		if d := at.Sub(start); d > 1100*time.Millisecond {
			t.Fatalf("admitted %v after the start, want at the report (1 s): the give-back did not wake the head", d)
		}
	})
}
