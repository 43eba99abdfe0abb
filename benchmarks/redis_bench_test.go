package benchmarks

// Benchmarks of decisions per second against one local redis-server:
// ratesem's windows in Redis (package window/redis) against
// go-redis/redis_rate, with a bare EVALSHA as the floor.
//
//	go test -run XXX -bench Redis -count 3 -benchtime 2s .
//
// BenchmarkRedis starts one redis-server child process (redistest.Start: a
// free loopback port, no persistence) that every contender and every
// repetition of one invocation uses, or uses REDIS_ADDR when it is set, and
// is skipped when there is no redis-server on PATH. Plain `go test ./...`
// runs no benchmark, so it never starts Redis.
//
// Every contender runs against the same server, through the same
// go-redis client (one pool of redisPoolSize connections, the same
// options), on one hot key of its own (as a limiter shared by replicas is
// one key), with a limit that never binds: every call is admitted, and the
// benchmark fails if one is refused. Each runs serially and with 16 and 64
// goroutines taking calls from one shared count of b.N. One op is:
//
//   - evalsha-return1: one EVALSHA of `return 1` (one key, not touched), the
//     floor: a round trip plus the cheapest script run.
//   - redis_rate-Allow: redis_rate.Limiter.Allow, GCRA on one string key
//     (TIME, GET, SET EX), PerSecond(1_000_000).
//   - ratesem-gcra-Admit: window/redis NewGCRA, one hash, 10^6 per 1 s,
//     burst N (the same limit as redis_rate's).
//   - ratesem-completion-Admit: window/redis NewCompletion, 2^40 per 1 s,
//     lease 1 ms, Admit only (never released): one decision. The calls
//     count until lease end + Per, so the window's sorted sets hold about
//     one second of admissions; each Admit prunes the ones that ran out.
//   - ratesem-completion-Admit+Release: the same window with the default
//     lease, Admit then Release: one admitted call, two round trips. Its
//     decisions/s counts admissions, so it is the cost of a call's whole
//     bookkeeping, not of a decision alone.
//
// Metrics besides ns/op (which, with goroutines, is wall time / b.N):
// decisions/s (b.N / wall time); script-runs/op (EVALSHA and EVAL calls the
// server counted, per op: 1 per decision, 2 for Admit+Release); srv-exec-µs/op
// (the server's INFO commandstats time inside those commands, per op: the
// scripts' own cost, without reading and writing the sockets);
// srv-cpu-µs/op (the redis-server process's CPU time, user + system, per op:
// everything the server spends, I/O included); client-cpu-µs/op (this test
// process's CPU time per op, from /proc/self/stat at 100 ticks per second,
// Linux only). The server statistics are reset and read only on a server
// that the benchmark started (not with REDIS_ADDR).

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

	"github.com/ratesem/ratesem/window"
	rsredis "github.com/ratesem/ratesem/window/redis"
	"github.com/ratesem/ratesem/window/redis/redistest"
)

// redisPoolSize is the client's pool: one connection per goroutine at the
// highest concurrency measured, so no goroutine waits for a connection.
const redisPoolSize = 64

var redisConcurrency = []int{1, 16, 64}

// redisOp is one measured operation. It returns whether the call was
// admitted.
type redisOp func(ctx context.Context) (bool, error)

type redisCase struct {
	name string
	// setup builds the contender on rdb with keys that begin with prefix.
	setup func(rdb *goredis.Client, prefix string) (redisOp, error)
}

