package benchmarks

// Benchmarks of decisions per second against one local redis-server:
// ratesem's Redis bookkeeping (internal/rstore: one admission script for
// any number of rules) against go-redis/redis_rate, with a bare EVALSHA as
// the floor.
//
//	go test -run XXX -bench 'Redis$' -count 3 -benchtime 2s .
//
// BenchmarkRedis starts one redis-server child process (startRedis: a free
// loopback port, no persistence) that every contender and every repetition
// of one invocation uses, or uses REDIS_ADDR when it is set, and is skipped
// when there is no redis-server on PATH. Plain `go test ./...` runs no
// benchmark, so it never starts Redis.
//
// The benchmarks module may import internal/rstore: its import path
// (github.com/ratesem/ratesem/benchmarks) lies inside the tree of
// github.com/ratesem/ratesem, and the go command applies the internal rule
// to import paths. So rstore is measured directly, with no engine and
// without making redis_rate a dependency of the root module.
//
// Every contender runs against the same server, through the same
// go-redis client (one pool of redisPoolSize connections, the same
// options), on hot keys of its own (as a limiter shared by replicas is
// one key), with limits that never bind: every call is admitted, and the
// benchmark fails if one is refused. Each runs serially and with 16 and 64
// goroutines taking calls from one shared count of b.N. One op is:
//
//   - evalsha-return1: one EVALSHA of `return 1` (one key, not touched), the
//     floor: a round trip plus the cheapest script run.
//   - redis_rate-Allow: redis_rate.Limiter.Allow, GCRA on one string key
//     (TIME, GET, SET EX), PerSecond(1_000_000).
//   - rstore-gcra-Admit: rstore.Store.Admit of one GCRA charge, 10^6 per
//     1 s, burst 10^6 (the same limit as redis_rate's).
//   - rstore-completion-Admit: one Completion charge, 2^40 per 1 s, lease
//     1 ms, Admit only (never released): one decision. The calls count
//     until lease end + Per, so the window's sorted sets hold about one
//     second of admissions; each Admit sweeps the leases that ran out into
//     the log and prunes the log entries that left the window.
//   - rstore-binance3-Admit: a Binance order in one EVALSHA: three
//     FixedCompletion charges as the Binance preset builds them
//     (REQUEST_WEIGHT per 1 min keyed by IP, ORDERS_10S per 10 s and
//     ORDERS_1D per 24 h keyed by account, weight 1 each, one scope), with
//     N = 2^40 instead of 6000, 100 and 200000 so that they never bind;
//     lease 1 ms, Admit only.
//   - rstore-completion-Admit+Release, rstore-binance3-Admit+Release: the
//     same charges with the default lease (1 min), Admit then Release: one
//     whole call, two round trips. Their decisions/s counts calls, so it is
//     the cost of a call's whole bookkeeping, not of a decision alone.
//   - redisrate.NewSemaphore-Acquire+Release: the public API over the waiting
//     engine (internal/remote) and rstore: a completion window of 2^40 per
//     1 s, Acquire(ctx, 1) then Release(1), which sends the release in the
//     background (so decisions/s is bounded by the admissions; the row
//     waits redisSettle, timer stopped, before it reads the counters, so
//     that the releases still in flight when the timer stops count with
//     it).
//   - clientpool-binance3-Acquire+Release: the public Pool over Redis
//     (clientpool.New with redisrate.Shared): a Table of the three rules of
//     rstore-binance3 (same windows, intervals, keys and scope), Acquire
//     of the order's three charges then Ticket.Release (in the background,
//     as the semaphore's).
//   - redisrate.NewSemaphore-blocks64-Acquire+Release,
//     clientpool-binance3-blocks64-Acquire+Release: the same two with
//     blocks on (redisrate.WithBlocks(64, 50ms)): a process takes 64 calls
//     in one admission and hands them out locally.
//
// The public fronts get the same counted client (redisrate.NewSemaphore and
// redisrate.Shared take rdb), so their round trips count as the others'.
//
// Metrics besides ns/op (which, with goroutines, is wall time / b.N):
// decisions/s (b.N / wall time: calls/s for the contenders that make whole
// calls); round-trips/op (what the client sent, counted by a go-redis hook:
// a command sent alone is one, a pipeline or transaction is one however
// many commands it carries; 1 per decision, 2 for Admit+Release; a
// NOSCRIPT fallback to EVAL would add one); redis.calls/op (the commands
// the server counted in INFO commandstats, less the commands the client
// sent: the redis.call()s inside the scripts, per op); srv-exec-µs/op (the server's INFO commandstats time
// inside EVALSHA and EVAL, per op: the scripts' own cost, without reading
// and writing the sockets); srv-cpu-µs/op (the redis-server process's CPU
// time, user + system, per op: everything the server spends, I/O
// included); client-cpu-µs/op (this test process's CPU time per op, from
// /proc/self/stat at 100 ticks per second, Linux only). The server
// statistics are reset and read only on a server that the benchmark
// started (not with REDIS_ADDR).

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/benchmarks/internal/trips"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/internal/rstore"
	"github.com/ratesem/ratesem/redisrate"
	"github.com/ratesem/ratesem/semaphore"
	"github.com/ratesem/ratesem/window"
)

