package benchmarks

// BenchmarkWake measures issue item 3, waiting across processes without
// polling, in the case where only a release elsewhere can make room: P
// processes share a limit of one call in flight, each loops acquire → hold
// → release → think, and a process refused must wait for another's
// release. Two ways to wait are compared in one run, alternating:
//
//   - sleep-<cap>: re-ask Redis after min(wait, cap) plus jitter (a uniform
//     0–25 % of cap). The script cannot know when a call in flight ends, so
//     its wait is the lease bound and the sleep is the cap.
//   - pubsub: the release script PUBLISHes on a channel of the limiter's
//     scope; every process keeps one SUBSCRIBE connection and, refused,
//     waits for a message (or a safety bound of 100 ms, which a lost
//     message would cost), then re-asks Redis. Every waiter wakes on every
//     release and re-asks (a herd of P−1); one wins.
//
//	go test -run XXX -bench 'Wake$' -benchtime 1s -count 5 .
//
// The processes are goroutines of this test process, each with its own
// go-redis client (its own connections, its own subscription): stand-ins
// for processes, which share this process's scheduler and CPU. The scripts
// are raw Lua (one hash: the calls in flight and the last release's
// instant), not internal/rstore: what is measured is the waiting, not the
// bookkeeping.
//
// One op is one admitted call. A call holds its slot for 2 ms or 20 ms
// (wakeHolds: a fast API call and a slower one) and its process thinks for
// half of that before the next (shorter than the hold, so that with P ≥ 2
// a release always finds a waiter). Metrics:
// gap-p50-µs, gap-p99-µs (server clock: from a release to the next
// admission, the time the free slot stayed unused); wait-p50-ms,
// wait-p99-ms (client: from a call's first attempt to its admission);
// round-trips/op (EVALSHA admit attempts and releases, counted by a
// go-redis hook); msgs/op (pub/sub messages the processes received);
// srv-cpu-µs/op (the redis-server process's CPU, user + system);
// calls/s (admitted calls per second: at most 1/(hold + gap)).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/benchmarks/internal/trips"
)

// wakeBound is pubsub's safety bound.
const wakeBound = 100 * time.Millisecond

// wakeHolds are the times a call holds its slot; a process thinks half
// of it between its calls.
var wakeHolds = []time.Duration{2 * time.Millisecond, 20 * time.Millisecond}

var wakeProcs = []int{2, 4, 8}

// wakeAdmit admits a call when fewer than ARGV[1] are in flight. Reply
// {1, µs since the last release (-1: none since the last admission)} or
// {0, 0}.
var wakeAdmit = goredis.NewScript(`
local n = tonumber(redis.call('HGET', KEYS[1], 'n') or '0')
if n >= tonumber(ARGV[1]) then return {0, 0} end
redis.call('HINCRBY', KEYS[1], 'n', 1)
local r = redis.call('HGET', KEYS[1], 'r')
if not r then return {1, -1} end
redis.call('HDEL', KEYS[1], 'r')
local t = redis.call('TIME')
return {1, tonumber(t[1]) * 1000000 + tonumber(t[2]) - tonumber(r)}
`)

// wakeRelease ends a call, stores the instant, and PUBLISHes on ARGV[2]
// when ARGV[1] is "1".
var wakeRelease = goredis.NewScript(`
redis.call('HINCRBY', KEYS[1], 'n', -1)
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], 'r', tonumber(t[1]) * 1000000 + tonumber(t[2]))
if ARGV[1] == '1' then redis.call('PUBLISH', ARGV[2], '') end
return 1
`)

type wakeMode struct {
	name   string
	pubsub bool
	cap    time.Duration
}

var wakeModes = []wakeMode{
	{"sleep-1ms", false, time.Millisecond},
	{"sleep-5ms", false, 5 * time.Millisecond},
	{"pubsub", true, 0},
}

func BenchmarkWake(b *testing.B) {
	addr, ownServer := startRedis(b)
	admin := goredis.NewClient(&goredis.Options{Addr: addr})
	b.Cleanup(func() { _ = admin.Close() })
	run := fmt.Sprintf("wake-%08x", rand.Uint32())
	for _, hold := range wakeHolds {
		for _, p := range wakeProcs {
			b.Run(fmt.Sprintf("hold%v/P%d", hold, p), func(b *testing.B) {
				for _, m := range wakeModes {
					b.Run(m.name, func(b *testing.B) {
						runWake(b, admin, addr, ownServer, fmt.Sprintf("%s:%v:P%d:%s", run, hold, p, m.name), p, hold, m)
					})
				}
			})
		}
	}
}

