package redissem

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratesem/ratesem/window/redis/redistest"
)

// TestReleaseElsewhereIsNoticedWithinAQuarterInterval: another process
// holds the whole limit (2 per 200 ms, lease one minute) for 400 ms. Redis
// refuses this process's head with InFlight and a wait that runs to the end
// of the lease; the head sleeps at most interval/4 at a time, so once the
// other process releases, it learns the exact wait and is admitted an
// interval after that release (not a minute later), with about one round
// trip per 50 ms meanwhile.
func TestReleaseElsewhereIsNoticedWithinAQuarterInterval(t *testing.T) {
	addr := redistest.Start(t)
	name := uniqueName(t)
	const per = 200 * time.Millisecond
	a := newSem(t, newClient(t, addr), name, 2, per)
	b := newSem(t, newClient(t, addr), name, 2, per)
	ctx := ctxT(t, 5*time.Second)
	if err := b.Acquire(ctx, 2); err != nil {
		t.Fatal(err)
	}
	admitted := make(chan time.Time, 1)
	go func() {
		if err := a.Acquire(ctx, 1); err != nil {
			t.Error(err)
		}
		admitted <- time.Now()
	}()
	time.Sleep(400 * time.Millisecond)
	released := time.Now()
	b.Release(2)
	releasedBy := time.Now()
	at := <-admitted
	a.Release(1)
	st := a.Stats()
	t.Logf("admitted %v after the release (call to return %v); %d round trips", at.Sub(released), releasedBy.Sub(released), st.RedisAdmits)
	if at.Before(released.Add(per - clockTolerance)) {
		t.Errorf("admitted %v after the other process's release, within the interval", at.Sub(released))
	}
	if late := at.Sub(releasedBy.Add(per)); late > 40*time.Millisecond {
		t.Errorf("admitted %v after release + interval: the release was not noticed in time", late)
	}
	// 400 ms of polls every 50 ms, the exact wait, the admission.
	if st.RedisAdmits > 14 {
		t.Errorf("%d admission round trips; want at most about 400 ms / 50 ms + 3", st.RedisAdmits)
	}
}

// TestLocalReleaseWakesTheHead: a Release in the same process wakes the
// head waiting on calls in flight at once (here the interval is 2 s, so the
// head would otherwise sleep 500 ms); it asks again and is told the exact
// wait.
func TestLocalReleaseWakesTheHead(t *testing.T) {
	c := newClient(t, redistest.Start(t))
	s := newSem(t, c, uniqueName(t), 2, 2*time.Second)
	ctx := ctxT(t, 5*time.Second)
	if err := s.Acquire(ctx, 2); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Acquire(wctx, 1) }()
	time.Sleep(100 * time.Millisecond)
	if got := s.Stats().RedisAdmits; got != 2 {
		t.Fatalf("%d admission round trips before the release; want 2 (the holder's, the waiter's refusal)", got)
	}
	s.Release(2)
	deadline := time.Now().Add(50 * time.Millisecond)
	for s.Stats().RedisAdmits != 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the head did not ask again within 50 ms of the release (round trips %d)", s.Stats().RedisAdmits)
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("waiter: %v", err)
	}
	if z, l := zcards(t, s); z != 1 || l != 0 {
		t.Fatalf("z %d, l %d; want only the released call", z, l)
	}
}

// TestPauseHoldsEveryProcess: a pause set in one process holds the starts
// of that process (at once, locally) and of the others (through Redis) until
// it ends; calls in flight go on and can be released meanwhile.
func TestPauseHoldsEveryProcess(t *testing.T) {
	addr := redistest.Start(t)
	name := uniqueName(t)
	const per = 100 * time.Millisecond
	s1 := newSem(t, newClient(t, addr), name, 4, per)
	s2 := newSem(t, newClient(t, addr), name, 4, per)
	ctx := ctxT(t, 5*time.Second)
	if err := s1.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(300 * time.Millisecond)
	s1.Pause(until)
	if got := s1.Stats().PausedUntil; !got.Equal(until) {
		t.Fatalf("PausedUntil %v; want %v", got, until)
	}
	s3 := newSem(t, newClient(t, addr), name, 4, per) // a process started during the pause
	starts := make(chan time.Time, 3)
	for _, s := range []*Semaphore{s1, s2, s3} {
		go func() {
			if err := s.Acquire(ctx, 1); err != nil {
				t.Error(err)
			}
			starts <- time.Now()
		}()
	}
	time.Sleep(50 * time.Millisecond)
	if s2.TryAcquire(1) {
		t.Fatal("TryAcquire in another process during the pause succeeded")
	}
	s1.Release(1) // a call in flight ends during the pause
	for range 3 {
		at := <-starts
		if at.Before(until.Add(-clockTolerance)) {
			t.Errorf("a start %v before the pause ended", until.Sub(at))
		}
		if late := at.Sub(until); late > 50*time.Millisecond {
			t.Errorf("a start %v after the pause ended", late)
		}
	}
	for _, s := range []*Semaphore{s1, s2, s3} {
		s.Release(1)
		if st := s.Stats(); st.RedisErrors != 0 {
			t.Errorf("%+v", st)
		}
	}
	// Shorter and past pauses change nothing.
	s1.PauseFor(-time.Second)
	s1.Pause(time.Now().Add(-time.Second))
	if got := s1.Stats().PausedUntil; !got.Equal(until) {
		t.Fatalf("PausedUntil %v after a past pause; want %v", got, until)
	}
}
