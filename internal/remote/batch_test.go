package remote

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/internal/rstore"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// batchHook counts a client's round trips (a pipeline counts one; a new
// connection's set-up does not count) and the
// ends and admissions each pipeline carries (rstore.Carried); the next holds pipelines wait until released.
type batchHook struct {
	mu     sync.Mutex
	trips  int
	sizes  []int
	single []string
	holds  int
	hold   chan struct{}
	held   chan struct{} // gets a value when a pipeline waits on hold
}

func (h *batchHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *batchHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if cmd.Name() == "hello" {
			return next(ctx, cmd) // a new connection's set-up
		}
		h.mu.Lock()
		h.trips++
		h.single = append(h.single, cmd.Name())
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}
func (h *batchHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if !strings.HasPrefix(cmds[0].Name(), "eval") {
			return next(ctx, cmds) // a new connection's set-up
		}
		h.mu.Lock()
		h.trips++
		n := 0 // the scripts carried: a batch script's ends and admissions
		for _, c := range cmds {
			n += rstore.Carried(c.Args())
		}
		h.sizes = append(h.sizes, n)
		var hold chan struct{}
		if h.holds > 0 {
			h.holds--
			hold = h.hold
			h.held <- struct{}{}
		}
		h.mu.Unlock()
		if hold != nil {
			<-hold
		}
		return next(ctx, cmds)
	}
}

func (h *batchHook) reset() (trips int, sizes []int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	trips, sizes = h.trips, h.sizes
	h.trips, h.sizes, h.single = 0, nil, nil
	return trips, sizes
}

// holdNext makes the next k pipelines wait until the returned func is
// called; held gets a value as each waits.
func (h *batchHook) holdNext(k int) (held <-chan struct{}, release func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hold := make(chan struct{})
	h.hold, h.held, h.holds = hold, make(chan struct{}, k), k
	return h.held, func() { close(hold) }
}

