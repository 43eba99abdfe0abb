package conformance_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/window"
)

// Options a mode cannot honour are refused with an error, never ignored.

// TestEvictionRefusedSemaphore: over a Redis server that may evict keys
// (maxmemory-policy allkeys-lru) a RateSemaphore is refused with
// ratesem.ErrEviction unless the eviction option is given. In process
// there is no Redis: nothing to refuse.
func TestEvictionRefusedSemaphore(t *testing.T) {
	forModes(t, false, func(t *testing.T, m mode) {
		if !m.redis {
			t.Skip("in process: no Redis server to evict keys")
		}
		// Real time over Redis: no bubble to enter.
		addr := evictingServer(t)
		if _, err := m.sem(t, 2, m.per, semCfg{addr: addr}); !errors.Is(err, ratesem.ErrEviction) {
			t.Errorf("over an evicting server: %v, want ratesem.ErrEviction", err)
		}
		s, err := m.sem(t, 2, m.per, semCfg{addr: addr, evictionOK: true})
		if err != nil {
			t.Fatalf("with the eviction option: %v", err)
		}
		if err := s.Acquire(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		s.Release(1)
	})
}

// TestEvictionRefusedPool: the same for a Pool.
func TestEvictionRefusedPool(t *testing.T) {
	forModes(t, true, func(t *testing.T, m mode) {
		if !m.redis {
			t.Skip("in process: no Redis server to evict keys")
		}
		if m.cluster {
			t.Skip("the cluster's nodes do not evict: the single server shows the check")
		}
		// Real time over Redis: no bubble to enter.
		addr := evictingServer(t)
		rule := ruleSpec{name: "r", limit: window.Limit{N: 2, Per: m.per}}
		if _, err := m.pool(t, []ruleSpec{rule}, poolCfg{addr: addr}); !errors.Is(err, ratesem.ErrEviction) {
			t.Errorf("over an evicting server: %v, want ratesem.ErrEviction", err)
		}
		p, err := m.pool(t, []ruleSpec{rule}, poolCfg{addr: addr, evictionOK: true})
		if err != nil {
			t.Fatalf("with the eviction option: %v", err)
		}
		tk, err := p.Acquire(context.Background(), charge("r", "k", 1))
		if err != nil {
			t.Fatal(err)
		}
		tk.Release()
	})
}

// TestClockSemaphore: in process a virtual clock drives the semaphore;
// over Redis, whose server's clock decides, the option is refused with an
// error. (Over Redis today it is silently ignored: issue 19.)
func TestClockSemaphore(t *testing.T) {
	forModesRun(t, false, func(t *testing.T, m mode) {
		clk, advance := mockClock()
		s, err := m.sem(t, 1, time.Second, semCfg{clock: clk})
		if m.redis {
			if err == nil {
				t.Error("a virtual clock over Redis was accepted; want an error")
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if !s.TryAcquire(1) {
			t.Fatal("TryAcquire(1) refused on an idle semaphore")
		}
		s.Release(1)
		if s.TryAcquire(1) {
			t.Fatal("a second unit admitted within the interval on the virtual clock")
		}
		advance(time.Second)
		if !s.TryAcquire(1) {
			t.Fatal("TryAcquire(1) refused once the virtual clock moved an interval")
		}
		s.Release(1)
	})
}

// TestClockPool: the same for a Pool.
func TestClockPool(t *testing.T) {
	forModesRun(t, true, func(t *testing.T, m mode) {
		clk, advance := mockClock()
		p, err := m.pool(t, []ruleSpec{{name: "r", limit: window.Limit{N: 1, Per: time.Second}}}, poolCfg{clock: clk})
		if m.redis {
			if err == nil {
				t.Error("a virtual clock over Redis was accepted; want an error")
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		tk, err := p.Acquire(context.Background(), charge("r", "k", 1))
		if err != nil {
			t.Fatal(err)
		}
		tk.Release()
		// The next unit waits for the virtual clock to move an interval.
		done := make(chan *ticket, 1)
		go func() {
			tk, err := p.Acquire(context.Background(), charge("r", "k", 1))
			if err != nil {
				t.Error(err)
			}
			done <- tk
		}()
		waitFor(t, m, "the second call waiting", func() bool { return len(done) == 0 })
		advance(time.Second)
		if tk := <-done; tk != nil {
			tk.Release()
		}
	})
}