// redisPoolSize is the client's pool: one connection per goroutine at the
// highest concurrency measured, so no goroutine waits for a connection.
const redisPoolSize = 64

var redisConcurrency = []int{1, 16, 64}

// redisSettle is how long a row waits, timer stopped, before it reads the
// counters: the public fronts send releases in the background (and may
// hold them a few milliseconds to batch them), and those belong to the row
// that made them.
const redisSettle = 50 * time.Millisecond

// redisOp is one measured operation. It returns whether the call was
// admitted.
type redisOp func(ctx context.Context) (bool, error)

type redisCase struct {
	name string
	// setup builds the contender on rdb with keys that begin with prefix;
	// it may register its teardown with b.Cleanup.
	setup func(b testing.TB, rdb *goredis.Client, prefix string) (redisOp, error)
}

// binanceOrder returns the charges of one Binance order (POST
// /api/v3/order: REQUEST_WEIGHT 1, one unit of each ORDERS rule), with the
// preset's windows (window.NewFixedCompletion, mapped by rstore.SpecOf) and
// intervals, and N = 2^40 so that no rule binds.
func binanceOrder() ([]rstore.Charge, error) {
	const never = 1 << 40
	rules := []struct {
		rule, key string
		per       time.Duration
	}{
		{"REQUEST_WEIGHT", "203.0.113.7", time.Minute},
		{"ORDERS_10S", "api-key-1", 10 * time.Second},
		{"ORDERS_1D", "api-key-1", 24 * time.Hour},
	}
	cs := make([]rstore.Charge, len(rules))
	for i, r := range rules {
		sp, err := rstore.SpecOf(window.NewFixedCompletion(window.Limit{N: never, Per: r.per}))
		if err != nil {
			return nil, err
		}
		if sp.Kind != rstore.FixedCompletion {
			return nil, fmt.Errorf("SpecOf(NewFixedCompletion) = %v", sp.Kind)
		}
		cs[i] = rstore.Charge{Rule: r.rule, Key: r.key, Spec: &sp, Weight: 1}
	}
	return cs, nil
}

// storeAdmit is a contender that admits cs in one scope, and releases
// each admitted call at once when release is set.
func storeAdmit(cs func() ([]rstore.Charge, error), lease time.Duration, release bool) func(_ testing.TB, rdb *goredis.Client, prefix string) (redisOp, error) {
	return func(_ testing.TB, rdb *goredis.Client, prefix string) (redisOp, error) {
		st, err := rstore.New(rdb, prefix, rstore.Options{Lease: lease})
		if err != nil {
			return nil, err
		}
		charges, err := cs()
		if err != nil {
			return nil, err
		}
		const scope = "binance:203.0.113.7"
		return func(ctx context.Context) (bool, error) {
			d, err := st.Admit(ctx, scope, charges)
			if err != nil || !d.OK || !release {
				return d.OK, err
			}
			return true, st.Release(ctx, scope, charges, d.Token)
		}, nil
	}
}

func oneCharge(sp rstore.Spec) func() ([]rstore.Charge, error) {
	return func() ([]rstore.Charge, error) {
		return []rstore.Charge{{Rule: "r", Key: "k", Spec: &sp, Weight: 1}}, nil
	}
}

