package remote

import (
	"context"
	"errors"
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
		if _, err := acquire(e, ctx, "s", []rstore.Charge{charge("a", s, -1)}); !errors.Is(err, ratesem.ErrNegativeWeight) {
			t.Fatalf("negative weight: %v", err)
		}
		if _, err := acquire(e, ctx, "s", []rstore.Charge{charge("a", s, 4)}); !errors.Is(err, ratesem.ErrWeightTooLarge) {
			t.Fatalf("weight above capacity: %v", err)
		}
		if _, err := acquire(e, ctx, "s", []rstore.Charge{{Rule: "a", Weight: 1}}); err == nil {
			t.Fatal("nil Spec accepted")
		}
		c, err := acquire(e, ctx, "s", nil)
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
			c, err := acquire(e, context.Background(), "s", []rstore.Charge{charge("a", s, 1), charge("b", s, 2)})
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
			c, err := acquire(e, context.Background(), "s", []rstore.Charge{charge("a", s, 1)})
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
		if _, err := acquire(e, ctx, "s", []rstore.Charge{charge("a", s, 1)}); !errors.Is(err, context.DeadlineExceeded) {
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
		if _, err := acquire(e, ctx, "s", []rstore.Charge{charge("a", spec(1, time.Second), 1)}); !errors.Is(err, context.Canceled) {
			t.Fatalf("%v", err)
		}
		if f.inFlight() != 0 || e.Stats().Cancelled != 1 {
			t.Fatalf("in flight %d, %+v", f.inFlight(), e.Stats())
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
		if _, ok, err := tryAcquire(e, "s", []rstore.Charge{c}); ok || err != nil {
			t.Fatalf("TryAcquire during a pause: %v %v", ok, err)
		}
		begin := time.Now()
		call, err := acquire(e, context.Background(), "s", []rstore.Charge{c})
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
		_, err := acquire(e, context.Background(), "s", cs)
		if !errors.Is(err, ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%v; want ErrUnavailable only", err)
		}
		if d := time.Since(begin); d != 200*time.Millisecond {
			t.Fatalf("failed after %v; want the Timeout", d)
		}
		if _, err := acquire(e, context.Background(), "s", cs); !errors.Is(err, ErrUnavailable) {
			t.Fatal(err)
		}
		if st := e.Stats(); st.RedisAdmits != 1 || !st.Unavailable {
			t.Fatalf("%+v; want one round trip, the circuit open", st)
		}
		failing.Store(false)
		close(stall)
		time.Sleep(probeMin)
		c, err := acquire(e, context.Background(), "s", cs)
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
		c, err := acquire(e, context.Background(), "s", cs)
		if err != nil || !c.Local() {
			t.Fatalf("%v, local %v", err, c != nil && c.Local())
		}
		if _, ok, err := tryAcquire(e, "s", cs); ok || err != nil {
			t.Fatalf("TryAcquire over the fallback's one unit: %v %v", ok, err)
		}
		c.Release()
		if st := e.Stats(); st.FallbackAdmitted != 1 || st.InFlight != 0 || st.ReleasesDropped != 0 {
			t.Fatalf("%+v", st)
		}
		e.Pause("s", cs[0], time.Second)
		if _, ok, _ := tryAcquire(e, "s", cs); ok {
			t.Fatal("the pause did not hold the fallback")
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
				_, err := acquire(e, ctx, "s", cs)
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
				f.mu.Lock() // a round trip of the abandoned wait may still be reading it
				f.decide = nil
				f.mu.Unlock()
				time.Sleep(300 * time.Millisecond)
				if call, ok, err := tryAcquire(e, "s", cs); !ok || err != nil {
					t.Fatalf("after MaxPause: %v %v", ok, err)
				} else {
					call.Release()
				}
			})
		})
	}
}

// TestSetLimitForgets: SetLimit reaches the store, forgets the wait
// handed on and calls OnRoom (outside the engine's lock: it may call
// Stats); a usage report reaches the store and tells then.
func TestSetLimitForgets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		var room atomic.Int32
		var e *Engine
		e = newEngine(t, f, Config{OnRoom: func(string, []rstore.Charge) {
			_ = e.Stats() // outside the lock: no deadlock
			room.Add(1)
		}})
		s := spec(1, time.Second)
		cs := []rstore.Charge{charge("a", s, 1)}
		c, err := acquire(e, context.Background(), "s", cs)
		if err != nil {
			t.Fatal(err)
		}
		c.Release()
		synctest.Wait()
		if o, err := e.Decide(context.Background(), "s", cs); err != nil || o.Call != nil {
			t.Fatalf("Decide over a full limit: %+v, %v", o, err)
		}
		e.mu.Lock()
		nb := e.lims[limKey{"s", "a", ""}].notBefore
		e.mu.Unlock()
		if nb.IsZero() {
			t.Fatal("no wait handed on")
		}
		before := room.Load()
		if err := e.SetLimit(context.Background(), "s", charge("a", spec(2, time.Second), 0)); err != nil {
			t.Fatal(err)
		}
		e.mu.Lock()
		l := e.lims[limKey{"s", "a", ""}]
		e.mu.Unlock()
		if l != nil && !l.notBefore.IsZero() {
			t.Fatal("SetLimit kept the wait learned under the old limit")
		}
		if room.Load() != before+1 {
			t.Fatal("SetLimit did not call OnRoom")
		}
		e.Pause("s", cs[0], time.Millisecond)
		var told atomic.Bool
		e.ReconcileAtThen("s", cs[0], 3, rstore.Read{}, func(int64, error) { told.Store(true) })
		synctest.Wait()
		if !told.Load() {
			t.Fatal("ReconcileAtThen did not tell then")
		}
	})
}

// TestReconcileGiveBackWakes: a refusal until the next fixed window is
// remembered (Decide answers at once, without a round trip), then a usage
// report of this process gives units back (ReconcileAt's reply is
// negative: a tighter bound on the units from elsewhere): Config.OnRoom
// is called, the refusal is forgotten and the next Decide admits in the
// same window, not when the window moves.
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
		var room atomic.Int32
		e := newEngine(t, f, Config{MaxPause: time.Minute, OnRoom: func(string, []rstore.Charge) { room.Add(1) }})
		s := &rstore.Spec{Kind: rstore.FixedCompletion, Limit: window.Limit{N: 100, Per: time.Minute}}
		cs := []rstore.Charge{charge("w", s, 20)}
		ctx := context.Background()
		if o, err := e.Decide(ctx, "s", cs); err != nil || o.Call != nil || o.At.Sub(time.Now()) < 49*time.Second {
			t.Fatalf("Decide over a full window: %+v, %v", o, err)
		}
		f.mu.Lock()
		admits := f.admits
		f.mu.Unlock()
		if o, err := e.Decide(ctx, "s", cs); err != nil || o.Call != nil {
			t.Fatalf("Decide again: %+v, %v", o, err)
		}
		f.mu.Lock()
		again := f.admits
		f.mu.Unlock()
		if again != admits {
			t.Fatal("the refusal's instant was not remembered: Decide asked Redis again")
		}
		e.ReconcileAtThen("s", charge("w", s, 0), 50, rstore.Read{}, nil)
		synctest.Wait()
		if room.Load() == 0 {
			t.Fatal("the give-back did not call OnRoom")
		}
		o, err := e.Decide(ctx, "s", cs)
		if err != nil || o.Call == nil {
			t.Fatalf("Decide after the give-back: %+v, %v; want admitted", o, err)
		}
		o.Call.Release()
	})
}
