package redis

import (
	"strings"
	"testing"
	"time"
)

// TestEveryKeyHasATTL: after admissions, a refusal, a release and a
// cancellation, every key of every window exists with a TTL of (the time
// its state matters) + 1 s, to within the few milliseconds the test takes;
// and the keys of one limiter share its hash tag.
func TestEveryKeyHasATTL(t *testing.T) {
	c := newClient(t, sharedAddr(t))
	ctx := ctxT(t)
	// 12:00:00.250 UTC on some day: 250 ms into an aligned second.
	clk := &manual{t: time.UnixMicro(1_800_000_000_250_000)}
	per := time.Second
	l := Limit{N: 2, Per: per}
	// How long each kind's state matters after two units admitted at once.
	need := map[string]time.Duration{
		"Completion":           3*time.Second + per, // lease 3 s, then Per
		"SlidingLog":           per + 100*time.Millisecond,
		"GCRA":                 per,                    // TAT = now + 2 × 500 ms
		"TokenBucket":          per,                    // refill of 2 units
		"FixedWindow":          750 * time.Millisecond, // to the end of the aligned second
		"SlidingWindowCounter": 1750 * time.Millisecond,
	}
	mk := map[string]func(name string) (*Window, error){
		"Completion": func(n string) (*Window, error) {
			return NewCompletion(c, n, l, WithClock(clk.now), WithLease(3*time.Second))
		},
		"SlidingLog": func(n string) (*Window, error) {
			return NewSlidingLog(c, n, l, 100*time.Millisecond, WithClock(clk.now))
		},
		"GCRA":                 func(n string) (*Window, error) { return NewGCRA(c, n, l, 0, WithClock(clk.now)) },
		"TokenBucket":          func(n string) (*Window, error) { return NewTokenBucket(c, n, l, 0, WithClock(clk.now)) },
		"FixedWindow":          func(n string) (*Window, error) { return NewFixedWindow(c, n, l, WithClock(clk.now)) },
		"SlidingWindowCounter": func(n string) (*Window, error) { return NewSlidingWindowCounter(c, n, l, WithClock(clk.now)) },
	}
	for kind, f := range mk {
		name := uniqueName(t)
		w, err := f(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range w.Keys() {
			if !strings.HasPrefix(k, "ratesem:{"+name+"}:") {
				t.Fatalf("%s: key %q does not start with the hash tag {%s}", kind, k, name)
			}
		}
		a, err := w.Admit(ctx, 1)
		if err != nil || !a.OK {
			t.Fatalf("%s: %+v, %v", kind, a, err)
		}
		if b, err := w.Admit(ctx, 1); err != nil || !b.OK {
			t.Fatalf("%s: %+v, %v", kind, b, err)
		}
		if r, err := w.Admit(ctx, 1); err != nil || r.OK {
			t.Fatalf("%s: third unit: %+v, %v", kind, r, err)
		}
		want := need[kind] + time.Second
		for _, k := range w.Keys() {
			ttl, err := c.PTTL(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			if ttl <= 0 || ttl > want || ttl < want-500*time.Millisecond {
				t.Fatalf("%s: key %s has PTTL %v, want just under %v", kind, k, ttl, want)
			}
		}
		if err := w.Release(ctx, a.Token); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if err := w.Cancel(ctx, a.Token); err != nil && kind != "Completion" {
			t.Fatalf("%s: %v", kind, err)
		}
		for _, k := range w.Keys() {
			if ttl, err := c.PTTL(ctx, k).Result(); err != nil || ttl <= 0 {
				t.Fatalf("%s: key %s after release and cancel: PTTL %v, %v", kind, k, ttl, err)
			}
		}
	}
}

// TestKeysVanishWhenIdle: the keys of an idle limiter expire by themselves
// once its state no longer matters (here Per = 50 ms, so after 1.05 s plus
// the TTLs' own 1 s of slack at most).
func TestKeysVanishWhenIdle(t *testing.T) {
	if testing.Short() {
		t.Skip("sleeps 1.2 s")
	}
	c := newClient(t, sharedAddr(t))
	ctx := ctxT(t)
	l := Limit{N: 1, Per: 50 * time.Millisecond}
	var ws []*Window
	for _, mk := range []func() (*Window, error){
		func() (*Window, error) { return NewCompletion(c, uniqueName(t), l) },
		func() (*Window, error) { return NewSlidingLog(c, uniqueName(t), l, 0) },
		func() (*Window, error) { return NewGCRA(c, uniqueName(t), l, 0) },
		func() (*Window, error) { return NewTokenBucket(c, uniqueName(t), l, 0) },
		func() (*Window, error) { return NewFixedWindow(c, uniqueName(t), l) },
		func() (*Window, error) { return NewSlidingWindowCounter(c, uniqueName(t), l) },
	} {
		w, err := mk()
		if err != nil {
			t.Fatal(err)
		}
		d, err := w.Admit(ctx, 1)
		if err != nil || !d.OK {
			t.Fatalf("%+v, %v", d, err)
		}
		if err := w.Release(ctx, d.Token); err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	time.Sleep(1200 * time.Millisecond)
	for _, w := range ws {
		if n, err := c.Exists(ctx, w.Keys()...).Result(); err != nil || n != 0 {
			t.Fatalf("%s: %d of its keys left after 1.2 s idle (%v)", w.Keys()[0], n, err)
		}
	}
}