// hookedEngine is realEngine with the client's round trips counted.
func hookedEngine(t *testing.T, cfg Config) (*Engine, *batchHook) {
	t.Helper()
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	h := &batchHook{}
	c.AddHook(h)
	st, err := rstore.New(c, "btest", rstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store = st
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e, h
}

// queued returns the number of admissions queued on scope, not yet sent.
func (e *Engine) queued(scope string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if q := e.bq[scope]; q != nil {
		return len(q.q)
	}
	return 0
}

func waitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !f(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// warm sends one admission and its release, so that the scripts are
// loaded and the clock read: later round trips are one each.
func warm(t *testing.T, e *Engine, h *batchHook, scope string, cs []rstore.Charge) {
	t.Helper()
	o, err := e.Decide(context.Background(), scope, cs)
	if err != nil || o.Call == nil {
		t.Fatal(o, err)
	}
	sent := make(chan struct{})
	o.Call.OnSent(func() { close(sent) })
	o.Call.Release()
	<-sent
	h.reset()
}

// Concurrent Decide calls of one scope share round trips: while one round
// trip is under way, the callers that arrive queue, and the next round
// trip carries them all (in one pipeline); each gets its own answer, all
// or nothing per call, in arrival order.
func TestDecideBatchesOneScope(t *testing.T) {
	e, h := hookedEngine(t, Config{})
	fw := &rstore.Spec{Kind: rstore.FixedWindow, Limit: window.Limit{N: 40, Per: time.Hour}}
	cs := []rstore.Charge{{Rule: "r", Key: "k", Spec: fw, Weight: 1}}
	warm(t, e, h, "s", cs)
	const n = 50 // 1 in the first round trip, 49 queued: 38 more fit (warm took 1)
	held, release := h.holdNext(1)
	ctx := context.Background()
	outs := make([]Outcome, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	wg.Go(func() { outs[0], errs[0] = e.Decide(ctx, "s", cs) })
	<-held
	for i := 1; i < n; i++ {
		wg.Go(func() { outs[i], errs[i] = e.Decide(ctx, "s", cs) })
	}
	waitFor(t, "the callers to queue", func() bool { return e.queued("s") == n-1 })
	release()
	wg.Wait()
	trips, sizes := h.reset()
	if trips != 2 || len(sizes) != 2 || sizes[0] != 1 || sizes[1] != n-1 {
		t.Fatalf("%d round trips of %v commands; want 2 of [1 %d]", trips, sizes, n-1)
	}
	admitted := 0
	for i := range n {
		switch {
		case errs[i] != nil:
			t.Fatalf("call %d: %v", i, errs[i])
		case outs[i].Call != nil:
			admitted++
		case outs[i].At.IsZero():
			t.Fatalf("call %d refused without an instant: %+v", i, outs[i])
		}
	}
	if admitted != 39 {
		t.Fatalf("%d admitted, want 39 (the limit less warm's)", admitted)
	}
	// A refusal is remembered: the next caller costs no round trip.
	if o, err := e.Decide(ctx, "s", cs); err != nil || o.Call != nil {
		t.Fatalf("after the limit: %+v %v", o, err)
	}
	if trips, _ := h.reset(); trips != 0 {
		t.Fatalf("a known refusal cost %d round trips", trips)
	}
}

// A caller that leaves while queued is dropped from the batch (never sent);
// one that leaves while its round trip is under way has its admission
// cancelled when the answer comes.
func TestDecideBatchLeave(t *testing.T) {
	e, h := hookedEngine(t, Config{})
	fw := &rstore.Spec{Kind: rstore.FixedWindow, Limit: window.Limit{N: 3, Per: time.Hour}}
	cs := []rstore.Charge{{Rule: "r", Key: "k", Spec: fw, Weight: 1}}
	warm(t, e, h, "s", cs) // 1 of 3 used
	held, release := h.holdNext(1)
	ctx := context.Background()
	first, cancelFirst := context.WithCancel(ctx)
	queued, cancelQueued := context.WithCancel(ctx)
	var errFirst, errQueued error
	var wg sync.WaitGroup
	wg.Go(func() { _, errFirst = e.Decide(first, "s", cs) })
	<-held
	wg.Go(func() { _, errQueued = e.Decide(queued, "s", cs) })
	waitFor(t, "the caller to queue", func() bool { return e.queued("s") == 1 })
	cancelQueued()
	cancelFirst()
	wg.Wait()
	if !errors.Is(errQueued, context.Canceled) || !errors.Is(errFirst, context.Canceled) {
		t.Fatalf("left: %v, %v; want context.Canceled", errFirst, errQueued)
	}
	if e.queued("s") != 0 {
		t.Fatal("the caller that left is still queued")
	}
	release()
	waitFor(t, "the cancellation", func() bool { return e.Stats().Cancelled == 1 })
	// Neither holds units: 2 of 3 left.
	for i := range 2 {
		if o, err := e.Decide(ctx, "s", cs); err != nil || o.Call == nil {
			t.Fatalf("call %d after the leaves: %+v %v", i, o, err)
		}
	}
	if _, sizes := h.reset(); len(sizes) < 1 || sizes[0] != 1 {
		t.Fatalf("pipelines %v: the first carried %v commands; want 1 (the queued caller that left is not sent)", sizes, sizes[:1])
	}
}

// Releases ride along: those queued when an admission's round trip leaves
// go in it, before the admissions (which see the room they made); the
// release workers send what is queued in one round trip.
func TestReleasesRide(t *testing.T) {
	e, h := hookedEngine(t, Config{})
	capped := &rstore.Spec{Kind: rstore.FixedWindow, Limit: window.Limit{N: 1000, Per: time.Hour}, Concurrency: 8}
	cs := []rstore.Charge{{Rule: "r", Key: "k", Spec: capped, Weight: 1}}
	warm(t, e, h, "s", cs)
	ctx := context.Background()
	var calls []*Call
	for range 8 {
		o, err := e.Decide(ctx, "s", cs)
		if err != nil || o.Call == nil {
			t.Fatal(o, err)
		}
		calls = append(calls, o.Call)
	}
	h.reset()
	// Hold the workers' next round trips (one per worker): the releases
	// queued meanwhile ride on the admission.
	held, release := h.holdNext(releaseWorkers)
	var sent sync.WaitGroup
	sent.Add(8)
	for _, c := range calls[:releaseWorkers] {
		c.OnSent(sent.Done)
		c.Release()
		<-held // a worker holds c's release
	}
	for _, c := range calls[releaseWorkers:] {
		c.OnSent(sent.Done)
		c.Release()
	}
	o, err := e.Decide(ctx, "s", cs) // 4 releases ride: room for it
	if err != nil || o.Call == nil {
		t.Fatalf("after 4 releases riding: %+v %v", o, err)
	}
	release()
	sent.Wait()
	h.mu.Lock()
	single := h.single
	h.mu.Unlock()
	trips, sizes := h.reset()
	if trips != releaseWorkers+1 || sizes[releaseWorkers] != 8-releaseWorkers+1 {
		t.Fatalf("%d round trips of %v commands (and %v alone); want %d: the last of %d (the releases queued and the admission)", trips, sizes, single, releaseWorkers+1, 8-releaseWorkers+1)
	}
	if st := e.Stats(); st.ReleasesFailed+st.ReleasesLost+st.ReleasesDropped != 0 {
		t.Fatalf("stats %+v", st)
	}
	o.Call.Release()
}

// Round trips per Decide+Release at 16 goroutines looping on one scope
// (the engine's own batching, without a front): logged, and far below 2.
func TestBatchTripsPerCall(t *testing.T) {
	e, h := hookedEngine(t, Config{})
	fw := &rstore.Spec{Kind: rstore.FixedWindow, Limit: window.Limit{N: 1 << 40, Per: time.Hour}}
	cs := []rstore.Charge{{Rule: "r", Key: "k", Spec: fw, Weight: 1}}
	warm(t, e, h, "s", cs)
	const g, per = 16, 200
	var wg sync.WaitGroup
	for range g {
		wg.Go(func() {
			for range per {
				o, err := e.Decide(context.Background(), "s", cs)
				if err != nil || o.Call == nil {
					t.Error(o, err)
					return
				}
				o.Call.Release()
			}
		})
	}
	wg.Wait()
	waitFor(t, "the releases", func() bool { return len(e.rel) == 0 })
	time.Sleep(50 * time.Millisecond)
	trips, _ := h.reset()
	r := float64(trips) / (g * per)
	t.Logf("%d round trips for %d Decide+Release: %.2f per call", trips, g*per, r)
	if r > 1.5 {
		t.Errorf("%.2f round trips per Decide+Release at %d goroutines: want far below 2", r, g)
	}
}

// The callers queued behind a round trip whose admission Redis refused
// (with an instant) are answered without a round trip of their own: the
// refusal is learned before the queue is handed on.
func TestBatchQueuedBehindRefusal(t *testing.T) {
	e, h := hookedEngine(t, Config{})
	fw := &rstore.Spec{Kind: rstore.FixedWindow, Limit: window.Limit{N: 1, Per: time.Hour}}
	cs := []rstore.Charge{{Rule: "r", Key: "k", Spec: fw, Weight: 1}}
	warm(t, e, h, "s", cs) // the window is full
	held, release := h.holdNext(1)
	ctx := context.Background()
	const n = 6
	outs, errs := make([]Outcome, n), make([]error, n)
	var wg sync.WaitGroup
	wg.Go(func() { outs[0], errs[0] = e.Decide(ctx, "s", cs) })
	<-held
	for i := 1; i < n; i++ {
		wg.Go(func() { outs[i], errs[i] = e.Decide(ctx, "s", cs) })
	}
	waitFor(t, "the callers to queue", func() bool { return e.queued("s") == n-1 })
	release()
	wg.Wait()
	for i := range n {
		if errs[i] != nil || outs[i].Call != nil || outs[i].Wait(time.Now()) < time.Minute {
			t.Fatalf("call %d: %+v %v; want refused for minutes (the window, capped by MaxPause)", i, outs[i], errs[i])
		}
	}
	if trips, sizes := h.reset(); trips != 1 {
		t.Fatalf("%d round trips (%v); want 1: the queued callers answered by the refusal", trips, sizes)
	}
}