func redisCases() []redisCase {
	gcra := rstore.Spec{Kind: rstore.GCRA, Limit: window.Limit{N: 1_000_000, Per: time.Second}, Burst: 1_000_000}
	completion := rstore.Spec{Kind: rstore.Completion, Limit: window.Limit{N: 1 << 40, Per: time.Second}}
	return []redisCase{
		{"evalsha-return1", func(_ testing.TB, rdb *goredis.Client, prefix string) (redisOp, error) {
			s := goredis.NewScript("return 1")
			keys := []string{prefix + ":floor"}
			return func(ctx context.Context) (bool, error) {
				v, err := s.Run(ctx, rdb, keys).Int64()
				return v == 1, err
			}, nil
		}},
		{"redis_rate-Allow", func(_ testing.TB, rdb *goredis.Client, prefix string) (redisOp, error) {
			lim := redis_rate.NewLimiter(rdb)
			limit := redis_rate.PerSecond(1_000_000)
			key := prefix + ":redis_rate"
			return func(ctx context.Context) (bool, error) {
				r, err := lim.Allow(ctx, key, limit)
				if err != nil {
					return false, err
				}
				return r.Allowed == 1, nil
			}, nil
		}},
		{"rstore-gcra-Admit", storeAdmit(oneCharge(gcra), 0, false)},
		{"rstore-completion-Admit", storeAdmit(oneCharge(completion), time.Millisecond, false)},
		{"rstore-binance3-Admit", storeAdmit(binanceOrder, time.Millisecond, false)},
		{"rstore-completion-Admit+Release", storeAdmit(oneCharge(completion), 0, true)},
		{"rstore-binance3-Admit+Release", storeAdmit(binanceOrder, 0, true)},
		{"redisrate.NewSemaphore-Acquire+Release", func(b testing.TB, rdb *goredis.Client, prefix string) (redisOp, error) {
			return semAcquireRelease(b, rdb, prefix)
		}},
		{"clientpool-binance3-Acquire+Release", func(b testing.TB, rdb *goredis.Client, prefix string) (redisOp, error) {
			return poolBinanceOrder(b, rdb, prefix)
		}},
		{"redisrate.NewSemaphore-blocks64-Acquire+Release", func(b testing.TB, rdb *goredis.Client, prefix string) (redisOp, error) {
			return semAcquireRelease(b, rdb, prefix, redisrate.WithBlocks(benchBlock, benchBlockHold))
		}},
		{"clientpool-binance3-blocks64-Acquire+Release", func(b testing.TB, rdb *goredis.Client, prefix string) (redisOp, error) {
			return poolBinanceOrder(b, rdb, prefix, redisrate.WithBlocks(benchBlock, benchBlockHold))
		}},
	}
}

// semAcquireRelease is the public semaphore's contender: Acquire(1) and
// Release(1) on a redisrate.NewSemaphore of a limit that never binds
// (2^40 per second), with opts.
func semAcquireRelease(b testing.TB, rdb *goredis.Client, prefix string, opts ...semaphore.Option) (redisOp, error) {
	s, err := redisrate.NewSemaphore(rdb, "sem", 1<<40, time.Second, append([]semaphore.Option{redisrate.WithPrefix(prefix)}, opts...)...)
	if err != nil {
		return nil, err
	}
	b.Cleanup(func() { _ = s.Close() })
	return func(ctx context.Context) (bool, error) {
		if err := s.Acquire(ctx, 1); err != nil {
			return false, err
		}
		s.Release(1)
		return true, nil
	}, nil
}

// The blocks of the contenders with blocks on (redisrate.WithBlocks).
const (
	benchBlock     = 64
	benchBlockHold = 50 * time.Millisecond
)

// poolBinanceOrder is the public Pool over Redis: a clientpool.Table of
// the three rules of binanceOrder (the Binance preset's windows and
// intervals, keyed as there, N = 2^40 so that no rule binds), in Redis
// mode through redisrate.Shared on the counted client, one scope; one op
// is Acquire of the order's three charges, then Ticket.Release (which,
// like the semaphore's, sends the release in the background).
func poolBinanceOrder(b testing.TB, rdb *goredis.Client, prefix string, opts ...clientpool.Option) (redisOp, error) {
	const never = 1 << 40
	fixed := func(l window.Limit) window.Policy { return window.NewFixedCompletion(l) }
	table := clientpool.Table{
		Rules: []clientpool.Rule{
			{Name: "REQUEST_WEIGHT", Limit: window.Limit{N: never, Per: time.Minute}, Window: fixed},
			{Name: "ORDERS_10S", Limit: window.Limit{N: never, Per: 10 * time.Second}, Window: fixed},
			{Name: "ORDERS_1D", Limit: window.Limit{N: never, Per: 24 * time.Hour}, Window: fixed},
		},
		Scope: "binance:203.0.113.7",
	}
	p, err := clientpool.New(table, append(opts, redisrate.Shared(rdb, prefix))...)
	if err != nil {
		return nil, err
	}
	b.Cleanup(func() { _ = p.Close() })
	charges := []clientpool.Charge{
		{Rule: "REQUEST_WEIGHT", Key: "203.0.113.7", Weight: 1},
		{Rule: "ORDERS_10S", Key: "api-key-1", Weight: 1},
		{Rule: "ORDERS_1D", Key: "api-key-1", Weight: 1},
	}
	return func(ctx context.Context) (bool, error) {
		tk, err := p.Acquire(ctx, charges...)
		if err != nil {
			return false, err
		}
		tk.Release()
		return true, nil
	}, nil
}

