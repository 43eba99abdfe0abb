package remote

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/internal/rspec"
	"github.com/ratesem/ratesem/internal/rstore"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// vclock is the virtual clock the store reads instead of the server's TIME:
// the waits Redis gives are then exact.
type vclock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *vclock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// realEngine returns an Engine over a Store on a redis-server of its own
// (on clk when not nil), and the server.
func realEngine(t *testing.T, clk *vclock, cfg Config) (*Engine, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	var o rstore.Options
	if clk != nil {
		o.Now = clk.now
	}
	st, err := rstore.New(c, "rtest", o)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store = st
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e, srv
}

// Decide makes one decision per call and never waits: it admits, or names
// the instant, or says only a release can help; OnRoom reports this
// process's release reaching Redis. With Redis down it asks the fallback
// (or fails with ErrUnavailable without one), and asks Redis again at the
// probe schedule.
func TestDecideReal(t *testing.T) {
	room := make(chan []rstore.Charge, 4)
	fb := &localFallback{}
	e, srv := realEngine(t, nil, Config{Fallback: fb, Timeout: 300 * time.Millisecond,
		OnRoom: func(_ string, cs []rstore.Charge) { room <- cs }})
	ctx := context.Background()
	comp := []rstore.Charge{{Rule: "c", Key: "k", Spec: &rstore.Spec{Kind: rstore.Completion, Limit: window.Limit{N: 1, Per: time.Minute}}, Weight: 1}}
	o, err := e.Decide(ctx, "s", comp)
	if err != nil || o.Call == nil || o.Local {
		t.Fatalf("first: %+v %v", o, err)
	}
	o2, err := e.Decide(ctx, "s", comp)
	if err != nil || o2.Call != nil || !o2.Release || o2.At.IsZero() {
		t.Fatalf("full of calls in flight: %+v %v; want Release", o2, err)
	}
	o.Call.Release()
	select {
	case cs := <-room:
		if len(cs) != 1 || cs[0].Rule != "c" {
			t.Fatalf("OnRoom(%v)", cs)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OnRoom not called after the release reached Redis")
	}
	o3, err := e.Decide(ctx, "s", comp)
	if err != nil || o3.Call != nil || o3.Release || time.Until(o3.At) < 50*time.Second {
		t.Fatalf("after the release: %+v %v; want the instant its end + Per", o3, err)
	}
	// Known now: decided without a round trip.
	before := e.Stats().RedisAdmits
	if o4, _ := e.Decide(ctx, "s", comp); o4.Call != nil || !o4.At.Equal(o3.At) || e.Stats().RedisAdmits != before {
		t.Fatalf("a known refusal: %+v, %d round trips", o4, e.Stats().RedisAdmits-before)
	}

	other := []rstore.Charge{{Rule: "o", Key: "k", Spec: &rstore.Spec{Kind: rstore.Completion, Limit: window.Limit{N: 5, Per: time.Second}}, Weight: 1}}
	rs := e.DecideAll(ctx, []Request{{"s", other}, {"s", comp}})
	if rs[0].Err != nil || rs[0].Call == nil || rs[1].Err != nil || rs[1].Call != nil {
		t.Fatalf("DecideAll: %+v", rs)
	}
	rs[0].Call.Release()

	srv.Stop()
	o5, err := e.Decide(ctx, "s", other)
	if err != nil || o5.Call == nil || !o5.Local || !o5.Call.Local() {
		t.Fatalf("Redis down: %+v %v; want the fallback's admission", o5, err)
	}
	o6, err := e.Decide(ctx, "s", other)
	if err != nil || o6.Call != nil || !o6.Local || o6.At.IsZero() {
		t.Fatalf("Redis down, the fallback full: %+v %v", o6, err)
	}
	if !e.Stats().Unavailable {
		t.Fatal("Redis not taken as unreachable")
	}
	o5.Call.Release()
	srv.Start()
	deadline := time.Now().Add(10 * time.Second)
	for {
		o7, err := e.Decide(ctx, "s", other)
		if err != nil {
			t.Fatal(err)
		}
		if o7.Call != nil {
			o7.Call.Release()
		}
		if o7.Call != nil && !o7.Local {
			break // Redis decides again
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis back, still local: %+v", o7)
		}
		time.Sleep(max(time.Until(o7.At), 10*time.Millisecond))
	}
	if st := e.Stats(); st.Unavailable || st.Carried == 0 {
		t.Fatalf("%+v: want Redis reachable, the fallback's call carried", st)
	}

	e2, srv2 := realEngine(t, nil, Config{Timeout: 300 * time.Millisecond})
	srv2.Stop()
	if _, err := e2.Decide(ctx, "s", other); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("no fallback, Redis down: %v", err)
	}
}

