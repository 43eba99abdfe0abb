package redisrate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/redisrate"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/semaphore"
	"github.com/ratesem/ratesem/window"
)

func client(t *testing.T) *goredis.Client {
	t.Helper()
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// The nil checks of this package: none reaches Redis or panics.
func TestNilArguments(t *testing.T) {
	if _, err := redisrate.NewSemaphore(nil, "x", 1, time.Second); err == nil {
		t.Error("NewSemaphore: nil client accepted")
	}
	if _, err := redisrate.NewSemaphoreWithPolicy(nil, "x", window.NewCompletion(window.Limit{N: 1, Per: time.Second})); err == nil {
		t.Error("NewSemaphoreWithPolicy: nil client accepted")
	}
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer c.Close()
	if _, err := redisrate.NewSemaphoreWithPolicy(c, "x", nil); err == nil {
		t.Error("NewSemaphoreWithPolicy: nil policy accepted")
	}
	if p, err := clientpool.New(clientpool.Table{Rules: []clientpool.Rule{{Name: "r", Limit: window.Limit{N: 1, Per: time.Second}}}},
		redisrate.Shared(nil, "x")); err == nil {
		_ = p.Close()
		t.Error("Shared(nil): clientpool.New accepted it")
	}
}

// Two semaphores of one name, built through two clients (two processes, as
// far as Redis can tell), share one limit; another name has its own.
func TestNewSemaphoreShares(t *testing.T) {
	c := client(t)
	c2 := goredis.NewClient(&goredis.Options{Addr: c.Options().Addr})
	defer c2.Close()
	a, err := redisrate.NewSemaphore(c, "shared", 3, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := redisrate.NewSemaphore(c2, "shared", 3, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	other, err := redisrate.NewSemaphore(c2, "other", 3, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	if !a.TryAcquire(2) {
		t.Fatal("a: 2 of 3 refused")
	}
	if b.TryAcquire(2) {
		t.Fatal("b: 2 more admitted under a shared limit of 3 with 2 in flight")
	}
	if !b.TryAcquire(1) {
		t.Fatal("b: the third unit refused")
	}
	if !other.TryAcquire(3) {
		t.Fatal("another name does not share the limit")
	}
	if st := a.Stats(); st.RedisAdmits != 1 {
		t.Errorf("a.Stats().RedisAdmits = %d, want 1", st.RedisAdmits)
	}
	// A different limit under the same name is refused, not silently used:
	// at construction, or at the first call when the checks are deferred.
	if _, err := redisrate.NewSemaphore(c2, "shared", 4, time.Minute); !errors.Is(err, ratesem.ErrLimitMismatch) {
		t.Errorf("another limit for the same name: %v, want ErrLimitMismatch", err)
	}
	d, err := redisrate.NewSemaphore(c2, "shared", 4, time.Minute, redisrate.WithDeferredChecks())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := d.Acquire(ctx, 1); !errors.Is(err, ratesem.ErrLimitMismatch) {
		t.Errorf("another limit for the same name: %v, want ErrLimitMismatch", err)
	}
}

// NewSemaphoreWithPolicy keeps the policy's window in Redis: a fixed
// window of 2 per minute admits 2 across two semaphores, then refuses.
func TestNewSemaphoreWithPolicyShares(t *testing.T) {
	c := client(t)
	a, err := redisrate.NewSemaphoreWithPolicy(c, "fw", window.NewFixedWindow(window.Limit{N: 2, Per: time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := redisrate.NewSemaphoreWithPolicy(c, "fw", window.NewFixedWindow(window.Limit{N: 2, Per: time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i, s := range []*semaphore.RateSemaphore{a, b} {
		if !s.TryAcquire(1) {
			t.Fatalf("call %d of 2 refused", i+1)
		}
		s.Release(1) // a fixed window counts starts: releasing frees nothing
	}
	if a.TryAcquire(1) || b.TryAcquire(1) {
		t.Fatal("a third call admitted in a fixed window of 2")
	}
}

// Two pools of one prefix share each rule's limit; Close stops the engine.
func TestSharedPools(t *testing.T) {
	c := client(t)
	table := clientpool.Table{Rules: []clientpool.Rule{{Name: "ip", Limit: window.Limit{N: 2, Per: time.Minute}}}}
	p1, err := clientpool.New(table, redisrate.Shared(c, "app"))
	if err != nil {
		t.Fatal(err)
	}
	p2, err := clientpool.New(table, redisrate.Shared(c, "app"))
	if err != nil {
		t.Fatal(err)
	}
	ch := clientpool.Charge{Rule: "ip", Weight: 2}
	tk, err := p1.Acquire(context.Background(), ch)
	if err != nil {
		t.Fatalf("p1: %v", err)
	}
	defer tk.Release()
	// The shared window is full until p1's call ends: p2's call waits and
	// its deadline ends the wait.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if tk2, err := p2.Acquire(ctx, clientpool.Charge{Rule: "ip", Weight: 1}); err == nil {
		tk2.Release()
		t.Fatal("p2 admitted a call with the shared limit full")
	} else if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ratesem.ErrDeadline) {
		t.Fatalf("p2: %v, want its deadline", err)
	}
	if err := p1.Close(); err != nil {
		t.Fatal(err)
	}
	_ = p2.Close()
	if _, err := p1.Acquire(context.Background(), ch); !errors.Is(err, ratesem.ErrClosed) {
		t.Errorf("Acquire after Close: %v, want ErrClosed", err)
	}
}

// A limit Redis cannot keep exactly (a Per that is not a whole number of
// microseconds, an N beyond 2^40) is an invalid limit for the caller:
// every way of giving one returns an error matching ErrInvalidLimit.
func TestUnrepresentableLimitsAreInvalid(t *testing.T) {
	c := client(t)
	_, err := redisrate.NewSemaphoreWithPolicy(c, "p", window.NewFixedWindow(window.Limit{N: 2, Per: 1500 * time.Nanosecond}))
	if !errors.Is(err, ratesem.ErrInvalidLimit) {
		t.Errorf("NewSemaphoreWithPolicy, Per 1.5 µs: %v, want ErrInvalidLimit", err)
	}
	_, err = redisrate.NewSemaphoreWithPolicy(c, "p", window.NewFixedWindow(window.Limit{N: 1 << 50, Per: time.Second}))
	if !errors.Is(err, ratesem.ErrInvalidLimit) {
		t.Errorf("NewSemaphoreWithPolicy, N 2^50: %v, want ErrInvalidLimit", err)
	}
	s, err := redisrate.NewSemaphore(c, "s", 2, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.SetLimit(2, 1500*time.Nanosecond); !errors.Is(err, ratesem.ErrInvalidLimit) {
		t.Errorf("SetLimit(2, 1.5µs): %v, want ErrInvalidLimit", err)
	}
	if l := s.Limit(); l.N != 2 || l.Per != time.Second {
		t.Errorf("a refused SetLimit changed the limit to %v", l)
	}
	_, err = clientpool.New(clientpool.Table{Rules: []clientpool.Rule{{Name: "r", Limit: window.Limit{N: 2, Per: 1500 * time.Nanosecond}}}},
		redisrate.Shared(c, "x"))
	if !errors.Is(err, ratesem.ErrInvalidLimit) {
		t.Errorf("Shared with a Per of 1.5 µs: %v, want ErrInvalidLimit", err)
	}
}
