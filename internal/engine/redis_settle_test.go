package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/rstore"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// settleTable: requests in a completion window of 5 per hour, tokens in a
// bucket of 10 per hour (burst 10): nothing refills during the test.
func settleTable() []Rule {
	return []Rule{
		{Name: "req", Limit: window.Limit{N: 5, Per: time.Hour}},
		{Name: "tok", Limit: window.Limit{N: 10, Per: time.Hour},
			Window: func(l window.Limit) window.Policy { return window.NewTokenBucket(l, 10) }},
	}
}

func newSettlePool(t *testing.T, c goredis.UniversalClient) *Engine {
	t.Helper()
	p, err := New(settleTable(), "", func(cfg *Config) { cfg.Shared = &Shared{Opener: rstore.NewOpener(c), Prefix: "settle"} })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestRedisTicketSettled: Release in Redis mode settles each charge of a
// ticket Settle named to its actual weight in Redis (the others: the
// estimate counts), in the background; Close sends it. A second pool then sees the
// refunds and the debits: tokens 10 − 8 + 6 (refund) − 1 − 4 (debit) = 3
// left, requests 1 ended.
func TestRedisTicketSettled(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: redistest.Start(t).Addr()})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	p1 := newSettlePool(t, c)
	tk := new(Ticket)
	if err := p1.Acquire(ctx, tk, []Charge{{Rule: "req", Weight: 1}, {Rule: "tok", Weight: 8}}); err != nil {
		t.Fatal(err)
	}
	if err := tk.Settle("tok", 2); err != nil { // req not settled: the estimate counts
		t.Fatal(err)
	}
	tk.Release()
	tk2 := new(Ticket)
	if err := p1.Acquire(ctx, tk2, []Charge{{Rule: "tok", Weight: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := tk2.Settle("tok", 5); err != nil {
		t.Fatal(err)
	}
	tk2.Release()
	if err := p1.Close(); err != nil { // sends the settlements queued
		t.Fatal(err)
	}
	p2 := newSettlePool(t, c)
	try := func(rule string, n int64) error {
		ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		tk := new(Ticket)
		err := p2.Acquire(ctx, tk, []Charge{{Rule: rule, Weight: n}})
		if err == nil {
			tk.Release()
		}
		return err
	}
	if err := try("tok", 3); err != nil {
		t.Fatalf("3 tokens left after the refund and the debit: %v", err)
	}
	if err := try("tok", 1); !errors.Is(err, ratesem.ErrDeadline) {
		t.Fatalf("the debit of 4 not counted: %v", err)
	}
	// requests: the 1 not settled (−1) counts; 3 more fit (then end), 2 no more
	if err := try("req", 3); err != nil {
		t.Fatal(err)
	}
	if err := try("req", 2); !errors.Is(err, ratesem.ErrDeadline) {
		t.Fatalf("5 requests counted, 2 more admitted: %v", err)
	}
}
