package semaphore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/redistest"
)

// TestRedisReleaseElsewhereIsNoticedWithinAQuarterInterval: another
// process holds the whole limit (2 per 200 ms, lease one minute) for
// 400 ms. Redis refuses this process's head because calls in flight fill
// it, with a wait that runs to the end of the lease; the head sleeps at
// most interval/4 at a time, so once the other process releases, it learns
// the exact wait and is admitted an interval after that release (not a
// minute later), with about one round trip per 50 ms meanwhile.
func TestRedisReleaseElsewhereIsNoticedWithinAQuarterInterval(t *testing.T) {
	addr := redistest.Start(t).Addr()
	name := uniqueName(t)
	const per = 200 * time.Millisecond
	a := newRedisSem(t, newClient(t, addr), name, 2, per)
	b := newRedisSem(t, newClient(t, addr), name, 2, per)
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
	// When the release reaches Redis (its lease leaves the set): on a loaded
	// machine the background round trip can take a good part of the
	// interval, and the head can only notice a release that landed.
	rdb := newClient(t, addr)
	leases, err := rdb.Keys(ctx, "*"+name+"*:f").Result()
	if err != nil || len(leases) != 1 {
		t.Fatalf("the lease set of %q: %v %v", name, leases, err)
	}
	time.Sleep(400 * time.Millisecond)
	released := time.Now()
	b.Release(2) // sent in the background: it reaches Redis a little later
	landed := released
	for rdb.ZCard(ctx, leases[0]).Val() != 0 {
		time.Sleep(time.Millisecond)
		landed = time.Now()
	}
	at := <-admitted
	a.Release(1)
	st := a.Stats()
	t.Logf("admitted %v after the release (%v after it reached Redis); %d round trips", at.Sub(released), at.Sub(landed), st.RedisAdmits)
	if at.Before(released.Add(per - clockTolerance)) {
		t.Errorf("admitted %v after the other process's release, within the interval", at.Sub(released))
	}
	if late := at.Sub(landed.Add(per)); late > 60*time.Millisecond {
		t.Errorf("admitted %v after the release reached Redis + interval: the release was not noticed in time", late)
	}
	// 400 ms of asks every 50 ms, the exact wait, the admission.
	if st.RedisAdmits > 14 {
		t.Errorf("%d admission round trips; want at most about 400 ms / 50 ms + 3", st.RedisAdmits)
	}
}

