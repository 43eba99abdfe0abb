package clientpool_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/redisrate"
	"github.com/ratesem/ratesem/redistest"
)

// BenchmarkRedisLearnedQuota: a call of a rule with Learn (no Adapt) over
// Redis, after a reply made its key a quota with a budget that never
// binds: Acquire and Release ("call"), and Acquire, a report of the
// server's window and Release ("report"), against a local redis-server.
func BenchmarkRedisLearnedQuota(b *testing.B) {
	c := newClientB(b, redistest.Start(b).Addr())
	table := clientpool.Table{Rules: []clientpool.Rule{quotaLearnRule(time.Hour)}}
	p, err := clientpool.New(table, redisrate.Shared(c, "bench"))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ch := clientpool.Charge{Rule: "api", Key: "k", Weight: 1}
	ctx := context.Background()
	tk, err := p.Acquire(ctx, ch)
	if err != nil {
		b.Fatal(err)
	}
	tk.ObserveHeaders(learnReply(1<<39, 1<<39-1, 3_000_000))
	tk.Release()
	time.Sleep(100 * time.Millisecond)
	b.Run("call", func(b *testing.B) {
		for b.Loop() {
			tk, err := p.Acquire(ctx, ch)
			if err != nil {
				b.Fatal(err)
			}
			tk.Release()
		}
	})
	h := learnReply(1<<39, 1<<39-1, 3_000_000)
	b.Run("report", func(b *testing.B) {
		for b.Loop() {
			tk, err := p.Acquire(ctx, ch)
			if err != nil {
				b.Fatal(err)
			}
			tk.ObserveHeaders(h)
			tk.Release()
		}
	})
}
