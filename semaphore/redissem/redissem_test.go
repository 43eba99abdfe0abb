package redissem

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesem/ratesem/window"
	"github.com/ratesem/ratesem/window/redis/redistest"
)

// zcards returns the number of members of the completion window's sorted
// sets: z (every call that counts) and l (calls in flight).
func zcards(t *testing.T, s *Semaphore) (z, l int64) {
	t.Helper()
	keys := s.win.Keys()
	ctx := ctxT(t, 5*time.Second)
	cl := s.client
	z, err := cl.ZCard(ctx, keys[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	l, err = cl.ZCard(ctx, keys[1]).Result()
	if err != nil {
		t.Fatal(err)
	}
	return z, l
}

func TestNewChecksItsArguments(t *testing.T) {
	c := newClient(t, "127.0.0.1:1") // never dialled
	bad := []struct {
		name string
		n    int64
		per  time.Duration
		opts []Option
	}{
		{"", 1, time.Second, nil},
		{"x", 0, time.Second, nil},
		{"x", 1, -time.Second, nil},
		{"x", 1, time.Nanosecond, nil},
		{"x", 1, 0, []Option{WithStartWindow(0)}},
		{"x", 1, time.Second, []Option{WithStartWindow(time.Nanosecond)}},
		{"x", 1, time.Second, []Option{WithLease(0)}},
		{"x", 1, time.Second, []Option{WithFallback(0)}},
		{"x", 1, time.Second, []Option{WithFallback(1.5)}},
		{"x", 1, time.Second, []Option{WithJitter(-1)}},
		{"x", 1, time.Second, []Option{WithTimeout(0)}},
	}
	for i, b := range bad {
		if s, err := New(c, b.name, b.n, b.per, b.opts...); err == nil {
			_ = s.Close()
			t.Errorf("case %d: New(%q, %d, %v) accepted", i, b.name, b.n, b.per)
		}
	}
	if _, err := New(c, "x", 0, time.Second); !errors.Is(err, window.ErrInvalidLimit) {
		t.Errorf("n = 0: %v; want ErrInvalidLimit", err)
	}
	if _, err := New(nil, "x", 1, time.Second); err == nil {
		t.Error("nil client accepted")
	}
	s, err := New(c, "x", 5, 0, WithFallback(0.1))
	if err != nil {
		t.Fatal(err)
	}
	if s.localN != 1 {
		t.Errorf("fallback share 0.1 of 5: %d units; want at least 1", s.localN)
	}
	_ = s.Close()
}

// TestAcquireReleaseBasics: weights, zero weights, too large a weight,
// partial releases, over-release and Release after Close.
func TestAcquireReleaseBasics(t *testing.T) {
	c := newClient(t, redistest.Start(t))
	s := newSem(t, c, uniqueName(t), 3, 50*time.Millisecond)
	ctx := ctxT(t, 10*time.Second)
	if err := s.Acquire(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.RedisAdmits != 0 || st.Admitted != 0 {
		t.Fatalf("a zero weight made a round trip or counted: %+v", st)
	}
	if err := s.Acquire(ctx, 4); !errors.Is(err, ErrWeightTooLarge) {
		t.Fatalf("Acquire(4) of 3: %v; want ErrWeightTooLarge", err)
	}
	if s.TryAcquire(4) {
		t.Fatal("TryAcquire(4) of 3 succeeded")
	}
	if err := s.Acquire(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, l := zcards(t, s); l != 2 {
		t.Fatalf("%d calls in flight in Redis; want 2", l)
	}
	// Release(1) ends the call of 1 unit, not half of the call of 2.
	s.Release(1)
	if _, l := zcards(t, s); l != 1 {
		t.Fatalf("after Release(1): %d calls in flight in Redis; want 1", l)
	}
	// Halves of the call of 2: it stays in flight until both are released.
	s.Release(1)
	if _, l := zcards(t, s); l != 1 {
		t.Fatalf("after half a call's release: %d calls in flight; want it still in flight", l)
	}
	if st := s.Stats(); st.InFlight != 1 {
		t.Fatalf("InFlight %d; want 1", st.InFlight)
	}
	s.Release(1)
	if z, l := zcards(t, s); l != 0 || z != 2 {
		t.Fatalf("after all releases: z %d, l %d; want 2 ended calls, none in flight", z, l)
	}
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(r.(string), "released more than held") {
				t.Errorf("over-release: recovered %v", r)
			}
		}()
		s.Release(1)
	}()
	// Release after Close ends the call in Redis.
	if err := s.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	s.Release(1)
	if _, l := zcards(t, s); l != 0 {
		t.Fatalf("Release after Close: %d in flight", l)
	}
	if err := s.Acquire(ctx, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Acquire after Close: %v", err)
	}
	if s.TryAcquire(1) {
		t.Fatal("TryAcquire after Close succeeded")
	}
	if st := s.Stats(); st.Admitted != 3 || st.RedisErrors != 0 || st.ReleasesLost != 0 {
		t.Fatalf("%+v", st)
	}
}

// TestDoReleasesOnPanic: DoN releases its units in Redis when fn panics,
// and the panic goes on.
func TestDoReleasesOnPanic(t *testing.T) {
	c := newClient(t, redistest.Start(t))
	s := newSem(t, c, uniqueName(t), 3, time.Second)
	ctx := ctxT(t, 10*time.Second)
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v; want the panic of fn", r)
			}
		}()
		_ = s.DoN(ctx, 2, func(context.Context) error { panic("boom") })
	}()
	if z, l := zcards(t, s); l != 0 || z != 1 {
		t.Fatalf("after the panic: z %d, l %d; want the call ended, not in flight", z, l)
	}
	if st := s.Stats(); st.InFlight != 0 {
		t.Fatalf("InFlight %d after the panic", st.InFlight)
	}
	want := errors.New("fn's error")
	if err := s.Do(ctx, func(context.Context) error { return want }); err != want {
		t.Fatalf("Do: %v; want fn's error", err)
	}
	// 3 units ended within the interval: the next Do fails before fn runs.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	ran := false
	if err := s.Do(short, func(context.Context) error { ran = true; return nil }); !errors.Is(err, context.DeadlineExceeded) || ran {
		t.Fatalf("Do over the limit: %v, ran %v", err, ran)
	}
}

