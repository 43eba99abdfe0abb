package redis

import (
	"errors"
	"testing"
	"time"

	"github.com/ratesem/ratesem/window"
)

// TestKilledReplicaFreesItsSlotAfterTheLease: a replica admits calls and
// dies without releasing them. While their leases run, another replica is
// refused with InFlight set; once a lease has run out the call counts as
// ended at its lease end, so its units are free again Per later, to the
// microsecond (explicit clock).
func TestKilledReplicaFreesItsSlotAfterTheLease(t *testing.T) {
	addr := sharedAddr(t)
	ctx := ctxT(t)
	name := uniqueName(t)
	clk := &manual{t: time.UnixMicro(1_800_000_000_000_000)}
	t0 := clk.t
	l := Limit{N: 3, Per: 500 * time.Millisecond}
	lease := time.Second
	dead, err := NewCompletion(newClient(t, addr), name, l, WithLease(lease), WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	alive, err := NewCompletion(newClient(t, addr), name, l, WithLease(lease), WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := dead.Admit(ctx, 2); err != nil || !d.OK {
		t.Fatalf("dead replica's admission: %+v, %v", d, err)
	}
	clk.t = t0.Add(100 * time.Millisecond)
	if d, err := alive.Admit(ctx, 1); err != nil || !d.OK {
		t.Fatalf("one unit left: %+v, %v", d, err)
	} else if err := alive.Release(ctx, d.Token); err != nil {
		t.Fatal(err)
	}
	// The released unit frees at 100 ms + Per = 600 ms.
	clk.t = t0.Add(600 * time.Millisecond)
	if d, err := alive.Admit(ctx, 1); err != nil || !d.OK {
		t.Fatalf("at 600 ms the released unit is free: %+v, %v", d, err)
	} else if err := alive.Cancel(ctx, d.Token); err != nil {
		t.Fatal(err)
	}
	// Two units in flight in the dead replica: a call of 2 cannot start
	// until their leases end (1 s) and then Per passes (1.5 s).
	clk.t = t0.Add(700 * time.Millisecond)
	d, err := alive.Admit(ctx, 2)
	if err != nil || d.OK || !d.InFlight || d.Wait != 800*time.Millisecond {
		t.Fatalf("at 700 ms, 2 units: %+v, %v; want refused, InFlight, wait 800ms", d, err)
	}
	// After the lease the calls count as ended at 1 s: no longer in flight,
	// and dated.
	clk.t = t0.Add(1200 * time.Millisecond)
	d, err = alive.Admit(ctx, 2)
	if err != nil || d.OK || d.InFlight || d.Wait != 300*time.Millisecond {
		t.Fatalf("at 1.2 s, 2 units: %+v, %v; want refused, not InFlight, wait 300ms", d, err)
	}
	clk.t = t0.Add(1500*time.Millisecond - time.Microsecond)
	if d, err = alive.Admit(ctx, 2); err != nil || d.OK || d.Wait != time.Microsecond {
		t.Fatalf("1 µs before the slots free: %+v, %v", d, err)
	}
	clk.t = t0.Add(1500 * time.Millisecond)
	if d, err = alive.Admit(ctx, 3); err != nil || !d.OK {
		t.Fatalf("at lease end + Per the dead replica's slots are free: %+v, %v", d, err)
	}
}

// TestKilledReplicaRealTime is the same on the server's clock: a replica
// takes the whole limit and vanishes (its client closed); another one is
// refused, sleeps the wait it is given, and gets in.
func TestKilledReplicaRealTime(t *testing.T) {
	addr := sharedAddr(t)
	ctx := ctxT(t)
	name := uniqueName(t)
	l := Limit{N: 2, Per: 100 * time.Millisecond}
	lease := 300 * time.Millisecond
	deadClient := newClient(t, addr)
	dead, err := NewCompletion(deadClient, name, l, WithLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	alive, err := NewCompletion(newClient(t, addr), name, l, WithLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	d0, err := dead.Admit(ctx, 2)
	if err != nil || !d0.OK {
		t.Fatalf("%+v, %v", d0, err)
	}
	_ = deadClient.Close() // the replica dies mid-call
	d, err := alive.Admit(ctx, 1)
	if err != nil || d.OK || !d.InFlight {
		t.Fatalf("while the dead replica's lease runs: %+v, %v; want refused, InFlight", d, err)
	}
	// It frees at lease end + Per on the server's clock.
	want := d0.At.Add(lease + l.Per)
	if got := d.At.Add(d.Wait); !got.Equal(want) {
		t.Fatalf("retry at %v after the dead admission, want %v", got.Sub(d0.At), want.Sub(d0.At))
	}
	time.Sleep(d.Wait)
	for i := 0; ; i++ {
		d, err = alive.Admit(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		if d.OK {
			break
		}
		// The local clock and the server's run at the same rate here (one
		// machine), so a refusal after sleeping Wait can only come from
		// rounding: the wait left must be tiny.
		if i > 3 || d.Wait > 5*time.Millisecond {
			t.Fatalf("after sleeping the wait: %+v", d)
		}
		time.Sleep(d.Wait)
	}
	if d.At.Before(want) {
		t.Fatalf("admitted at %v, before lease end + Per (%v)", d.At.Sub(d0.At), want.Sub(d0.At))
	}
}

// TestExtendReleaseCancel covers the lease operations of the completion
// window: Extend keeps a long call in flight, Release stamps the end, Cancel
// erases a reservation at once, and each refuses a token that is no longer
// in flight with ErrNotInFlight.
func TestExtendReleaseCancel(t *testing.T) {
	addr := sharedAddr(t)
	ctx := ctxT(t)
	clk := &manual{t: time.UnixMicro(1_800_000_000_000_000)}
	t0 := clk.t
	at := func(d time.Duration) { clk.t = t0.Add(d) }
	l := Limit{N: 1, Per: 200 * time.Millisecond}
	w, err := NewCompletion(newClient(t, addr), uniqueName(t), l, WithLease(time.Second), WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	a, err := w.Admit(ctx, 1)
	if err != nil || !a.OK || a.Token == "" {
		t.Fatalf("%+v, %v", a, err)
	}
	// Extend at 900 ms by 1 s: the lease now ends at 1.9 s.
	at(900 * time.Millisecond)
	if err := w.Extend(ctx, a.Token, time.Second); err != nil {
		t.Fatal(err)
	}
	at(1500 * time.Millisecond)
	if d, err := w.Admit(ctx, 1); err != nil || d.OK || !d.InFlight || d.Wait != 600*time.Millisecond {
		t.Fatalf("at 1.5 s, after the extension: %+v, %v; want refused, InFlight, wait 600ms (1.9 s + Per)", d, err)
	}
	// A shorter extension does not shorten the lease.
	if err := w.Extend(ctx, a.Token, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d, _ := w.Admit(ctx, 1); d.OK || d.Wait != 600*time.Millisecond {
		t.Fatalf("a shorter extension moved the lease: %+v", d)
	}
	// Released at 1.6 s: free at 1.8 s.
	at(1600 * time.Millisecond)
	if err := w.Release(ctx, a.Token); err != nil {
		t.Fatal(err)
	}
	if d, _ := w.Admit(ctx, 1); d.OK || d.InFlight || d.Wait != 200*time.Millisecond {
		t.Fatalf("after the release: %+v; want refused for Per, not InFlight", d)
	}
	for op, f := range map[string]func() error{
		"Release":                         func() error { return w.Release(ctx, a.Token) },
		"Extend":                          func() error { return w.Extend(ctx, a.Token, time.Second) },
		"Cancel":                          func() error { return w.Cancel(ctx, a.Token) },
		"Release of a token never issued": func() error { return w.Release(ctx, "1:nosuchtoken") },
	} {
		if err := f(); !errors.Is(err, ErrNotInFlight) {
			t.Errorf("%s after the release: %v, want ErrNotInFlight", op, err)
		}
	}
	// Cancel gives the units back at once, without a completion stamp.
	at(1800 * time.Millisecond)
	b, err := w.Admit(ctx, 1)
	if err != nil || !b.OK {
		t.Fatalf("%+v, %v", b, err)
	}
	if err := w.Cancel(ctx, b.Token); err != nil {
		t.Fatal(err)
	}
	if d, err := w.Admit(ctx, 1); err != nil || !d.OK {
		t.Fatalf("after Cancel the unit is free at once: %+v, %v", d, err)
	}
	// The start windows ignore Release and Extend.
	s, err := NewFixedWindow(newClient(t, addr), uniqueName(t), l)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "1:5"); err != nil {
		t.Fatal(err)
	}
	if err := s.Extend(ctx, "1:5", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.Cancel(ctx, "garbage"); err == nil {
		t.Fatal("Cancel of a malformed token: no error")
	}
}

// TestCompletionWithoutRate: with Per 0 the completion window caps the units
// in flight across processes, and a release frees them at once.
func TestCompletionWithoutRate(t *testing.T) {
	ctx := ctxT(t)
	clk := &manual{t: time.UnixMicro(1_800_000_000_000_000)}
	w, err := NewCompletion(newClient(t, sharedAddr(t)), uniqueName(t), Limit{N: 2}, WithLease(time.Second), WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	a, err := w.Admit(ctx, 2)
	if err != nil || !a.OK {
		t.Fatalf("%+v, %v", a, err)
	}
	if d, err := w.Admit(ctx, 1); err != nil || d.OK || !d.InFlight || d.Wait != time.Second {
		t.Fatalf("full: %+v, %v; want refused, InFlight, wait the lease", d, err)
	}
	if err := w.Release(ctx, a.Token); err != nil {
		t.Fatal(err)
	}
	if d, err := w.Admit(ctx, 2); err != nil || !d.OK {
		t.Fatalf("after the release, at the same instant: %+v, %v", d, err)
	}
}

// TestConstructorsCheckTheirArguments: limits the scripts cannot represent
// exactly are refused with an error matching window.ErrInvalidLimit, and so
// are weights a window could never admit.
func TestConstructorsCheckTheirArguments(t *testing.T) {
	c := newClient(t, "127.0.0.1:1") // never dialled
	bad := map[string]func() (*Window, error){
		"N 0":                      func() (*Window, error) { return NewFixedWindow(c, "x", Limit{N: 0, Per: time.Second}) },
		"Per 0 for a start window": func() (*Window, error) { return NewSlidingLog(c, "x", Limit{N: 1}, 0) },
		"Per not whole µs":         func() (*Window, error) { return NewTokenBucket(c, "x", Limit{N: 1, Per: 1500 * time.Nanosecond}, 0) },
		"negative Per":             func() (*Window, error) { return NewCompletion(c, "x", Limit{N: 1, Per: -time.Second}) },
		"Per over 2^50 µs":         func() (*Window, error) { return NewFixedWindow(c, "x", Limit{N: 1, Per: time.Duration(1 << 62)}) },
		"negative burst":           func() (*Window, error) { return NewGCRA(c, "x", Limit{N: 1, Per: time.Second}, -1) },
		"GCRA burst too long":      func() (*Window, error) { return NewGCRA(c, "x", Limit{N: 1, Per: 1 << 40 * time.Microsecond}, 1<<20) },
	}
	for name, f := range bad {
		if _, err := f(); !errors.Is(err, window.ErrInvalidLimit) {
			t.Errorf("%s: %v, want ErrInvalidLimit", name, err)
		}
	}
	l := Limit{N: 1, Per: time.Second}
	for name, f := range map[string]func() (*Window, error){
		"empty name":      func() (*Window, error) { return NewFixedWindow(c, "", l) },
		"nil client":      func() (*Window, error) { return NewFixedWindow(nil, "x", l) },
		"zero lease":      func() (*Window, error) { return NewCompletion(c, "x", l, WithLease(0)) },
		"margin in ns":    func() (*Window, error) { return NewSlidingLog(c, "x", l, time.Nanosecond) },
		"negative margin": func() (*Window, error) { return NewSlidingLog(c, "x", l, -time.Second) },
	} {
		if _, err := f(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	w, err := NewGCRA(c, "x", l, 3)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if _, err := w.Admit(ctx, 4); !errors.Is(err, window.ErrWeightTooLarge) {
		t.Errorf("4 units with burst 3: %v, want ErrWeightTooLarge", err)
	}
	if _, err := w.Admit(ctx, -1); err == nil {
		t.Error("negative weight: no error")
	}
	if d, err := w.Admit(ctx, 0); err != nil || !d.OK {
		t.Errorf("0 units: %+v, %v; want admitted without a round trip", d, err)
	}
	if err := w.Extend(ctx, "1:1", 0); err == nil {
		t.Error("Extend by 0: no error")
	}
}