// wakeProc is one stand-in process.
type wakeProc struct {
	rdb   *goredis.Client
	trips *trips.Counter
	ps    *goredis.PubSub
	msgs  <-chan *goredis.Message
	got   int64 // messages received
}

func runWake(b *testing.B, admin *goredis.Client, addr string, ownServer bool, key string, p int, hold time.Duration, m wakeMode) {
	ctx := context.Background()
	channel := key + ":wake"
	pub := "0"
	if m.pubsub {
		pub = "1"
	}
	procs := make([]*wakeProc, p)
	for i := range procs {
		w := &wakeProc{rdb: goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 2}), trips: &trips.Counter{}}
		w.rdb.AddHook(w.trips)
		if m.pubsub {
			w.ps = w.rdb.Subscribe(ctx, channel)
			if _, err := w.ps.Receive(ctx); err != nil {
				b.Fatal(err)
			}
			w.msgs = w.ps.Channel(goredis.WithChannelSize(1024))
		}
		if err := wakeAdmit.Load(ctx, w.rdb).Err(); err != nil {
			b.Fatal(err)
		}
		if err := wakeRelease.Load(ctx, w.rdb).Err(); err != nil {
			b.Fatal(err)
		}
		procs[i] = w
	}
	defer func() {
		for _, w := range procs {
			if w.ps != nil {
				_ = w.ps.Close()
			}
			_ = w.rdb.Close()
		}
	}()
	keys := []string{key}

	var mu sync.Mutex
	var gaps, waits []time.Duration
	var failed atomic.Int64
	var left atomic.Int64
	left.Store(int64(b.N))

	drain := func(w *wakeProc) {
		for {
			select {
			case <-w.msgs:
				w.got++
			default:
				return
			}
		}
	}
	loop := func(w *wakeProc) {
		var myGaps, myWaits []time.Duration
		defer func() {
			mu.Lock()
			gaps, waits = append(gaps, myGaps...), append(waits, myWaits...)
			mu.Unlock()
		}()
		for left.Add(-1) >= 0 {
			start := time.Now()
			for {
				drain(w) // a message of an earlier release wakes no one
				r, err := wakeAdmit.EvalSha(ctx, w.rdb, keys, 1).Int64Slice()
				if err != nil || len(r) != 2 {
					if failed.Add(1) == 1 {
						b.Error(err, r)
					}
					return
				}
				if r[0] == 1 {
					if r[1] >= 0 {
						myGaps = append(myGaps, time.Duration(r[1])*time.Microsecond)
					}
					break
				}
				if m.pubsub {
					t := time.NewTimer(wakeBound)
					select {
					case <-w.msgs:
						w.got++
					case <-t.C:
					}
					t.Stop()
				} else {
					time.Sleep(m.cap + time.Duration(rand.Int64N(int64(m.cap/4))))
				}
			}
			myWaits = append(myWaits, time.Since(start))
			time.Sleep(hold)
			if err := wakeRelease.EvalSha(ctx, w.rdb, keys, pub, channel).Err(); err != nil {
				if failed.Add(1) == 1 {
					b.Error(err)
				}
				return
			}
			time.Sleep(hold / 2)
		}
	}

	var cpu0 int64
	if ownServer {
		cpu0 = readServerStats(b, admin).cpuUsec
	}
	trips0 := int64(0)
	for _, w := range procs {
		trips0 += w.trips.N.Load()
	}
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, w := range procs {
		wg.Go(func() { loop(w) })
	}
	wg.Wait()
	b.StopTimer()
	if failed.Load() > 0 {
		b.FailNow()
	}

	n := float64(b.N)
	var trips, got int64
	for _, w := range procs {
		trips += w.trips.N.Load()
		got += w.got
	}
	b.ReportMetric(float64(trips-trips0)/n, "round-trips/op")
	b.ReportMetric(float64(got)/n, "msgs/op")
	b.ReportMetric(n/b.Elapsed().Seconds(), "calls/s")
	if len(gaps) > 0 {
		b.ReportMetric(float64(quantile(gaps, 0.5).Microseconds()), "gap-p50-µs")
		b.ReportMetric(float64(quantile(gaps, 0.99).Microseconds()), "gap-p99-µs")
	}
	b.ReportMetric(float64(quantile(waits, 0.5).Microseconds())/1e3, "wait-p50-ms")
	b.ReportMetric(float64(quantile(waits, 0.99).Microseconds())/1e3, "wait-p99-ms")
	if ownServer {
		b.ReportMetric(float64(readServerStats(b, admin).cpuUsec-cpu0)/n, "srv-cpu-µs/op")
	}
}

// quantile returns the q-quantile of ds (sorted in place), 0 for none.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(int(q*float64(len(ds))), len(ds)-1)]
}