// TestCancelledCallerLeavesNoTrace: a caller whose context ends as Redis
// admits it gets ctx.Err(), and its token is cancelled in Redis; a waiter
// whose context ends while it sleeps leaves nothing either, and the waiter
// behind it moves on.
func TestCancelledCallerLeavesNoTrace(t *testing.T) {
	addr := redistest.Start(t)
	s := newSem(t, newClient(t, addr), uniqueName(t), 2, 100*time.Millisecond)
	ctx := ctxT(t, 10*time.Second)

	// Admitted by Redis as the context ends.
	cctx, cancel := context.WithCancel(ctx)
	s.afterAdmit = cancel
	if err := s.Acquire(cctx, 2); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire cancelled as admitted: %v", err)
	}
	s.afterAdmit = nil
	if z, l := zcards(t, s); z != 0 || l != 0 {
		t.Fatalf("the cancelled admission left z %d, l %d in Redis", z, l)
	}
	if st := s.Stats(); st.Cancelled != 1 || st.Admitted != 0 || st.InFlight != 0 || st.RedisAdmits != 1 {
		t.Fatalf("%+v", st)
	}
	// The whole limit is there at once.
	if !s.TryAcquire(2) {
		t.Fatal("the cancelled admission still counts")
	}

	// A waiter (in Redis's refusal, InFlight) whose context ends, with one
	// behind it that does not give up.
	other := newSem(t, newClient(t, addr), s.Name(), 2, 100*time.Millisecond)
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Millisecond)
	defer wcancel()
	errs := make(chan error, 2)
	go func() { errs <- s.Acquire(wctx, 1) }()
	for s.Stats().Waiting != 1 {
		time.Sleep(time.Millisecond)
	}
	go func() { errs <- s.Acquire(ctx, 1) }()
	if err := <-errs; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the waiter that gave up: %v", err)
	}
	if z, l := zcards(t, s); z != 1 || l != 1 {
		t.Fatalf("after the waiter gave up: z %d, l %d; want only the holder's call", z, l)
	}
	// The other process cannot take the held units either.
	if other.TryAcquire(1) {
		t.Fatal("another process overtook the limit")
	}
	s.Release(2)
	if err := <-errs; err != nil {
		t.Fatalf("the waiter behind: %v", err)
	}
	s.Release(1)
	if st := s.Stats(); st.InFlight != 0 || st.Waiting != 0 || st.Cancelled != 1 {
		t.Fatalf("%+v", st)
	}
}

