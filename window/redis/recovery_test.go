package redis

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/window/redis/redistest"
)

// allKinds builds one window of every kind on c, N = 2 per second.
func allKinds(t *testing.T, c goredis.UniversalClient, opts ...Option) map[string]*Window {
	t.Helper()
	l := Limit{N: 2, Per: time.Second}
	ws := map[string]*Window{}
	add := func(name string, w *Window, err error) {
		if err != nil {
			t.Fatal(err)
		}
		ws[name] = w
	}
	w, err := NewCompletion(c, uniqueName(t), l, opts...)
	add("Completion", w, err)
	w, err = NewSlidingLog(c, uniqueName(t), l, 10*time.Millisecond, opts...)
	add("SlidingLog", w, err)
	w, err = NewGCRA(c, uniqueName(t), l, 0, opts...)
	add("GCRA", w, err)
	w, err = NewTokenBucket(c, uniqueName(t), l, 0, opts...)
	add("TokenBucket", w, err)
	w, err = NewFixedWindow(c, uniqueName(t), l, opts...)
	add("FixedWindow", w, err)
	w, err = NewSlidingWindowCounter(c, uniqueName(t), l, opts...)
	add("SlidingWindowCounter", w, err)
	return ws
}

// allScripts lists every script, to check the server's script cache.
var allScripts = []*goredis.Script{
	completionAdmit, completionRelease, completionExtend, completionCancel,
	slidingLogAdmit, slidingLogCancel, gcraAdmit, gcraCancel,
	tokenBucketAdmit, tokenBucketCancel, fixedWindowAdmit, fixedWindowCancel,
	slidingCounterAdmit, slidingCounterCancel,
}