// ReconcileAtThen tells the units the limiter took in, which the event
// carries (as in process): a count already known adds nothing.
func TestReconcileAtThenReal(t *testing.T) {
	e, _ := realEngine(t, nil, Config{})
	c := rstore.Charge{Rule: "f", Key: "k", Spec: &rstore.Spec{Kind: rstore.FixedWindow, Limit: window.Limit{N: 10, Per: time.Hour}}}
	got := make(chan int64, 1)
	report := func(used int64) int64 {
		e.ReconcileAtThen("s", c, used, rstore.Read{}, func(added int64, err error) {
			if err != nil {
				t.Error(err)
			}
			got <- added
		})
		select {
		case a := <-got:
			return a
		case <-time.After(5 * time.Second):
			t.Fatal("then not called")
		}
		return 0
	}
	for _, tc := range []struct{ used, want int64 }{{4, 4}, {4, 0}, {3, 0}, {6, 2}, {50, 4}} {
		if a := report(tc.used); a != tc.want {
			t.Fatalf("a count of %d: took in %d, want %d", tc.used, a, tc.want)
		}
	}
}

// Learned limits through the engine: a key of unknown limit admits one
// call at a time across two engines (processes); the limit one learns and
// sends is adopted by the other at its next decision (Call.Adopted); a
// Quota's budget report (BudgetThen) is shared and says the units taken
// in.
func TestLearnedThroughEngineReal(t *testing.T) {
	e1, srv := realEngine(t, nil, Config{})
	c2 := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c2.Close() })
	st2, err := rstore.New(c2, "rtest", rstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e2, err := New(Config{Store: st2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e2.Close() })
	ctx := context.Background()
	unk := []rstore.Charge{{Rule: "r", Key: "k", Spec: rspec.Unknown(), Weight: 1}}
	o1, err := e1.Decide(ctx, "s", unk)
	if err != nil || o1.Call == nil {
		t.Fatalf("%+v %v", o1, err)
	}
	if o2, err := e2.Decide(ctx, "s", unk); err != nil || o2.Call != nil || !o2.Release {
		t.Fatalf("a second call of an unknown key elsewhere: %+v %v; want one at a time", o2, err)
	}
	learned := &rstore.Spec{Kind: rstore.Quota, Limit: window.Limit{N: 5, Per: time.Minute}}
	o3, err := e1.Decide(ctx, "s", []rstore.Charge{{Rule: "r", Key: "k", Spec: learned, Weight: 2}})
	if err != nil || o3.Call == nil {
		t.Fatalf("the learned limit: %+v %v", o3, err)
	}
	o4, err := e2.Decide(ctx, "s", unk)
	if err != nil || o4.Call == nil {
		t.Fatalf("the other process: %+v %v; want admitted", o4, err)
	}
	if _, specs := o4.Call.Adopted(); len(specs) != 1 || specs[0] != *learned {
		t.Fatalf("the other process: %+v %v; want the learned limit adopted", o4, err)
	}
	got := make(chan int64, 1)
	e2.BudgetThen("s", rstore.Charge{Rule: "r", Key: "k", Spec: learned}, 1, time.Minute, 0, "", func(taken int64, err error) {
		if err != nil {
			t.Error(err)
		}
		got <- taken
	})
	select {
	case taken := <-got:
		if taken != 1 { // 5 - 1 (o1 in flight at the roll) - 2 - 1 = 1 left; the server says 1, less the 4 units in flight: 0
			t.Fatalf("BudgetThen took in %d, want 1", taken)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("then not called")
	}
	if o, err := e1.Decide(context.Background(), "s", []rstore.Charge{{Rule: "r", Key: "k", Spec: learned, Weight: 2}}); err != nil || o.Call != nil || o.Wait(time.Now()) < 50*time.Second {
		t.Fatalf("over the shared budget: %+v %v; want a wait to the window's end", o, err)
	}
	for _, o := range []Outcome{o1, o3, o4} {
		o.Call.Release()
	}
}

// DecideAll decides the requests of one scope in one round trip, in
// order, each seeing the ones before it; one this process can decide
// alone (a refusal it remembers) costs none.
func TestDecideAllOneRoundTripReal(t *testing.T) {
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	var trips atomic.Int64
	c.AddHook(tripHook{&trips})
	st, err := rstore.New(c, "rtest", rstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	ctx := context.Background()
	comp := &rstore.Spec{Kind: rstore.Completion, Limit: window.Limit{N: 2, Per: time.Minute}}
	g := &rstore.Spec{Kind: rstore.GCRA, Limit: window.Limit{N: 1, Per: time.Minute}, Burst: 1}
	one := func(sp *rstore.Spec, key string) []rstore.Charge {
		return []rstore.Charge{{Rule: "r", Key: key, Spec: sp, Weight: 1}}
	}
	// warm up: a connection, the script loaded; g's key refused once
	if o, err := e.Decide(ctx, "s", one(g, "g")); err != nil || o.Call == nil {
		t.Fatal(o, err)
	}
	if o, err := e.Decide(ctx, "s", one(g, "g")); err != nil || o.Call != nil {
		t.Fatal(o, err)
	}
	trips.Store(0)
	rs := e.DecideAll(ctx, []Request{{"s", one(comp, "a")}, {"s", one(comp, "a")}, {"s", one(comp, "a")},
		{"s", one(g, "g")}, {"s", one(comp, "b")}})
	if n := trips.Load(); n != 1 {
		t.Fatalf("%d round trips, want 1", n)
	}
	for i, want := range []bool{true, true, false, false, true} {
		if rs[i].Err != nil || (rs[i].Call != nil) != want {
			t.Errorf("request %d: %+v; want admitted %v", i, rs[i], want)
		}
		if rs[i].Call != nil {
			rs[i].Call.Release()
		}
	}
	if !rs[2].Release || rs[3].At.IsZero() {
		t.Errorf("refusals: %+v (want Release), %+v (want an instant)", rs[2].Outcome, rs[3].Outcome)
	}
}

// tripHook counts a client's round trips (a pipeline counts one).
type tripHook struct{ n *atomic.Int64 }

func (h tripHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h tripHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h tripHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error { h.n.Add(1); return next(ctx, cmds) }
}

// A batch whose round trip fails marks Redis unreachable once; its
// requests go to the fallback.
func TestDecideAllRedisDownReal(t *testing.T) {
	room := make(chan struct{}, 1)
	e, srv := realEngine(t, nil, Config{Fallback: &localFallback{}, Timeout: 300 * time.Millisecond,
		OnRoom: func(string, []rstore.Charge) { room <- struct{}{} }})
	sp := &rstore.Spec{Kind: rstore.Completion, Limit: window.Limit{N: 5, Per: time.Second}}
	if o, err := e.Decide(context.Background(), "s", []rstore.Charge{{Rule: "r", Key: "w", Spec: sp, Weight: 1}}); err != nil || o.Call == nil {
		t.Fatal(o, err) // Redis up: the engine is not down yet
	} else {
		o.Call.Release()
	}
	<-room // the release reached Redis
	srv.Stop()
	rs := e.DecideAll(context.Background(), []Request{
		{"s", []rstore.Charge{{Rule: "r", Key: "a", Spec: sp, Weight: 1}}},
		{"s", []rstore.Charge{{Rule: "r", Key: "b", Spec: sp, Weight: 1}}}})
	if rs[0].Err != nil || rs[0].Call == nil || !rs[0].Local || rs[1].Err != nil || rs[1].Call != nil || !rs[1].Local {
		t.Fatalf("%+v; want the fallback's one call, then its refusal", rs)
	}
	rs[0].Call.Release()
	if st := e.Stats(); !st.Unavailable || st.RedisErrors != 1 {
		t.Fatalf("%+v; want one failure, Redis taken as unreachable", st)
	}
}