// TestTryAcquireNeverWaits: TryAcquire returns at once, without a round
// trip, when waiters are queued or a pause is on, and after one round trip
// when Redis refuses; it succeeds when there is room.
func TestTryAcquireNeverWaits(t *testing.T) {
	c := newClient(t, redistest.Start(t))
	s := newSem(t, c, uniqueName(t), 1, 300*time.Millisecond)
	ctx := ctxT(t, 10*time.Second)
	if !s.TryAcquire(1) {
		t.Fatal("TryAcquire with room failed")
	}
	begin := time.Now()
	if s.TryAcquire(1) {
		t.Fatal("TryAcquire over the limit succeeded")
	}
	if d := time.Since(begin); d > 100*time.Millisecond {
		t.Fatalf("a refused TryAcquire took %v", d)
	}
	// A waiter queued: TryAcquire fails with no round trip.
	done := make(chan error, 1)
	go func() { done <- s.Acquire(ctx, 1) }()
	for s.Stats().Waiting != 1 {
		time.Sleep(time.Millisecond)
	}
	before := s.Stats().RedisAdmits
	begin = time.Now()
	if s.TryAcquire(1) {
		t.Fatal("TryAcquire overtook a waiter")
	}
	if d := time.Since(begin); d > 10*time.Millisecond {
		t.Fatalf("TryAcquire behind a waiter took %v", d)
	}
	s.Release(1)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s.Release(1)
	if got := s.Stats().RedisAdmits - before; got > 3 {
		// The waiter's own round trips: refused at once (in flight),
		// woken by the release, told the exact wait, admitted.
		t.Fatalf("%d round trips while TryAcquire was refused behind a waiter and the waiter was served", got)
	}
	// A pause: TryAcquire fails at once.
	s.PauseFor(time.Hour)
	before = s.Stats().RedisAdmits
	if s.TryAcquire(1) || s.Stats().RedisAdmits != before {
		t.Fatal("TryAcquire during a pause succeeded or made a round trip")
	}
}

// TestOnlyTheHeadTalksToRedis: 200 goroutines of one process wait for a
// limit of 5 per 200 ms for a second; the process makes about two round
// trips per admission (the admission and one refusal, after which the head
// sleeps the exact wait), not one per goroutine.
func TestOnlyTheHeadTalksToRedis(t *testing.T) {
	c := newClient(t, redistest.Start(t))
	s := newSem(t, c, uniqueName(t), 5, 200*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for range 200 {
		wg.Go(func() {
			if err := s.Acquire(ctx, 1); err == nil {
				admitted.Add(1)
				s.Release(1)
			}
		})
	}
	wg.Wait()
	st := s.Stats()
	t.Logf("%d admitted, %d admission round trips", admitted.Load(), st.RedisAdmits)
	if admitted.Load() < 20 {
		t.Errorf("only %d admitted in 1 s at 5 per 200 ms", admitted.Load())
	}
	if bound := 3*uint64(admitted.Load()) + 20; st.RedisAdmits > bound {
		t.Errorf("%d admission round trips for %d admissions (bound %d): waiters poll Redis", st.RedisAdmits, admitted.Load(), bound)
	}
}

// TestDeadlineFailsEarly: when Redis's wait ends after the context's
// deadline, Acquire fails at once with an error matching ErrDeadline and
// context.DeadlineExceeded.
func TestDeadlineFailsEarly(t *testing.T) {
	c := newClient(t, redistest.Start(t))
	s := newSem(t, c, uniqueName(t), 1, time.Second)
	ctx := ctxT(t, 10*time.Second)
	if err := s.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	s.Release(1)
	dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	begin := time.Now()
	err := s.Acquire(dctx, 1)
	if !errors.Is(err, ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v; want ErrDeadline", err)
	}
	if d := time.Since(begin); d > 100*time.Millisecond {
		t.Fatalf("failed after %v, not at once", d)
	}
}

// TestCloseWakesWaiters: Close makes the head and the waiters behind it
// return ErrClosed at once.
func TestCloseWakesWaiters(t *testing.T) {
	noLeaks(t)
	c := newClient(t, redistest.Start(t))
	s := newSem(t, c, uniqueName(t), 1, time.Hour)
	ctx := ctxT(t, 10*time.Second)
	if err := s.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 3)
	for range 3 {
		go func() { errs <- s.Acquire(ctx, 1) }()
	}
	for s.Stats().Waiting != 3 {
		time.Sleep(time.Millisecond)
	}
	_ = s.Close()
	_ = s.Close()
	for range 3 {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrClosed) {
				t.Fatalf("waiter: %v; want ErrClosed", err)
			}
		case <-time.After(time.Second):
			t.Fatal("Close did not wake the waiters")
		}
	}
	s.Release(1)
}
