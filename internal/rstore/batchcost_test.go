package rstore

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// TestExpBatchCost measures the redis.calls and the server's µs of script
// per whole call (admission and release), for a semaphore (one
// completion window) and a Binance order (three fixed completion
// windows), sent one by one (Admit, Release), as a pipeline of scripts
// and as batch scripts of b calls (each batch: the previous batch's
// releases, then b admissions). Run it with EXP=1:
// go test -run TestExpBatchCost -v ./internal/rstore
func TestExpBatchCost(t *testing.T) {
	if os.Getenv("EXP") == "" {
		t.Skip("a measurement, not a test: run it with EXP=1")
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: redistest.Start(t).Addr()})
	ctx := context.Background()
	comp := &Spec{Kind: Completion, Limit: window.Limit{N: 1 << 40, Per: time.Second}}
	order := binanceOrder()
	for i := range order {
		sp := *order[i].Spec
		sp.Limit.N = 1 << 40
		order[i].Spec = &sp
	}
	for _, w := range []struct {
		name  string
		cs    []Charge
		noEnd bool
	}{{"semaphore", []Charge{{Rule: "c", Spec: comp, Weight: 1}}, false}, {"binance", order, false},
		{"gcra", []Charge{{Rule: "g", Spec: &Spec{Kind: GCRA, Limit: window.Limit{N: 1 << 30, Per: time.Second}, Burst: 1 << 30}, Weight: 1}}, true}} {
		for _, b := range []int{1, 16, 64} {
			for _, batch := range []bool{false, true} {
				if b == 1 && batch {
					continue
				}
				s, _ := New(rdb, "cost", Options{})
				s.noBatch = !batch
				var ends []End
				round := func() {
					calls := make([][]Charge, b)
					for i := range calls {
						calls[i] = w.cs
					}
					var ds []Decision
					var err error
					if b == 1 {
						for _, e := range ends {
							if err := s.Release(ctx, e.Scope, e.Charges, e.Token); err != nil {
								t.Fatal(err)
							}
						}
						var d Decision
						d, err = s.Admit(ctx, "b", w.cs)
						ds = []Decision{d}
					} else {
						_, ds, _, err = s.Pipe(ctx, ends, "b", calls, nil)
					}
					if err != nil {
						t.Fatal(err)
					}
					ends = ends[:0]
					for _, d := range ds {
						if !d.OK {
							t.Fatalf("refused: %+v", d)
						}
						if !w.noEnd {
							ends = append(ends, End{Scope: "b", Charges: w.cs, Token: d.Token})
						}
					}
				}
				for range 20 {
					round()
				}
				c0, us0 := commandCalls(t, rdb)
				const rounds = 200
				for range rounds {
					round()
				}
				c1, us1 := commandCalls(t, rdb)
				n := float64(rounds * b)
				t.Logf("%-9s b=%-2d batch=%-5v  %5.2f redis.calls per call  %6.2f µs of script per call", w.name, b, batch, (c1-c0)/n, (us1-us0)/n)
			}
		}
	}
}

// commandCalls returns the calls of the commands scripts run (every
// command but the scripts' and INFO's) and the µs of the scripts.
func commandCalls(t *testing.T, rdb *goredis.Client) (calls, us float64) {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		switch name {
		case "info", "hello", "client|setinfo", "script|load", "ping":
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			x, _ := strconv.ParseFloat(v, 64)
			switch {
			case k == "calls" && name != "evalsha" && name != "eval":
				calls += x
			case k == "usec" && (name == "evalsha" || name == "eval"):
				us += x
			}
		}
	}
	return calls, us
}
