package clientpool_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/exchange/binance"
	"github.com/ratesem/ratesem/redisrate"
	"github.com/ratesem/ratesem/redistest"
)

// BenchmarkRedisBinanceOrder: a Binance order (REQUEST_WEIGHT,
// RAW_REQUESTS, ORDERS_10S, ORDERS_1D: four charges in one EVALSHA)
// admitted and released through a Pool in Redis mode, against a local
// redis-server, with limits that never bind: the cost of a call's round
// trips. The release goes to Redis in the background.
func BenchmarkRedisBinanceOrder(b *testing.B) {
	table := binance.Spot()
	for i := range table.Rules {
		table.Rules[i].Limit.N = 1 << 39
	}
	c := newClientB(b, redistest.Start(b).Addr())
	p, err := clientpool.New(table, redisrate.Shared(c, "bench"))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	req, _ := http.NewRequest("POST", "http://x/api/v3/order", nil)
	req.Header.Set(binance.HeaderAPIKey, "acct")
	cs, err := p.Classify(req)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			tk, err := p.Acquire(ctx, cs...)
			if err != nil {
				b.Fatal(err)
			}
			tk.Release()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetParallelism(8) // 16 goroutines on 2 CPUs
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				tk, err := p.Acquire(ctx, cs...)
				if err != nil {
					b.Error(err)
					return
				}
				tk.Release()
			}
		})
	})
}
