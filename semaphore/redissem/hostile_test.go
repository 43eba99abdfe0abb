package redissem

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/window"
	wredis "github.com/ratesem/ratesem/window/redis"
	"github.com/ratesem/ratesem/window/redis/redistest"
)

// evalCalls returns how many EVALSHA and EVAL the server has run (INFO
// commandstats), every client together.
func evalCalls(t testing.TB, c *goredis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
			continue
		}
		_, rest, _ := strings.Cut(line, "calls=")
		v, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("commandstats line %q: %v", line, err)
		}
		total += n
	}
	return total
}

// TestTimeoutsHoldWithADefaultClient: on a go-redis client built the
// default way (no ContextTimeoutEnabled: it ignores contexts' deadlines
// while it waits for a reply), a server stalled by DEBUG SLEEP 2 holds no
// caller beyond WithTimeout or its context. On the old code Acquire
// returned after 1.9 s and Release blocked 1.9 s. Once the server wakes,
// the admissions the callers left behind are cancelled and the release
// goes through: nothing stays in flight.
func TestTimeoutsHoldWithADefaultClient(t *testing.T) {
	noLeaks(t)
	srv := redistest.StartServer(t)
	name := uniqueName(t)
	fast := newSem(t, newClient(t, srv.Addr()), name, 3, 100*time.Millisecond, WithTimeout(200*time.Millisecond))
	slow := newSem(t, newClient(t, srv.Addr()), name, 3, 100*time.Millisecond) // WithTimeout 1 s
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
	var fastTook, slowTook, relTook time.Duration
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
	var pauseTook time.Duration
	wg.Go(func() {
		begin := time.Now()
		slow.PauseFor(time.Millisecond) // WithTimeout 1 s
		pauseTook = time.Since(begin)
	})
	wg.Wait()
	if pauseTook > 1300*time.Millisecond {
		t.Errorf("PauseFor took %v; want at most about WithTimeout (1 s)", pauseTook)
	}
	t.Logf("during DEBUG SLEEP 2: Acquire (WithTimeout 200ms) %v in %v; Acquire (ctx 300ms) %v in %v; Release %v",
		fastErr, fastTook, slowErr, slowTook, relTook)
	if !errors.Is(fastErr, ErrUnavailable) || fastTook > 500*time.Millisecond {
		t.Errorf("Acquire with WithTimeout(200ms): %v after %v; want ErrUnavailable within about 200 ms", fastErr, fastTook)
	}
	if !errors.Is(slowErr, context.DeadlineExceeded) || slowTook > 600*time.Millisecond {
		t.Errorf("Acquire with a 300 ms context: %v after %v; want context.DeadlineExceeded within about 300 ms", slowErr, slowTook)
	}
	if relTook > 500*time.Millisecond {
		t.Errorf("Release took %v; want at most about WithTimeout (200 ms)", relTook)
	}
	if err := <-woke; err != nil {
		t.Fatal(err)
	}
	// The server is awake: the round trips left behind finish, the late
	// admissions are cancelled, the release goes through.
	deadline := time.Now().Add(5 * time.Second)
	for {
		z, l := zcards(t, fast)
		if l == 0 {
			t.Logf("after the sleep: z %d, l %d; fast %+v; slow %+v", z, l, fast.Stats(), slow.Stats())
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 s after the sleep: %d calls still in flight in Redis (z %d); fast %+v; slow %+v", l, z, fast.Stats(), slow.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCloseIsFinal: a caller whose admission Redis grants as Close is
// called gets ErrClosed, and the admission is cancelled in Redis (on the old
// code it returned nil after Close).
func TestCloseIsFinal(t *testing.T) {
	noLeaks(t)
	c := newClient(t, redistest.Start(t))
	s, err := New(c, uniqueName(t), 2, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	s.afterAdmit = func() {
		go func() { _ = s.Close(); close(closed) }()
		for {
			s.mu.Lock()
			c := s.closed
			s.mu.Unlock()
			if c {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	err = s.Acquire(ctxT(t, 5*time.Second), 1)
	<-closed
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("Acquire admitted by Redis as Close was called: %v; want ErrClosed", err)
	}
	if z, l := zcards(t, s); z != 0 || l != 0 {
		t.Fatalf("z %d, l %d: the admission was not cancelled", z, l)
	}
	if st := s.Stats(); st.Admitted != 0 || st.InFlight != 0 || st.Cancelled != 1 {
		t.Fatalf("%+v", st)
	}
}

// TestCloseIsFinalUnderLoad: goroutines of several Semaphores keep
// acquiring and releasing while one of them is closed; once Close has
// returned, its count of admissions never grows again, every caller in
// progress returned ErrClosed, and nothing of it is left in flight.
// Run it with -race.
func TestCloseIsFinalUnderLoad(t *testing.T) {
	noLeaks(t)
	addr := redistest.Start(t)
	name := uniqueName(t)
	s := newSem(t, newClient(t, addr), name, 1000, 10*time.Millisecond)
	ctx := ctxT(t, 10*time.Second)
	var wg sync.WaitGroup
	var afterClose atomic.Int64
	var closeDone atomic.Bool
	for range 16 {
		wg.Go(func() {
			for {
				err := s.Acquire(ctx, 1)
				if err != nil {
					if !errors.Is(err, ErrClosed) {
						t.Errorf("Acquire: %v; want nil or ErrClosed", err)
					}
					return
				}
				if closeDone.Load() {
					afterClose.Add(1) // may have returned just before; see Admitted below
				}
				s.Release(1)
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	_ = s.Close()
	closeDone.Store(true)
	admitted := s.Stats().Admitted
	wg.Wait()
	st := s.Stats()
	t.Logf("admitted %d before Close returned; %d nil returns seen after (returned before, timed after); %+v", admitted, afterClose.Load(), st)
	if st.Admitted != admitted {
		t.Fatalf("Admitted %d when Close returned, %d later: an Acquire succeeded after Close", admitted, st.Admitted)
	}
	if admitted == 0 || st.InFlight != 0 || st.Waiting != 0 {
		t.Fatalf("%+v", st)
	}
	if err := s.Acquire(ctx, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Acquire after Close: %v", err)
	}
	if s.TryAcquire(1) {
		t.Fatal("TryAcquire after Close succeeded")
	}
}

// TestNewRefusesEviction: New fails with ErrEviction on a server whose
// maxmemory-policy may evict the limit's keys (allkeys-lru, volatile-lru),
// unless WithEvictionAllowed; noeviction (the default) passes.
func TestNewRefusesEviction(t *testing.T) {
	srv := redistest.StartServerArgs(t, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
	c := newClient(t, srv.Addr())
	if _, err := New(c, uniqueName(t), 5, time.Minute); !errors.Is(err, wredis.ErrEviction) {
		t.Fatalf("allkeys-lru: %v; want ErrEviction", err)
	}
	if err := c.ConfigSet(context.Background(), "maxmemory-policy", "volatile-lru").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := New(c, uniqueName(t), 5, time.Minute, WithStartWindow(0)); !errors.Is(err, wredis.ErrEviction) {
		t.Fatalf("volatile-lru: %v; want ErrEviction", err)
	}
	s, err := New(c, uniqueName(t), 5, time.Minute, WithEvictionAllowed())
	if err != nil {
		t.Fatalf("WithEvictionAllowed: %v", err)
	}
	_ = s.Close()
	if err := c.ConfigSet(context.Background(), "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	s, err = New(c, uniqueName(t), 5, time.Minute)
	if err != nil {
		t.Fatalf("noeviction: %v", err)
	}
	_ = s.Close()
	// A server that forbids CONFIG: the check is skipped.
	srv2 := redistest.StartServerArgs(t, "--rename-command", "CONFIG", "")
	s, err = New(newClient(t, srv2.Addr()), uniqueName(t), 5, time.Minute)
	if err != nil {
		t.Fatalf("CONFIG forbidden: %v", err)
	}
	_ = s.Close()
}

// TestNegativeWeight: a negative weight is an error matching
// window.ErrNegativeWeight from Acquire (and false from TryAcquire), with
// no round trip and nothing held.
func TestNegativeWeight(t *testing.T) {
	s := newSem(t, newClient(t, "127.0.0.1:1"), uniqueName(t), 5, time.Second, WithEvictionAllowed())
	for _, n := range []int64{-1, -1 << 62, -9223372036854775808} {
		if err := s.Acquire(context.Background(), n); !errors.Is(err, window.ErrNegativeWeight) {
			t.Fatalf("Acquire(%d): %v; want ErrNegativeWeight", n, err)
		}
		if s.TryAcquire(n) {
			t.Fatalf("TryAcquire(%d) succeeded", n)
		}
	}
	for _, n := range []int64{6, 1 << 53, 9223372036854775807} {
		if err := s.Acquire(context.Background(), n); !errors.Is(err, ErrWeightTooLarge) {
			t.Fatalf("Acquire(%d): %v; want ErrWeightTooLarge", n, err)
		}
	}
	if st := s.Stats(); st.RedisAdmits != 0 || st.InFlight != 0 {
		t.Fatalf("%+v", st)
	}
}

// TestRetryNeverSpins: a head refused because calls in flight elsewhere
// fill the limit re-asks at most every quarter interval, and never sooner
// than MinRetry: with an interval of 4 µs (a quarter of 1 µs) the old code
// re-asked after 1 µs, thousands of times a second.
func TestRetryNeverSpins(t *testing.T) {
	addr := redistest.Start(t)
	name := uniqueName(t)
	holder := newSem(t, newClient(t, addr), name, 1, 4*time.Microsecond)
	waiter := newSem(t, newClient(t, addr), name, 1, 4*time.Microsecond)
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