func redisCases() []redisCase {
	return []redisCase{
		{"evalsha-return1", func(rdb *goredis.Client, prefix string) (redisOp, error) {
			s := goredis.NewScript("return 1")
			keys := []string{prefix + ":floor"}
			return func(ctx context.Context) (bool, error) {
				v, err := s.Run(ctx, rdb, keys).Int64()
				return v == 1, err
			}, nil
		}},
		{"redis_rate-Allow", func(rdb *goredis.Client, prefix string) (redisOp, error) {
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
		{"ratesem-gcra-Admit", func(rdb *goredis.Client, prefix string) (redisOp, error) {
			w, err := rsredis.NewGCRA(rdb, prefix, window.Limit{N: 1_000_000, Per: time.Second}, 0)
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context) (bool, error) {
				d, err := w.Admit(ctx, 1)
				return d.OK, err
			}, nil
		}},
		{"ratesem-completion-Admit", func(rdb *goredis.Client, prefix string) (redisOp, error) {
			w, err := rsredis.NewCompletion(rdb, prefix, window.Limit{N: 1 << 40, Per: time.Second},
				rsredis.WithLease(time.Millisecond))
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context) (bool, error) {
				d, err := w.Admit(ctx, 1)
				return d.OK, err
			}, nil
		}},
		{"ratesem-completion-Admit+Release", func(rdb *goredis.Client, prefix string) (redisOp, error) {
			w, err := rsredis.NewCompletion(rdb, prefix, window.Limit{N: 1 << 40, Per: time.Second})
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context) (bool, error) {
				d, err := w.Admit(ctx, 1)
				if err != nil || !d.OK {
					return false, err
				}
				return true, w.Release(ctx, d.Token)
			}, nil
		}},
	}
}

func BenchmarkRedis(b *testing.B) {
	addr := redistest.Start(b)
	ownServer := os.Getenv("REDIS_ADDR") == ""
	rdb := goredis.NewClient(&goredis.Options{
		Addr:         addr,
		PoolSize:     redisPoolSize,
		MinIdleConns: redisPoolSize,
	})
	b.Cleanup(func() { _ = rdb.Close() })

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
				op, err := c.setup(rdb, fmt.Sprintf("%s-%s-%s", run, level, c.name))
				if err != nil {
					b.Fatal(err)
				}
				b.Run(c.name, func(b *testing.B) { runRedisOp(b, rdb, ownServer, g, op) })
			}
		})
	}
}

// runRedisOp runs op b.N times on g goroutines and reports the metrics.
func runRedisOp(b *testing.B, rdb *goredis.Client, ownServer bool, g int, op redisOp) {
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

	b.ResetTimer()
	parallel(b.N)
	b.StopTimer()

	if failed.Load() > 0 {
		b.FailNow()
	}
	if r := refused.Load(); r > 0 {
		b.Fatalf("%d of %d calls refused: the limit must never bind", r, b.N)
	}
	n := float64(b.N)
	b.ReportMetric(n/b.Elapsed().Seconds(), "decisions/s")
	if cpu1, ok := processCPU(); ok && cpuOK {
		b.ReportMetric(float64((cpu1-cpu0).Microseconds())/n, "client-cpu-µs/op")
	}
	if ownServer {
		after := readServerStats(b, rdb)
		b.ReportMetric(float64(after.scriptCalls)/n, "script-runs/op")
		b.ReportMetric(float64(after.scriptUsec)/n, "srv-exec-µs/op")
		b.ReportMetric(float64(after.cpuUsec-before.cpuUsec)/n, "srv-cpu-µs/op")
	}
}

// serverStats is what the benchmark reads from INFO: the EVALSHA and EVAL
// calls and their time since CONFIG RESETSTAT, and the server process's CPU
// time.
type serverStats struct {
	scriptCalls, scriptUsec int64
	cpuUsec                 int64
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
		case "cmdstat_evalsha", "cmdstat_eval":
			for f := range strings.SplitSeq(v, ",") {
				name, val, _ := strings.Cut(f, "=")
				x, _ := strconv.ParseInt(val, 10, 64)
				switch name {
				case "calls":
					s.scriptCalls += x
				case "usec":
					s.scriptUsec += x
				}
			}
		case "used_cpu_sys", "used_cpu_user":
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO %s: %v", k, err)
			}
			s.cpuUsec += int64(x * 1e6)
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
