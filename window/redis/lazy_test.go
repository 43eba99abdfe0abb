package redis

import (
	"errors"
	"testing"
	"time"
)

// TestCompletionKeysRecreatedGetATTL: the completion window's admissions
// refresh TTLs lazily, so an admission that creates a key anew (Redis
// deletes a sorted set when its last member goes) must give it a TTL at
// once: l emptied by a release, z and l emptied by a cancellation.
func TestCompletionKeysRecreatedGetATTL(t *testing.T) {
	c := newClient(t, sharedAddr(t))
	ctx := ctxT(t)
	clk := &manual{t: time.UnixMicro(1_800_000_000_000_000)}
	w, err := NewCompletion(c, uniqueName(t), Limit{N: 10, Per: time.Second}, WithClock(clk.now), WithLease(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		for _, k := range w.Keys() {
			ttl, err := c.PTTL(ctx, k).Result()
			if err != nil || ttl <= 0 {
				t.Fatalf("%s: key %s has PTTL %v, %v", when, k, ttl, err)
			}
		}
	}
	a, err := w.Admit(ctx, 1)
	if err != nil || !a.OK {
		t.Fatalf("%+v, %v", a, err)
	}
	clk.t = clk.t.Add(500 * time.Microsecond)
	if err := w.Release(ctx, a.Token); err != nil { // l is now empty: deleted
		t.Fatal(err)
	}
	clk.t = clk.t.Add(100 * time.Microsecond)
	b, err := w.Admit(ctx, 1) // l created anew
	if err != nil || !b.OK {
		t.Fatalf("%+v, %v", b, err)
	}
	check("after release and admission")
	clk.t = clk.t.Add(2 * time.Second) // a and b count no more
	d, err := w.Admit(ctx, 1)
	if err != nil || !d.OK {
		t.Fatalf("%+v, %v", d, err)
	}
	if err := w.Cancel(ctx, d.Token); err != nil {
		t.Fatal(err)
	}
	clk.t = clk.t.Add(time.Millisecond)
	e, err := w.Admit(ctx, 1)
	if err != nil || !e.OK {
		t.Fatalf("%+v, %v", e, err)
	}
	check("after cancellation and admission")
}

// TestCompletionForgetsWithoutAdmission: a call in flight whose lease ran
// out is forgotten at lease end + Per even when no admission came since to
// prune it: Release, Extend and Cancel then return ErrNotInFlight. A
// microsecond earlier it still counts, and Release stamps its end.
func TestCompletionForgetsWithoutAdmission(t *testing.T) {
	c := newClient(t, sharedAddr(t))
	ctx := ctxT(t)
	clk := &manual{t: time.UnixMicro(1_800_000_000_000_000)}
	t0 := clk.t
	w, err := NewCompletion(c, uniqueName(t), Limit{N: 2, Per: 500 * time.Millisecond}, WithClock(clk.now), WithLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	a, err := w.Admit(ctx, 1)
	if err != nil || !a.OK {
		t.Fatalf("%+v, %v", a, err)
	}
	b, err := w.Admit(ctx, 1)
	if err != nil || !b.OK {
		t.Fatalf("%+v, %v", b, err)
	}
	clk.t = t0.Add(1500*time.Millisecond - time.Microsecond)
	if err := w.Release(ctx, a.Token); err != nil {
		t.Fatalf("1 µs before lease end + Per: %v", err)
	}
	clk.t = t0.Add(1500 * time.Millisecond)
	for op, f := range map[string]func() error{
		"Release": func() error { return w.Release(ctx, b.Token) },
		"Extend":  func() error { return w.Extend(ctx, b.Token, time.Second) },
		"Cancel":  func() error { return w.Cancel(ctx, b.Token) },
	} {
		if err := f(); !errors.Is(err, ErrNotInFlight) {
			t.Errorf("%s at lease end + Per: %v, want ErrNotInFlight", op, err)
		}
	}
	// a was released at 1.5 s - 1 µs, so it counts until 2 s - 1 µs: one
	// unit is free, not two.
	if d, err := w.Admit(ctx, 2); err != nil || d.OK || d.Wait != 500*time.Millisecond-time.Microsecond {
		t.Fatalf("2 units at 1.5 s: %+v, %v", d, err)
	}
}

// TestCompletionPrunesLazily: under a limit that never binds, admissions
// still prune the calls that count no more (every 100 ms at most), so the
// sorted sets stay bounded; and the TTLs always cover the latest score
// with half a second to spare.
func TestCompletionPrunesLazily(t *testing.T) {
	c := newClient(t, sharedAddr(t))
	ctx := ctxT(t)
	clk := &manual{t: time.UnixMicro(1_800_000_000_000_000)}
	per, lease := 10*time.Millisecond, time.Millisecond
	w, err := NewCompletion(c, uniqueName(t), Limit{N: 1 << 40, Per: per}, WithClock(clk.now), WithLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	keys := w.Keys()
	for i := range 1500 {
		clk.t = clk.t.Add(time.Millisecond)
		d, err := w.Admit(ctx, 1)
		if err != nil || !d.OK {
			t.Fatalf("step %d: %+v, %v", i, d, err)
		}
		if i%50 != 0 {
			continue
		}
		// Counted: at most lease + Per + 100 ms of admissions (1 per ms).
		for _, k := range keys[:2] {
			if n, err := c.ZCard(ctx, k).Result(); err != nil || n > 115 {
				t.Fatalf("step %d: %s has %d members, %v", i, k, n, err)
			}
		}
		// The score just written is now + lease + Per; the keys must
		// outlive it by half a second at least.
		min := (lease + per + 500*time.Millisecond) - 50*time.Millisecond
		for _, k := range keys {
			if ttl, err := c.PTTL(ctx, k).Result(); err != nil || ttl < min {
				t.Fatalf("step %d: %s has PTTL %v (%v), want at least %v", i, k, ttl, err, min)
			}
		}
	}
}
