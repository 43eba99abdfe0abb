package semaphore

import (
	"errors"
	"testing"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// caughtPanic runs f and returns what it panicked with (nil: no panic).
func caughtPanic(f func()) (r any) {
	defer func() { r = recover() }()
	f()
	return nil
}

// Over Redis, an observer that panics on Admitted reaches the caller of
// Acquire, TryAcquire or Begin, who then holds nothing: the call leaves
// flight in Redis, so that other processes get its units back at once. On
// 3c9e6ad the call stayed held in this process and in Redis (until its
// lease ran out) with nobody to release it.
func TestRedisObserverPanicOnAdmittedReleases(t *testing.T) {
	addr := redistest.Start(t).Addr()
	name := uniqueName(t)
	boom := true
	s := newRedisSem(t, newClient(t, addr), name, 3, time.Hour, WithObserver(func(e ratesem.Event) {
		if boom && e.Kind == ratesem.Admitted {
			panic("admitted")
		}
	}))
	other := newRedisSem(t, newClient(t, addr), name, 3, time.Hour)
	ctx := ctxT(t, 10*time.Second)
	for _, f := range []struct {
		what string
		call func()
	}{
		{"Acquire", func() { _ = s.Acquire(ctx, 1) }},
		{"TryAcquire", func() { s.TryAcquire(1) }},
		{"Begin", func() { _, _ = s.Begin(ctx, 1) }},
	} {
		if caughtPanic(f.call) == nil {
			t.Fatalf("%s: the observer's panic did not reach the caller", f.what)
		}
		if st := s.Stats(); st.InFlight != 0 {
			t.Fatalf("%s: %d units in flight after the panic", f.what, st.InFlight)
		}
	}
	// The 3 calls ended at once: the completion window of an hour counts 3
	// units done, so the limit of 3 is spent, but none is in flight: a
	// second process's SetLimit to 5 makes room for exactly 2.
	if err := other.SetLimit(5, time.Hour); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "2 units free in Redis", func() bool { return other.TryAcquire(2) })
	if other.TryAcquire(1) {
		t.Fatal("a sixth unit admitted under a limit of 5")
	}
	boom = false
}

