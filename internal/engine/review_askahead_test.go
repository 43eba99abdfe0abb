package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/internal/rstore"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// TestReviewFreeAskLeftUncounted: a call told to ask Redis outside the
// queues (askFreeLocked: counted in its limiter's asking) whose context
// ends before its goroutine takes the ask leaves the count as it found
// it: otherwise maxFreeAsks such leaves stop every later call of the
// limiter from asking at once or ahead of its turn.
func TestReviewFreeAskLeftUncounted(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: redistest.Start(t).Addr()})
	t.Cleanup(func() { c.Close() })
	p, err := New([]Rule{{Name: "r", Limit: window.Limit{N: 1000, Per: time.Hour}}}, "",
		func(cfg *Config) { cfg.Shared = &Shared{Opener: rstore.NewOpener(c), Prefix: "askleft"} })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	keep := new(Ticket) // keeps the limiter (and its counts) alive
	if err := p.Acquire(context.Background(), keep, []Charge{{Rule: "r", Weight: 1}}); err != nil {
		t.Fatal(err)
	}
	defer keep.Release()
	lim := keep.held[0].lim
	for range 40 {
		ctx, cancel := context.WithCancel(context.Background())
		p.mu.Lock()
		p.hook = func(w *waiter, done bool) { // under p.mu, as the waiter is made
			if !done {
				cancel()
			}
		}
		p.mu.Unlock()
		tk := new(Ticket)
		if err := p.Acquire(ctx, tk, []Charge{{Rule: "r", Weight: 1}}); err == nil {
			tk.Release()
		} else if !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		cancel()
	}
	p.mu.Lock()
	p.hook = nil
	n := lim.asking
	p.mu.Unlock()
	if n != 0 {
		t.Fatalf("the limiter counts %d calls asking Redis outside its queues; none does", n)
	}
}
