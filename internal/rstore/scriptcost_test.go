package rstore

import (
	"context"
	"os"
	"sort"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// TestExpScripts measures the server's µs per EVALSHA of the admission
// script next to a bare `return 1` and a redis_rate-like script (TIME, GET,
// SET EX), interleaved so that every one sees the same load, and reports
// the minimum, first quartile and median of 30 rounds of 100 calls. Run it
// with EXP=1: go test -run TestExpScripts -v ./internal/rstore; set
// REDIS_RATE_LUA to a file holding go-redis/redis_rate's allowN script to
// measure it too (burst and rate 10^6 per second, cost 1).
func TestExpScripts(t *testing.T) {
	if os.Getenv("EXP") == "" {
		t.Skip("a measurement, not a test: run it with EXP=1")
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: redistest.Start(t).Addr()})
	ctx := context.Background()
	s, _ := New(rdb, "bench", Options{})
	gcra := &Spec{Kind: GCRA, Limit: window.Limit{N: 1 << 30, Per: time.Second}, Burst: 1 << 30}
	comp := &Spec{Kind: Completion, Limit: window.Limit{N: 1 << 40, Per: time.Second}}
	order := binanceOrder()
	for i := range order {
		sp := *order[i].Spec
		sp.Limit.N = 1 << 40
		order[i].Spec = &sp
	}
	type variant struct {
		name string
		sc   *goredis.Script
		keys []string
		args []any
		us   []float64
	}
	var vs []*variant
	add := func(name string, sc *goredis.Script, cs []Charge) {
		// One admission first: the store learns the scope's epoch, which
		// the fast paths need.
		if _, err := s.Admit(ctx, "b", cs); err != nil {
			t.Fatal(err)
		}
		keys, args, err := s.AdmitCall("b", cs, "0123456789abcdef")
		if err != nil {
			t.Fatal(err)
		}
		vs = append(vs, &variant{name: name, sc: sc, keys: keys, args: args})
	}
	one := []Charge{{Rule: "g", Spec: gcra, Weight: 1}}
	add("return1", goredis.NewScript("return 1"), one)
	add("redis_rate-like", goredis.NewScript(`local t = redis.call('TIME'); local v = redis.call('GET', KEYS[1]..'rr'); redis.call('SET', KEYS[1]..'rr', 12345.5, 'EX', 5); return {1, 2, '3', '4'}`), one)
	if src := os.Getenv("REDIS_RATE_LUA"); src != "" { // the text of redis_rate's allowN script
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		vs = append(vs, &variant{name: "redis_rate", sc: goredis.NewScript(string(b)), keys: []string{"rate:{b}"}, args: []any{1_000_000, 1_000_000, 1, 1}})
	}
	add("gcra", admitScript, one)
	add("completion", admitScript, []Charge{{Rule: "c", Spec: comp, Weight: 1}})
	add("binance", admitScript, order)

	for _, v := range vs {
		for range 100 {
			if v.name != "redis_rate" {
				v.args[1] = newToken()
			}
			v.sc.Run(ctx, rdb, v.keys, v.args...)
		}
	}

	for range 30 {
		for _, v := range vs {
			us0 := scriptMicrosT(t, rdb)
			const n = 100
			for range n {
				if v.name != "redis_rate" {
					v.args[1] = newToken() // a lease per call, as Admit takes
				}
				if err := v.sc.Run(ctx, rdb, v.keys, v.args...).Err(); err != nil && err != goredis.Nil {
					t.Fatal(err)
				}
			}
			v.us = append(v.us, (scriptMicrosT(t, rdb)-us0)/n)
		}
	}

	for _, v := range vs {
		sort.Float64s(v.us)
		t.Logf("%-20s min %6.2f µs  p25 %6.2f  median %6.2f", v.name, v.us[0], v.us[len(v.us)/4], v.us[len(v.us)/2])
	}
}

func scriptMicrosT(t *testing.T, rdb *goredis.Client) float64 {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	return parseScriptMicros(info)
}