// TestRedisLocalReleaseWakesTheHead: a Release in the same process wakes
// the head waiting on calls in flight as soon as the release reached Redis
// (here the interval is 2 s, so the head would otherwise sleep 500 ms); it
// asks again and is told the exact wait.
func TestRedisLocalReleaseWakesTheHead(t *testing.T) {
	s := newRedisSem(t, newClient(t, redistest.Start(t).Addr()), uniqueName(t), 2, 2*time.Second)
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
	waitUntil(t, 50*time.Millisecond, "the head asks again after the release", func() bool { return s.Stats().RedisAdmits == 3 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("waiter: %v", err)
	}
}

// TestRedisPauseHoldsEveryProcess: a pause set in one process holds the
// starts of that process (at once, locally) and of the others (through
// Redis) until it ends; calls in flight go on and can be released
// meanwhile. Pause never blocks.
func TestRedisPauseHoldsEveryProcess(t *testing.T) {
	addr := redistest.Start(t).Addr()
	name := uniqueName(t)
	const per = 100 * time.Millisecond
	s1 := newRedisSem(t, newClient(t, addr), name, 4, per)
	s2 := newRedisSem(t, newClient(t, addr), name, 4, per)
	ctx := ctxT(t, 5*time.Second)
	if err := s1.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(300 * time.Millisecond)
	s1.Pause(until)
	if got := s1.Stats().PausedUntil; got.Before(until.Add(-time.Millisecond)) || got.After(until.Add(time.Millisecond)) {
		t.Fatalf("PausedUntil %v; want %v", got, until)
	}
	time.Sleep(20 * time.Millisecond)                      // the pause is written in the background
	s3 := newRedisSem(t, newClient(t, addr), name, 4, per) // a process started during the pause
	starts := make(chan time.Time, 3)
	for _, s := range []*RateSemaphore{s1, s2, s3} {
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
		if at.Before(until.Add(-5 * time.Millisecond)) {
			t.Errorf("a start %v before the pause ended", until.Sub(at))
		}
		if late := at.Sub(until); late > 150*time.Millisecond {
			t.Errorf("a start %v after the pause ended", late)
		}
	}
	for _, s := range []*RateSemaphore{s1, s2, s3} {
		s.Release(1)
		if st := s.Stats(); st.RedisErrors != 0 {
			t.Errorf("%+v", st)
		}
	}
}

// TestRedisTimeoutsHoldWithADefaultClient: on go-redis clients built the
// default way (no ContextTimeoutEnabled: they ignore contexts' deadlines
// while they wait for a reply), a server stalled by DEBUG SLEEP 2 holds no
// caller beyond WithRedisTimeout or its context, and Release and PauseFor
// return at once. Once the server wakes, the admissions the callers left
// behind are cancelled and the release goes through: the whole limit is
// free again.
func TestRedisTimeoutsHoldWithADefaultClient(t *testing.T) {
	noLeaks(t)
	srv := redistest.Start(t)
	name := uniqueName(t)
	const per = 100 * time.Millisecond
	fast := newRedisSem(t, newClient(t, srv.Addr()), name, 3, per, WithRedisTimeout(200*time.Millisecond))
	slow := newRedisSem(t, newClient(t, srv.Addr()), name, 3, per) // 1 s
	ctx := ctxT(t, 20*time.Second)
	if err := fast.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	sleeper := newClient(t, srv.Addr())
	woke := make(chan error, 1)
	go func() { woke <- sleeper.Do(ctx, "DEBUG", "SLEEP", "2").Err() }()
	time.Sleep(100 * time.Millisecond) // the server is asleep now

	var wg sync.WaitGroup
	var fastErr, slowErr error
	var fastTook, slowTook, relTook, pauseTook time.Duration
	wg.Go(func() {
		begin := time.Now()
		fastErr = fast.Acquire(ctx, 1)
		fastTook = time.Since(begin)
	})
	wg.Go(func() {
		actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		begin := time.Now()
		slowErr = slow.Acquire(actx, 1)
		slowTook = time.Since(begin)
	})
	wg.Go(func() {
		time.Sleep(50 * time.Millisecond)
		begin := time.Now()
		fast.Release(1)
		relTook = time.Since(begin)
	})
	wg.Go(func() {
		begin := time.Now()
		slow.PauseFor(time.Millisecond)
		pauseTook = time.Since(begin)
	})
	wg.Wait()
	t.Logf("during DEBUG SLEEP 2: Acquire (timeout 200ms) %v in %v; Acquire (ctx 300ms) %v in %v; Release %v; PauseFor %v",
		fastErr, fastTook, slowErr, slowTook, relTook, pauseTook)
	if !errors.Is(fastErr, ratesem.ErrUnavailable) || errors.Is(fastErr, context.DeadlineExceeded) || fastTook > 500*time.Millisecond {
		t.Errorf("Acquire with WithRedisTimeout(200ms): %v after %v; want ratesem.ErrUnavailable within about 200 ms", fastErr, fastTook)
	}
	if !errors.Is(slowErr, context.DeadlineExceeded) || slowTook > 600*time.Millisecond {
		t.Errorf("Acquire with a 300 ms context: %v after %v; want context.DeadlineExceeded within about 300 ms", slowErr, slowTook)
	}
	// Waiting on Redis would take the store's 200 ms timeout at least (the
	// server sleeps 2 s); a loaded CI run took 21 ms without waiting.
	if relTook > 100*time.Millisecond || pauseTook > 100*time.Millisecond {
		t.Errorf("Release took %v, PauseFor %v: they must not wait on Redis", relTook, pauseTook)
	}
	if err := <-woke; err != nil {
		t.Fatal(err)
	}
	// The server is awake: the round trips left behind finish, the late
	// admissions are cancelled, the release goes through.
	other := newRedisSem(t, newClient(t, srv.Addr()), name, 3, per)
	waitUntil(t, 5*time.Second, "the whole limit free again", func() bool {
		if other.TryAcquire(3) {
			other.Release(3)
			return true
		}
		return false
	})
	t.Logf("fast %+v; slow %+v", fast.Stats(), slow.Stats())
}

// TestRedisRetryNeverSpins: a head refused because calls in flight
// elsewhere fill the limit re-asks at most every quarter interval, and
// never sooner than MinRetry: with an interval of 4 µs it would re-ask
// after 1 µs, thousands of times a second.
func TestRedisRetryNeverSpins(t *testing.T) {
	addr := redistest.Start(t).Addr()
	name := uniqueName(t)
	holder := newRedisSem(t, newClient(t, addr), name, 1, 4*time.Microsecond)
	waiter := newRedisSem(t, newClient(t, addr), name, 1, 4*time.Microsecond)
	ctx := ctxT(t, 10*time.Second)
	if err := holder.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	defer holder.Release(1)
	actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if err := waiter.Acquire(actx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v", err)
	}
	n := waiter.Stats().RedisAdmits
	t.Logf("%d admission round trips in 500 ms while refused", n)
	if n > 500 {
		t.Fatalf("%d admission round trips in 500 ms: the head spins", n)
	}
}

// TestRedisCloseLosesNothing: a process closed with calls in flight, whose
// releases come after Close (dropped), loses no capacity for good: the
// lease frees the units for another process.
func TestRedisCloseLosesNothing(t *testing.T) {
	addr := redistest.Start(t).Addr()
	name := uniqueName(t)
	const lease = 300 * time.Millisecond
	a := newRedisSem(t, newClient(t, addr), name, 2, 50*time.Millisecond, WithLease(lease))
	b := newRedisSem(t, newClient(t, addr), name, 2, 50*time.Millisecond, WithLease(lease))
	ctx := ctxT(t, 5*time.Second)
	if err := a.Acquire(ctx, 2); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	_ = a.Close()
	a.Release(2) // after Close: not sent
	if st := a.Stats(); st.ReleasesDropped != 1 || st.InFlight != 0 {
		t.Fatalf("%+v", st)
	}
	if err := b.Acquire(ctx, 2); err != nil {
		t.Fatal(err)
	}
	took := time.Since(begin)
	b.Release(2)
	t.Logf("the other process was admitted %v after Close (lease %v)", took, lease)
	if took < lease-10*time.Millisecond || took > lease+500*time.Millisecond {
		t.Fatalf("admitted after %v; want about the lease %v (plus the interval)", took, lease)
	}
}
