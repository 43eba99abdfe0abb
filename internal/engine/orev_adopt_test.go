package engine

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/internal/rstore"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// orevHook holds the reply of the next script call or pipeline, once
// armed: Redis runs it at once, its answer reaches the caller when hold is
// closed (as internal/remote's adapt_ceiling_test.go replyHook).
type orevHook struct {
	mu    sync.Mutex
	armed bool
	ran   chan struct{} // gets a value when the held call has run in Redis
	hold  chan struct{}
}

func (h *orevHook) take() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	held := h.armed
	h.armed = false
	return held
}

func (h *orevHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *orevHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		held := h.take()
		err := next(ctx, cmds)
		if held {
			h.ran <- struct{}{}
			<-h.hold
		}
		return err
	}
}
func (h *orevHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		held := strings.HasPrefix(cmd.Name(), "eval") && h.take()
		err := next(ctx, cmd)
		if held {
			h.ran <- struct{}{}
			<-h.hold
		}
		return err
	}
}

// TestOrevAdoptOlderThanLearned: process B learned the key's limit 20
// and stored it; an admission of process A (sent under the rule's 100) is
// decided in Redis under 20 and its answer held; A then learns 10 from a
// reply and stores it. The admission's answer, older, names 20 as the
// limit adopted: A must keep the 10 it learned since (Pool.Limit, and the
// Spec its key is charged under), not go back to 20.
func TestOrevAdoptOlderThanLearned(t *testing.T) {
	h, a, b := orevFleet(t)
	ta := tryKey(t, a, "k", 1)
	if ta == nil {
		t.Fatal("A's first call refused")
	}
	defer ta.Release()
	heldAdoptingB20(t, h, a, b, func() {
		ta.ObserveHeaders(reply(10, -1, 0)) // A learns 10, stores it
		if l, _ := a.Limit("r"); l.N != 10 {
			t.Fatalf("A after learning 10: limit %d", l.N)
		}
	})
	if l, _ := a.Limit("r"); l.N != 10 {
		t.Fatalf("A's limit after an admission decided before its learned 10 was stored: %d, want 10", l.N)
	}
}

// TestOrevAdoptOlderThanSetLimit: as TestOrevAdoptOlderThanLearned, with
// SetLimit(50) in A instead of a learned 10: the admission decided under
// B's 20 before it must not bring A's limit back to 20.
func TestOrevAdoptOlderThanSetLimit(t *testing.T) {
	h, a, b := orevFleet(t)
	heldAdoptingB20(t, h, a, b, func() {
		if err := a.SetLimit("r", window.Limit{N: 50, Per: time.Hour}); err != nil {
			t.Fatal(err)
		}
	})
	if l, _ := a.Limit("r"); l.N != 50 {
		t.Fatalf("A's limit after an admission decided before its SetLimit(50): %d, want 50", l.N)
	}
}

// heldAdoptingB20 has B learn and store the limit 20 for key k, then
// holds the answer of an admission of A on k decided under it while
// during runs, then takes that answer in.
func heldAdoptingB20(t *testing.T, h *orevHook, a, b *Engine, during func()) {
	t.Helper()
	// A's scripts loaded first (a first EVALSHA fails NOSCRIPT and runs
	// again, unheld)
	if w := tryKey(t, a, "w", 1); w != nil {
		w.Release()
	}
	tb := tryKey(t, b, "k", 1)
	if tb == nil {
		t.Fatal("B's call refused")
	}
	tb.ObserveHeaders(reply(20, -1, 0)) // B learns 20, stores it
	tb.Release()
	h.mu.Lock()
	h.armed = true
	h.mu.Unlock()
	got := make(chan *Ticket, 1)
	go func() { got <- tryKey(t, a, "k", 1) }()
	<-h.ran // decided in Redis under 20 (adopted); the answer is held
	during()
	close(h.hold)
	tk := <-got
	if tk == nil {
		t.Fatal("A's held call refused")
	}
	tk.Release()
}

// orevFleet returns two engines on one redis-server sharing rule "r"
// (Learn, 100 per hour), the first one's client held by h.
func orevFleet(t *testing.T) (*orevHook, *Engine, *Engine) {
	t.Helper()
	srv := redistest.Start(t)
	h := &orevHook{ran: make(chan struct{}, 1), hold: make(chan struct{})}
	var ps []*Engine
	for i := range 2 {
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		if i == 0 {
			c.AddHook(h)
		}
		rules := []Rule{{Name: "r", Limit: window.Limit{N: 100, Per: time.Hour}, Learn: learnHeaders}}
		p, err := New(rules, "", func(cfg *Config) {
			cfg.Shared = &Shared{Opener: rstore.NewOpener(c), Prefix: "orev"}
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		ps = append(ps, p)
	}
	return h, ps[0], ps[1]
}