func BenchmarkRedis(b *testing.B) {
	addr, ownServer := startRedis(b)
	rdb := goredis.NewClient(&goredis.Options{
		Addr:         addr,
		PoolSize:     redisPoolSize,
		MinIdleConns: redisPoolSize,
	})
	b.Cleanup(func() { _ = rdb.Close() })
	tc := &trips.Counter{}
	rdb.AddHook(tc)

	// Keys of this invocation, apart from other runs on a shared server.
	var id [4]byte
	_, _ = rand.Read(id[:])
	run := "bench-" + hex.EncodeToString(id[:])

	for _, g := range redisConcurrency {
		level := "serial"
		if g > 1 {
			level = fmt.Sprintf("g%d", g)
		}
		b.Run(level, func(b *testing.B) {
			for _, c := range redisCases() {
				op, err := c.setup(b, rdb, fmt.Sprintf("%s-%s-%s", run, level, c.name))
				if err != nil {
					b.Fatal(err)
				}
				b.Run(c.name, func(b *testing.B) { runRedisOp(b, rdb, tc, ownServer, g, op) })
			}
		})
	}
}

// runRedisOp runs op b.N times on g goroutines and reports the metrics.
func runRedisOp(b *testing.B, rdb *goredis.Client, tc *trips.Counter, ownServer bool, g int, op redisOp) {
	ctx := context.Background()
	var refused, failed atomic.Int64
	work := func(n *atomic.Int64) {
		for n.Add(-1) >= 0 {
			ok, err := op(ctx)
			if err != nil {
				if failed.Add(1) == 1 {
					b.Error(err)
				}
				return
			}
			if !ok {
				refused.Add(1)
			}
		}
	}
	parallel := func(total int) {
		var n atomic.Int64
		n.Store(int64(total))
		var wg sync.WaitGroup
		for range g {
			wg.Go(func() { work(&n) })
		}
		wg.Wait()
	}

	// Warm up: every goroutine's connection open, the script cached.
	parallel(4 * g)
	if failed.Load() > 0 {
		b.FailNow()
	}
	var before serverStats
	if ownServer {
		if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		before = readServerStats(b, rdb)
	}
	cpu0, cpuOK := processCPU()
	refused.Store(0)
	trips0, cmds0 := tc.N.Load(), tc.Cmds.Load()

	b.ResetTimer()
	parallel(b.N)
	b.StopTimer()
	// Let the releases the public fronts send in the background go out, so
	// that their round trips, commands and CPU count with this row.
	time.Sleep(redisSettle)

	if failed.Load() > 0 {
		b.FailNow()
	}
	if r := refused.Load(); r > 0 {
		b.Fatalf("%d of %d calls refused: the limit must never bind", r, b.N)
	}
	n := float64(b.N)
	rt, sent := tc.N.Load()-trips0, tc.Cmds.Load()-cmds0
	b.ReportMetric(n/b.Elapsed().Seconds(), "decisions/s")
	b.ReportMetric(float64(rt)/n, "round-trips/op")
	if cpu1, ok := processCPU(); ok && cpuOK {
		b.ReportMetric(float64((cpu1-cpu0).Microseconds())/n, "client-cpu-µs/op")
	}
	if ownServer {
		after := readServerStats(b, rdb)
		b.ReportMetric(float64(after.calls-sent)/n, "redis.calls/op")
		b.ReportMetric(float64(after.scriptUsec)/n, "srv-exec-µs/op")
		b.ReportMetric(float64(after.cpuUsec-before.cpuUsec)/n, "srv-cpu-µs/op")
	}
}

// serverStats is what the benchmark reads from INFO: the commands since
// CONFIG RESETSTAT (but the INFO and CONFIG of the harness), the time
// inside EVALSHA and EVAL, and the server process's CPU time.
type serverStats struct {
	calls, scriptUsec int64
	cpuUsec           int64
}

func readServerStats(b *testing.B, rdb *goredis.Client) serverStats {
	info, err := rdb.Info(context.Background(), "commandstats", "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var s serverStats
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		switch k {
		case "used_cpu_sys", "used_cpu_user":
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO %s: %v", k, err)
			}
			s.cpuUsec += int64(x * 1e6)
		default:
			cmd, ok := strings.CutPrefix(k, "cmdstat_")
			if !ok || cmd == "info" || cmd == "config" || strings.HasPrefix(cmd, "config|") {
				continue
			}
			script := cmd == "evalsha" || cmd == "eval"
			for f := range strings.SplitSeq(v, ",") {
				name, val, _ := strings.Cut(f, "=")
				x, _ := strconv.ParseInt(val, 10, 64)
				switch name {
				case "calls":
					s.calls += x
				case "usec":
					if script {
						s.scriptUsec += x
					}
				}
			}
		}
	}
	return s
}

// processCPU returns this process's CPU time (user + system) from
// /proc/self/stat, in clock ticks taken as 1/100 s (Linux's USER_HZ on
// every common platform). It reports false where /proc is missing.
func processCPU() (time.Duration, bool) {
	raw, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) may hold spaces; it ends at the last ')'.
	i := strings.LastIndexByte(string(raw), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(raw[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, false
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, true
}
