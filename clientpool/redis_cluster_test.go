package clientpool_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/redistest"
)

// startCluster3 starts a Redis Cluster of three masters on loopback
// (redistest.StartCluster) and returns a client of it, closed at the end.
func startCluster3(t *testing.T) *goredis.ClusterClient {
	t.Helper()
	c, _ := newCluster3(t)
	return c
}

func newCluster3(t *testing.T) (*goredis.ClusterClient, *redistest.Cluster) {
	t.Helper()
	cl := redistest.StartCluster(t)
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cl.Addrs(), MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	return c, cl
}

// nodeOf returns the index of the cluster node that holds the keys under
// prefix, or -1 when none does.
func nodeOf(t *testing.T, cl *redistest.Cluster, prefix string) int {
	t.Helper()
	for i, a := range cl.Addrs() {
		n := goredis.NewClient(&goredis.Options{Addr: a})
		keys, err := n.Keys(context.Background(), prefix+"*").Result()
		n.Close()
		if err == nil && len(keys) > 0 {
			return i
		}
	}
	return -1
}

// The cluster node holding the scope's slot restarted mid-run (its keys
// lost, its slots kept): calls fail with ratesem.ErrUnavailable (or go on) while
// it is away, are admitted after once the lost windows end (orders, under
// a day's window, fail fast), and every window holds across it.
func TestRedisClusterNodeRestartMidRun(t *testing.T) {
	t.Parallel() // long runs on their own servers: overlap their waits
	c, cl := newCluster3(t)
	table := binanceTable()
	var pools []*clientpool.Pool
	for range 2 {
		pools = append(pools, newRedisPool(t, table, c, "noderestart"))
	}
	var restarted atomic.Bool
	var at time.Time
	calls := fleet{
		pools: pools, goroutines: 3, calls: 30, maxHold: 10 * ms, gen: binanceCalls(t, pools),
		allowed: func(err error) bool {
			// CLUSTERDOWN while the node is being failed/recovered is a
			// Redis error too.
			// After the restart the pools find the scope's state lost
			// and hold every rule full until its window ends: an order
			// (under ORDERS_1D, a day: 14 min here) fails at once with
			// ErrDeadline.
			return errors.Is(err, ratesem.ErrUnavailable) || errors.Is(err, ratesem.ErrDeadline) ||
				strings.Contains(err.Error(), "CLUSTERDOWN")
		},
		during: func(i int) {
			if i == 10 && !restarted.Swap(true) {
				n := nodeOf(t, cl, "noderestart")
				if n < 0 {
					t.Error("no node holds the scope's keys")
					return
				}
				if err := cl.Restart(n); err != nil {
					t.Error(err)
				}
				at = time.Now()
			}
		},
	}.run(t)
	checkBinance(t, table, calls)
	after, failed := 0, 0
	for _, c := range calls {
		switch {
		case !c.ok:
			failed++
		case c.start.After(at):
			after++
		}
	}
	t.Logf("%d calls, %d failed (node away), %d admitted after the restart", len(calls), failed, after)
	if after == 0 {
		t.Fatal("no call admitted after the restart")
	}
}