// Over Redis, Call.End twice panics whatever other calls hold, and ends
// none of theirs; Release does not end a Call's units. On 3c9e6ad the
// second End ended another call of the same weight.
func TestRedisCallEndTwicePanics(t *testing.T) {
	addr := redistest.Start(t).Addr()
	name := uniqueName(t)
	s := newRedisSem(t, newClient(t, addr), name, 4, time.Hour)
	ctx := ctxT(t, 10*time.Second)
	a, err := s.Begin(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Begin(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	a.End(2)
	if caughtPanic(func() { a.End(2) }) == nil {
		t.Fatal("End twice did not panic while another call held units")
	}
	if caughtPanic(func() { s.Release(2) }) == nil {
		t.Fatal("Release of a Call's units did not panic")
	}
	if st := s.Stats(); st.InFlight != 2 {
		t.Fatalf("in flight %d, want b's 2", st.InFlight)
	}
	if got := s.o.RemoteStats().InFlight; got != 1 {
		t.Fatalf("the engine holds %d calls, want b alone", got)
	}
	b.End(1)
	if st := s.Stats(); st.InFlight != 0 {
		t.Fatalf("in flight %d after every End", st.InFlight)
	}
}

// Over Redis, an observer that blocks stalls its own caller only: the
// other goroutines' calls are admitted and released meanwhile.
func TestRedisObserverBlockingStallsOnlyItsCaller(t *testing.T) {
	addr := redistest.Start(t).Addr()
	block, entered := make(chan struct{}), make(chan struct{})
	s := newRedisSem(t, newClient(t, addr), uniqueName(t), 3, 50*time.Millisecond, WithObserver(func(e ratesem.Event) {
		if e.Kind == ratesem.Admitted && e.Weight == 2 {
			close(entered)
			<-block
		}
	}))
	ctx := ctxT(t, 10*time.Second)
	done := make(chan error)
	go func() { done <- s.Acquire(ctx, 2) }()
	<-entered
	for range 5 {
		if err := s.Acquire(ctx, 1); err != nil {
			t.Fatal(err)
		}
		s.Release(1)
	}
	close(block)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s.Release(2)
}

// A Release that would take a Call's units panics with the same message
// over Redis as in process (one product), and so does a Release of more
// than anything holds. On the base commit Redis gave the generic
// over-release message for both.
func TestRedisReleaseOfCallUnitsPanicsAsInProcess(t *testing.T) {
	addr := redistest.Start(t).Addr()
	ctx := ctxT(t, 10*time.Second)
	local := New(4, time.Hour)
	shared := newRedisSem(t, newClient(t, addr), uniqueName(t), 4, time.Hour)
	for _, s := range []*RateSemaphore{local, shared} {
		if err := s.Acquire(ctx, 1); err != nil {
			t.Fatal(err)
		}
		c, err := s.Begin(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		defer c.End(2)
		defer s.Release(1)
	}
	for _, n := range []int64{2, 3, 4} {
		want, got := caughtPanic(func() { local.Release(n) }), caughtPanic(func() { shared.Release(n) })
		if want == nil || got != want {
			t.Errorf("Release(%d) with 1 unit acquired and a Call of 2: in process %v, over Redis %v", n, want, got)
		}
	}
	if want := "ratesem: Release of units held by a Call from Begin: end it with Call.End"; caughtPanic(func() { shared.Release(3) }) != want {
		t.Errorf("over Redis, Release(3) does not say %q", want)
	}
	if st := shared.Stats(); st.InFlight != 3 {
		t.Fatalf("in flight %d after the panics, want 3", st.InFlight)
	}
}

// Over Redis, SetLimit of a bucket or GCRA whose burst was left to follow
// N (NewTokenBucket(l, 0), NewGCRA(l, 0)) moves the burst with N, as in
// process: a call of the new N is admitted, not refused as heavier than
// the old burst. A burst given stays. On the base commit Redis kept the
// first N as the burst: Acquire(8) after SetLimit(8) of a bucket of 4
// failed with ErrWeightTooLarge where in process it was admitted.
func TestRedisSetLimitBurstFollowsN(t *testing.T) {
	addr := redistest.Start(t).Addr()
	ctx := ctxT(t, 10*time.Second)
	l := window.Limit{N: 4, Per: time.Second}
	for name, mk := range map[string]func() window.Policy{
		"token bucket":       func() window.Policy { return window.NewTokenBucket(l, 0) },
		"leaky bucket":       func() window.Policy { return window.NewLeakyBucket(l, 0) },
		"gcra":               func() window.Policy { return window.NewGCRA(l, 0) },
		"pacer":              func() window.Policy { return window.NewPacer(l) },
		"token bucket burst": func() window.Policy { return window.NewTokenBucket(l, 4) },
		"gcra burst":         func() window.Policy { return window.NewGCRA(l, 4) },
	} {
		t.Run(name, func(t *testing.T) {
			local := NewWithPolicy(mk())
			shared, err := redisNewPolicy(newClient(t, addr), uniqueName(t), mk())
			if err != nil {
				t.Fatal(err)
			}
			defer shared.Close()
			var got [2]error
			for i, s := range []*RateSemaphore{local, shared} {
				if err := s.SetLimit(8, time.Second); err != nil {
					t.Fatal(err)
				}
				got[i] = s.Acquire(ctx, 8)
			}
			if (got[0] == nil) != (got[1] == nil) || got[0] != nil && !errors.Is(got[1], ratesem.ErrWeightTooLarge) {
				t.Fatalf("Acquire(8) after SetLimit(8): in process %v, over Redis %v", got[0], got[1])
			}
		})
	}
}
