package clientpool_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/redisrate"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// TestRedisFleetBinanceBlocks is TestRedisFleetBinance with blocks on
// (redisrate.WithBlocks): three Pools, clients of their own, take blocks of
// the Binance preset's fixed completion windows; in every aligned window
// of every rule and key, the calls of all three stay within N.
func TestRedisFleetBinanceBlocks(t *testing.T) {
	t.Parallel()
	addr := redistest.Start(t).Addr()
	table := binanceTable()
	table.Scope = "binance:ip-1"
	var pools []*clientpool.Pool
	for range 3 {
		pools = append(pools, newRedisPool(t, table, newClient(t, addr), "fleet", redisrate.WithBlocks(8, 30*time.Millisecond)))
	}
	calls := fleet{pools: pools, goroutines: 4, calls: 25, maxHold: 20 * ms, gen: binanceCalls(t, pools)}.run(t)
	checkBinance(t, table, calls)
}

// TestRedisFleetCompletionBlocks: three Pools with blocks on share one
// completion limit small enough to bind (20 units per 200 ms, calls of 1
// or 2 units); the completion window holds over every call.
func TestRedisFleetCompletionBlocks(t *testing.T) {
	t.Parallel()
	addr := redistest.Start(t).Addr()
	l := window.Limit{N: 20, Per: 200 * ms}
	table := clientpool.Table{Scope: "blocks", Rules: []clientpool.Rule{{Name: "r", Limit: l}}}
	var pools []*clientpool.Pool
	for range 3 {
		pools = append(pools, newRedisPool(t, table, newClient(t, addr), "fleet", redisrate.WithBlocks(4, 50*time.Millisecond)))
	}
	calls := fleet{pools: pools, goroutines: 5, calls: 30, maxHold: 20 * ms,
		gen: func(rng *rand.Rand, _ int) []clientpool.Charge {
			return []clientpool.Charge{{Rule: "r", Key: "k", Weight: 1 + rng.Int64N(2)}}
		}}.run(t)
	checkCompletion(t, "r", l, calls)
}
