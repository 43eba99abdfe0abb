package redisrate_test

import (
	"context"
	"errors"
	"net"
	"strings"
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

// silent returns the address of a loopback listener that accepts
// connections and never answers: a Redis that does not answer.
func silent(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	return ln.Addr().String()
}

func newClient(t *testing.T, addr string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// checkMessage fails t unless msg has one "ratesem: " and names no
// deadline or internal name.
func checkMessage(t *testing.T, what, msg string) {
	t.Helper()
	if strings.Count(msg, "ratesem:") != 1 || strings.Contains(msg, "deadline") || strings.Contains(msg, "n[]") {
		t.Errorf("%s: %q: want one \"ratesem:\", no deadline, no internal name", what, msg)
	}
}

// TestNewChecksRedis: as a new user meets them, NewSemaphore and
// clientpool.New over Redis fail at once, in bounded time and with an error
// that says which, for a Redis that refuses connections or does not answer
// (ratesem.ErrUnavailable), a limit another replica stored differently
// (ratesem.ErrLimitMismatch, naming the semaphore and both limits) and a
// server that may evict the keys (ratesem.ErrEviction, the pool as the
// semaphore).
func TestNewChecksRedis(t *testing.T) {
	refused := redistest.Start(t)
	refused.Stop()
	for what, addr := range map[string]string{"refused": refused.Addr(), "silent": silent(t)} {
		begin := time.Now()
		s, err := redisrate.NewSemaphore(newClient(t, addr), "x", 10, 2*time.Second, redisrate.WithTimeout(300*time.Millisecond))
		d := time.Since(begin)
		if err == nil {
			_ = s.Close()
			t.Errorf("NewSemaphore over a Redis that is %s: no error", what)
			continue
		}
		if !errors.Is(err, ratesem.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) || d > time.Second {
			t.Errorf("NewSemaphore over a Redis that is %s: %v after %v; want ratesem.ErrUnavailable within the timeout", what, err, d)
		}
		checkMessage(t, what, err.Error())
		table := clientpool.Table{Rules: []clientpool.Rule{{Name: "r", Limit: window.Limit{N: 5, Per: time.Minute}}}}
		begin = time.Now()
		p, err := clientpool.New(table, redisrate.Shared(newClient(t, addr), "p"))
		d = time.Since(begin)
		if err == nil {
			_ = p.Close()
			t.Errorf("clientpool.New over a Redis that is %s: no error", what)
			continue
		}
		if !errors.Is(err, ratesem.ErrUnavailable) || d > 2*time.Second {
			t.Errorf("clientpool.New over a Redis that is %s: %v after %v; want ratesem.ErrUnavailable", what, err, d)
		}
		t.Logf("%s: %v", what, err)
	}

	srv := redistest.Start(t)
	a, err := redisrate.NewSemaphore(newClient(t, srv.Addr()), "shared", 10, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Acquire(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	a.Release(1)
	b, err := redisrate.NewSemaphore(newClient(t, srv.Addr()), "shared", 12, 2*time.Second)
	if err == nil {
		_ = b.Close()
		t.Error("a second replica with another limit: no error")
	} else {
		if !errors.Is(err, ratesem.ErrLimitMismatch) || !strings.Contains(err.Error(), `"shared"`) {
			t.Errorf("a second replica with another limit: %v; want ratesem.ErrLimitMismatch naming the semaphore", err)
		}
		checkMessage(t, "mismatch", err.Error())
		t.Log(err)
	}

	lru := redistest.Start(t, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
	table := clientpool.Table{Rules: []clientpool.Rule{{Name: "r", Limit: window.Limit{N: 5, Per: time.Minute}}}}
	p, err := clientpool.New(table, redisrate.Shared(newClient(t, lru.Addr()), "p"))
	if err == nil {
		_ = p.Close()
		t.Error("clientpool.New over allkeys-lru: no error")
	} else if !errors.Is(err, ratesem.ErrEviction) {
		t.Errorf("clientpool.New over allkeys-lru: %v; want ratesem.ErrEviction", err)
	} else {
		checkMessage(t, "eviction", err.Error())
		t.Log(err)
	}
}

// TestNewChecksDeferred: with WithDeferredChecks (semaphore and
// clientpool) the constructors ask Redis nothing, and the checks show at
// the first call: ratesem.ErrUnavailable while Redis does not answer,
// ratesem.ErrLimitMismatch naming the semaphore, ratesem.ErrEviction from
// the first call that reaches Redis on, unless WithEvictionAllowed.
func TestNewChecksDeferred(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	begin := time.Now()
	s, err := redisrate.NewSemaphore(newClient(t, srv.Addr()), "late", 10, 2*time.Second, redisrate.WithDeferredChecks())
	if err != nil || time.Since(begin) > 100*time.Millisecond {
		t.Fatalf("%v after %v", err, time.Since(begin))
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Acquire(ctx, 1); !errors.Is(err, ratesem.ErrUnavailable) {
		t.Fatalf("Redis down: %v", err)
	} else {
		checkMessage(t, "down", err.Error())
		t.Log(err)
	}
	srv.Start()
	c := newClient(t, srv.Addr())
	other, err := redisrate.NewSemaphore(c, "late", 11, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.Acquire(ctx, 1); err != nil { // stores its limit
		t.Fatal(err)
	}
	other.Release(1)
	time.Sleep(time.Second) // the next probe
	if err := s.Acquire(ctx, 1); !errors.Is(err, ratesem.ErrLimitMismatch) || !strings.Contains(err.Error(), `"late"`) {
		t.Fatalf("another limit stored: %v", err)
	} else {
		checkMessage(t, "mismatch", err.Error())
	}

	if err := c.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	table := clientpool.Table{Rules: []clientpool.Rule{{Name: "r", Limit: window.Limit{N: 5, Per: time.Minute}}}}
	p, err := clientpool.New(table, redisrate.Shared(c, "p"), redisrate.WithDeferredChecks())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for range 2 {
		if _, err := p.Acquire(ctx, clientpool.Charge{Rule: "r", Key: "k", Weight: 1}); !errors.Is(err, ratesem.ErrEviction) {
			t.Fatalf("the pool's first calls over allkeys-lru: %v; want ratesem.ErrEviction", err)
		}
	}
	e, err := redisrate.NewSemaphore(c, "evict", 10, time.Second, redisrate.WithDeferredChecks())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.Acquire(ctx, 1); !errors.Is(err, ratesem.ErrEviction) {
		t.Fatalf("the semaphore's first call over allkeys-lru: %v; want ratesem.ErrEviction", err)
	}
	ok, err := clientpool.New(table, redisrate.Shared(c, "p2"), redisrate.WithEvictionAllowed())
	if err != nil {
		t.Fatalf("WithEvictionAllowed: %v", err)
	}
	defer ok.Close()
	tk, err := ok.Acquire(ctx, clientpool.Charge{Rule: "r", Key: "k", Weight: 1})
	if err != nil {
		t.Fatal(err)
	}
	tk.Release()
}

// TestCallErrorMessages: the errors a call meets say what failed in one
// "ratesem: " and name neither a deadline the caller never set nor the
// semaphore's rule inside Redis: Redis down, and another replica's limit
// stored first (both replicas built before either stored it).
func TestCallErrorMessages(t *testing.T) {
	srv := redistest.Start(t)
	a, err := redisrate.NewSemaphore(newClient(t, srv.Addr()), "m", 10, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := redisrate.NewSemaphore(newClient(t, srv.Addr()), "m", 12, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	a.Release(1)
	if err := b.Acquire(ctx, 1); !errors.Is(err, ratesem.ErrLimitMismatch) {
		t.Fatalf("another limit stored: %v", err)
	} else {
		checkMessage(t, "mismatch", err.Error())
		t.Log(err)
	}
	srv.Stop()
	if err := a.Acquire(ctx, 1); !errors.Is(err, ratesem.ErrUnavailable) {
		t.Fatalf("Redis down: %v", err)
	} else {
		checkMessage(t, "down", err.Error())
		t.Log(err)
	}
}

// TestConstructorErrorsOnePrefix: the constructors' own errors (checked
// before Redis) begin with one "ratesem: " and still match their sentinel.
func TestConstructorErrorsOnePrefix(t *testing.T) {
	c := newClient(t, "127.0.0.1:1") // never dialled: these come first
	type tc struct {
		what string
		err  error
		want error
	}
	_, e1 := redisrate.NewSemaphore(c, "x", 0, time.Second)
	_, e2 := redisrate.NewSemaphore(c, "x", 5, time.Second+time.Nanosecond)
	_, e3 := redisrate.NewSemaphore(c, "x", 5, time.Second, semaphore.WithMaxUnitsInFlight(0))
	_, e4 := redisrate.NewSemaphoreWithPolicy(c, "x", window.NewCompletion(window.Limit{N: 5, Per: time.Second + time.Nanosecond}))
	table := clientpool.Table{Rules: []clientpool.Rule{{Name: "r", Limit: window.Limit{N: 5, Per: time.Minute}}}}
	_, e5 := clientpool.New(table, redisrate.Shared(c, ""))
	odd := clientpool.Table{Rules: []clientpool.Rule{{Name: "r", Limit: window.Limit{N: 5, Per: time.Second + time.Nanosecond}}}}
	_, e6 := clientpool.New(odd, redisrate.Shared(c, "p"))
	for _, x := range []tc{
		{"n = 0", e1, ratesem.ErrInvalidLimit},
		{"a Per not whole µs", e2, ratesem.ErrInvalidLimit},
		{"WithMaxUnitsInFlight(0)", e3, ratesem.ErrInvalidLimit},
		{"a policy's Per not whole µs", e4, ratesem.ErrInvalidLimit},
		{"an empty prefix", e5, nil},
		{"a rule's Per not whole µs", e6, ratesem.ErrInvalidLimit},
	} {
		if x.err == nil || (x.want != nil && !errors.Is(x.err, x.want)) {
			t.Errorf("%s: %v; want %v", x.what, x.err, x.want)
			continue
		}
		checkMessage(t, x.what, x.err.Error())
	}
}
