package rstore

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// BenchmarkAdmit: one admission decision per op against one local
// redis-server, serially and from 16 goroutines, next to the floor: an
// EVALSHA of `return 1`. The limits never bind. The peer comparison with
// go-redis/redis_rate is in the benchmarks module.
func BenchmarkAdmit(b *testing.B) {
	rdb := goredis.NewClient(&goredis.Options{Addr: redistest.Start(b).Addr(), PoolSize: 64})
	defer rdb.Close()
	s, _ := New(rdb, "bench", Options{})
	ctx := context.Background()
	one := goredis.NewScript(`return 1`)
	big := window.Limit{N: 1 << 40, Per: time.Second}
	gcra := &Spec{Kind: GCRA, Limit: window.Limit{N: 1 << 30, Per: time.Second}, Burst: 1 << 30}
	comp := &Spec{Kind: Completion, Limit: big}
	order := binanceOrder()
	for i := range order {
		sp := *order[i].Spec
		sp.Limit.N = 1 << 40
		order[i].Spec = &sp
	}
	cases := []struct {
		name string
		op   func() error
	}{
		{"evalsha-return1", func() error { return one.Run(ctx, rdb, []string{"x"}).Err() }},
		{"gcra", func() error {
			_, err := s.Admit(ctx, "b", []Charge{{Rule: "g", Spec: gcra, Weight: 1}})
			return err
		}},
		{"completion", func() error {
			_, err := s.Admit(ctx, "b", []Charge{{Rule: "c", Spec: comp, Weight: 1}})
			return err
		}},
		{"completion+release", func() error {
			c := []Charge{{Rule: "cr", Spec: comp, Weight: 1}}
			d, err := s.Admit(ctx, "b", c)
			if err != nil {
				return err
			}
			return s.Release(ctx, "b", c, d.Token)
		}},
		{"completion+settle", func() error {
			c := []Charge{{Rule: "cs", Spec: comp, Weight: 2}}
			d, err := s.Admit(ctx, "b", c)
			if err != nil {
				return err
			}
			return s.Settle(ctx, "b", c, d.Token, []int64{1})
		}},
		{"binance-order", func() error {
			_, err := s.Admit(ctx, "b", order)
			return err
		}},
	}
	for _, c := range cases {
		b.Run(c.name+"/serial", func(b *testing.B) {
			us0 := scriptMicros(b, rdb)
			for b.Loop() {
				if err := c.op(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric((scriptMicros(b, rdb)-us0)/float64(b.N), "srv-µs/op")
		})
		b.Run(c.name+"/parallel16", func(b *testing.B) {
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := c.op(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// scriptMicros returns the server's time spent in EVALSHA and EVAL so far,
// in µs, from INFO commandstats: the scripts' own cost, without socket I/O
// or the client, so steadier than wall time on a shared machine.
func scriptMicros(b *testing.B, rdb *goredis.Client) float64 {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	return parseScriptMicros(info)
}

// parseScriptMicros sums the usec of EVALSHA and EVAL in an INFO
// commandstats reply.
func parseScriptMicros(info string) float64 {
	var us float64
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
			continue
		}
		for _, f := range strings.Split(strings.TrimSpace(line[strings.IndexByte(line, ':')+1:]), ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				x, _ := strconv.ParseFloat(v, 64)
				us += x
			}
		}
	}
	return us
}