// cached reports whether the server's script cache holds s.
func cached(t *testing.T, c *goredis.Client, s *goredis.Script) bool {
	t.Helper()
	ok, err := c.ScriptExists(context.Background(), s.Hash()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return ok[0]
}

// TestScriptFlushBetweenCalls: SCRIPT FLUSH empties the server's script
// cache (as a restart, a failover or an operator does) between two calls;
// the next call gets NOSCRIPT for its EVALSHA, falls back to EVAL, and goes
// on with the state the keys still hold. (pyrate-limiter #182 was a
// production incident from a limiter that did not recover from this.)
func TestScriptFlushBetweenCalls(t *testing.T) {
	c := newClient(t, sharedAddr(t))
	ctx := ctxT(t)
	clk := &manual{t: time.UnixMicro(1_800_000_000_000_000)}
	for name, w := range allKinds(t, c, WithClock(clk.now)) {
		d, err := w.Admit(ctx, 1)
		if err != nil || !d.OK {
			t.Fatalf("%s: %+v, %v", name, d, err)
		}
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if cached(t, c, admitScript(w)) {
			t.Fatalf("%s: script still cached after SCRIPT FLUSH", name)
		}
		if d, err := w.Admit(ctx, 1); err != nil || !d.OK {
			t.Fatalf("%s: second unit after SCRIPT FLUSH: %+v, %v", name, d, err)
		}
		if !cached(t, c, admitScript(w)) {
			t.Fatalf("%s: the EVAL fallback did not load the script", name)
		}
		// The state survived: the limit of 2 is spent.
		if d, err := w.Admit(ctx, 1); err != nil || d.OK {
			t.Fatalf("%s: third unit of 2: %+v, %v; want refused", name, d, err)
		}
		// Release and cancellation scripts recover the same way.
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := w.Cancel(ctx, d.Token); err != nil && !errors.Is(err, ErrNotInFlight) {
			t.Fatalf("%s: cancel after SCRIPT FLUSH: %v", name, err)
		}
		if err := w.Release(ctx, d.Token); err != nil && !errors.Is(err, ErrNotInFlight) {
			t.Fatalf("%s: release after SCRIPT FLUSH: %v", name, err)
		}
	}
}

func admitScript(w *Window) *goredis.Script {
	return [...]*goredis.Script{completionAdmit, slidingLogAdmit, gcraAdmit, tokenBucketAdmit, fixedWindowAdmit, slidingCounterAdmit}[w.kind]
}

// TestRedisRestart stops redis-server between calls and starts it again on
// the same port, empty (no keys, no scripts). While it is down every method
// returns an error; none hangs or panics. Once it is back the same Window
// values and clients carry on (EVALSHA, NOSCRIPT, EVAL), from an idle state.
func TestRedisRestart(t *testing.T) {
	srv := redistest.StartServer(t)
	// Fail fast while the server is down: no command retries, one dial.
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	ctx := ctxT(t)
	ws := allKinds(t, c)
	tokens := map[string]string{}
	for name, w := range ws {
		d, err := w.Admit(ctx, 2)
		if err != nil || !d.OK {
			t.Fatalf("%s: %+v, %v", name, d, err)
		}
		tokens[name] = d.Token
	}
	srv.Stop()
	for name, w := range ws {
		start := time.Now()
		if _, err := w.Admit(ctx, 1); err == nil {
			t.Fatalf("%s: Admit with redis-server down: no error", name)
		} else if time.Since(start) > 5*time.Second {
			t.Fatalf("%s: Admit with redis-server down took %v", name, time.Since(start))
		}
		if err := w.Cancel(ctx, tokens[name]); err == nil {
			t.Fatalf("%s: Cancel with redis-server down: no error", name)
		}
	}
	if err := ws["Completion"].Release(ctx, tokens["Completion"]); err == nil || errors.Is(err, ErrNotInFlight) {
		t.Fatalf("Release with redis-server down: %v, want a connection error", err)
	}
	srv.Start()
	probe := newClient(t, srv.Addr())
	for _, s := range allScripts {
		if cached(t, probe, s) {
			t.Fatal("a restarted server has scripts cached")
		}
	}
	// After PoolSize failed dials go-redis's pool returns the last dial
	// error at once, and probes the server once a second: the first calls
	// after the restart may fail for up to a second.
	deadline := time.Now().Add(5 * time.Second)
	var first Decision
	for {
		d, err := ws["Completion"].Admit(ctx, 1)
		if err == nil {
			first = d
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing 5 s after the restart: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Every window knows (from its own admission, a moment ago) that the
	// state must still exist: the loss is detected, and the window is full
	// for one Per. The fixed window only while the aligned window of that
	// admission lasts: after it, nothing was lost, and it admits.
	if first.OK || !first.StateLost || first.Wait < 900*time.Millisecond || first.Wait > time.Second {
		t.Fatalf("Completion after the restart: %+v, want a refusal with StateLost for about 1 s", first)
	}
	for name, w := range ws {
		d, err := w.Admit(ctx, 2)
		if err != nil {
			t.Fatalf("%s after the restart: %v", name, err)
		}
		switch name {
		case "Completion":
			if d.OK || d.StateLost || d.Wait < 800*time.Millisecond {
				t.Fatalf("%s after the restart, second call: %+v, want a refusal (full for a Per)", name, d)
			}
		case "SlidingLog":
			if d.OK || !d.StateLost || d.Wait < 900*time.Millisecond {
				t.Fatalf("%s after the restart: %+v, want a refusal with StateLost", name, d)
			}
		case "FixedWindow":
			if !d.OK && !d.StateLost {
				t.Fatalf("%s after the restart: %+v, want admitted, or refused with StateLost", name, d)
			}
		default:
			if d.OK || !d.StateLost || d.Wait < 900*time.Millisecond {
				t.Fatalf("%s after the restart: %+v, want a refusal with StateLost", name, d)
			}
		}
	}
	if err := ws["Completion"].Release(ctx, tokens["Completion"]); !errors.Is(err, ErrNotInFlight) {
		t.Fatalf("Release of a call admitted before the restart: %v, want ErrNotInFlight", err)
	}
}

// TestRedisRestartMidRun restarts redis-server while several clients keep
// calling a completion window: calls fail while it is down (for 600 ms,
// longer than the clients' dial retries), and carry on once it is back.
func TestRedisRestartMidRun(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := ctxT(t)
	name := uniqueName(t)
	var restarted atomic.Bool
	var before, after, errs atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MaxRetries: 1, DialerRetries: 2, DialTimeout: 200 * time.Millisecond})
		t.Cleanup(func() { _ = c.Close() })
		w, err := NewCompletion(c, name, Limit{N: 3, Per: 20 * time.Millisecond}, WithLease(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				d, err := w.Admit(ctx, 1)
				if err != nil {
					errs.Add(1)
					time.Sleep(5 * time.Millisecond)
					continue
				}
				if !d.OK {
					time.Sleep(min(d.Wait, 5*time.Millisecond))
					continue
				}
				switch {
				case restarted.Load():
					after.Add(1)
				default:
					before.Add(1)
				}
				time.Sleep(time.Millisecond)
				if err := w.Release(ctx, d.Token); err != nil && !errors.Is(err, ErrNotInFlight) {
					errs.Add(1)
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	srv.Stop()
	time.Sleep(600 * time.Millisecond)
	srv.Start()
	restarted.Store(true)
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	t.Logf("admitted %d before the restart, %d after; %d errors while it was down", before.Load(), after.Load(), errs.Load())
	if before.Load() == 0 || after.Load() < 10 || errs.Load() == 0 {
		t.Fatalf("admitted %d before, %d after, %d errors: want calls on both sides of the restart, and errors while down",
			before.Load(), after.Load(), errs.Load())
	}
}

// TestPauseHoldsEveryProcess: PauseFor on one window holds the admissions of
// every window of the same kind and name (another client: another process)
// for the time given, on the limiter's clock; a refusal while paused says
// the time left and counts nothing; a shorter pause does not cut a longer
// one; the pause key has a TTL and is gone once the pause is over.
func TestPauseHoldsEveryProcess(t *testing.T) {
	addr := sharedAddr(t)
	c1, c2 := newClient(t, addr), newClient(t, addr)
	ctx := ctxT(t)
	clk := &manual{t: time.UnixMicro(1_800_000_000_000_000)}
	t0 := clk.t
	for name, w := range allKinds(t, c1, WithClock(clk.now)) {
		clk.t = t0
		// The same window in another process.
		var other *Window
		var err error
		l := w.Limit()
		switch name {
		case "Completion":
			other, err = NewCompletion(c2, w.Name(), l, WithClock(clk.now))
		case "SlidingLog":
			other, err = NewSlidingLog(c2, w.Name(), l, 10*time.Millisecond, WithClock(clk.now))
		case "GCRA":
			other, err = NewGCRA(c2, w.Name(), l, 0, WithClock(clk.now))
		case "TokenBucket":
			other, err = NewTokenBucket(c2, w.Name(), l, 0, WithClock(clk.now))
		case "FixedWindow":
			other, err = NewFixedWindow(c2, w.Name(), l, WithClock(clk.now))
		case "SlidingWindowCounter":
			other, err = NewSlidingWindowCounter(c2, w.Name(), l, WithClock(clk.now))
		}
		if err != nil {
			t.Fatal(err)
		}
		if other.PauseKey() != w.PauseKey() || !strings.HasPrefix(w.PauseKey(), "ratesem:{"+w.Name()+"}:") {
			t.Fatalf("%s: pause keys %q and %q", name, w.PauseKey(), other.PauseKey())
		}
		end, err := w.PauseFor(ctx, 300*time.Millisecond)
		if err != nil || !end.Equal(t0.Add(300*time.Millisecond)) {
			t.Fatalf("%s: PauseFor: %v, %v; want end at t0+300ms", name, end, err)
		}
		// A shorter pause leaves the longer one in force.
		if end, err := other.PauseFor(ctx, 100*time.Millisecond); err != nil || !end.Equal(t0.Add(300*time.Millisecond)) {
			t.Fatalf("%s: shorter PauseFor: %v, %v; want end still at t0+300ms", name, end, err)
		}
		ttl, err := c1.PTTL(ctx, w.PauseKey()).Result()
		if err != nil || ttl <= time.Second || ttl > 1300*time.Millisecond {
			t.Fatalf("%s: pause key TTL %v, %v; want 300ms + 1s slack", name, ttl, err)
		}
		clk.t = t0.Add(120 * time.Millisecond)
		for _, x := range []*Window{w, other} {
			d, err := x.Admit(ctx, 1)
			if err != nil || d.OK || d.InFlight || d.Wait != 180*time.Millisecond {
				t.Fatalf("%s: admission while paused: %+v, %v; want refused, wait 180ms", name, d, err)
			}
		}
		// The pause is over: the refusals counted nothing, so the whole
		// limit (2) is there.
		clk.t = t0.Add(300 * time.Millisecond)
		for i, x := range []*Window{w, other} {
			if d, err := x.Admit(ctx, 1); err != nil || !d.OK {
				t.Fatalf("%s: unit %d after the pause: %+v, %v", name, i, d, err)
			}
		}
		if d, err := w.Admit(ctx, 1); err != nil || d.OK || d.Wait == 0 {
			t.Fatalf("%s: third unit of 2 after the pause: %+v, %v; want refused by the window", name, d, err)
		}
		if end, err := w.PauseFor(ctx, 0); err != nil || !end.IsZero() {
			t.Fatalf("%s: PauseFor(0): %v, %v", name, end, err)
		}
	}
}

// TestPauseKeyVanishes: in real time, the pause key is gone a second after
// the pause ends.
func TestPauseKeyVanishes(t *testing.T) {
	c := newClient(t, sharedAddr(t))
	ctx := ctxT(t)
	w, err := NewCompletion(c, uniqueName(t), Limit{N: 1, Per: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.PauseFor(ctx, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d, err := w.Admit(ctx, 1); err != nil || d.OK || d.Wait <= 0 || d.Wait > 50*time.Millisecond {
		t.Fatalf("admission while paused: %+v, %v", d, err)
	}
	time.Sleep(1200 * time.Millisecond)
	if n, err := c.Exists(ctx, w.PauseKey()).Result(); err != nil || n != 0 {
		t.Fatalf("pause key still there 1.15 s after the pause ended: %d, %v", n, err)
	}
	if d, err := w.Admit(ctx, 1); err != nil || !d.OK {
		t.Fatalf("admission after the pause: %+v, %v", d, err)
	}
}
