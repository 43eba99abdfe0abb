package clientpool_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/exchange/binance"
	"github.com/ratesem/ratesem/exchange/okx"
	"github.com/ratesem/ratesem/internal/rstore"
	"github.com/ratesem/ratesem/redisrate"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// The tests of Redis mode run against a real redis-server (and a Redis
// Cluster) that they start on loopback (package redistest); several Pools
// over one Redis play the replicas of a fleet.

// newClient returns a client of the server at addr, closed at the end.
func newClient(t *testing.T, addr string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// newClientB is newClient for a benchmark.
func newClientB(b *testing.B, addr string) *goredis.Client {
	b.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	b.Cleanup(func() { c.Close() })
	return c
}

// newRedisPool returns a Pool over table in Redis mode, closed at the end.
// It skips the test while internal/rstore is only a skeleton.
func newRedisPool(t *testing.T, table clientpool.Table, c goredis.UniversalClient, prefix string, opts ...clientpool.Option) *clientpool.Pool {
	t.Helper()
	p, err := newRedisPoolErr(t, table, c, prefix, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newRedisPoolErr(t *testing.T, table clientpool.Table, c goredis.UniversalClient, prefix string, opts ...clientpool.Option) (p *clientpool.Pool, err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			if s, ok := r.(string); ok && strings.HasSuffix(s, ": todo") {
				t.Skipf("internal/rstore is not implemented yet: %v", r)
			}
			panic(r)
		}
	}()
	p, err = clientpool.New(table, append(opts, redisrate.Shared(c, prefix))...)
	if err == nil {
		t.Cleanup(func() { p.Close() })
	}
	return p, err
}

// fleetCall is one call of a fleet run: its charges, and its start and end
// on the wall clock (start after Acquire returned, end before Release: the
// call's interval as Redis saw it contains this one).
type fleetCall struct {
	charges    []clientpool.Charge
	ok         bool
	start, end time.Time
}

// fleet runs calls on pools (the replicas) from goroutines per pool, each
// call's charges from gen and held for a random time up to maxHold; it
// returns every call. Acquire errors matching allowed are accepted (the
// call is then not admitted); any other fails the test.
type fleet struct {
	pools      []*clientpool.Pool
	goroutines int // per pool
	calls      int // per goroutine
	maxHold    time.Duration
	gen        func(rng *rand.Rand, pool int) []clientpool.Charge
	allowed    func(error) bool
	during     func(i int) // called by pool 0's first goroutine before its call i
	observe    func(tk *clientpool.Ticket)
}

func (f fleet) run(t *testing.T) []fleetCall {
	t.Helper()
	var mu sync.Mutex
	var out []fleetCall
	var wg sync.WaitGroup
	for pi, p := range f.pools {
		for g := range f.goroutines {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(pi), uint64(g)))
				var mine []fleetCall
				for i := range f.calls {
					if f.during != nil && pi == 0 && g == 0 {
						f.during(i)
					}
					c := fleetCall{charges: f.gen(rng, pi)}
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					tk, err := p.Acquire(ctx, c.charges...)
					cancel()
					if err != nil {
						if f.allowed == nil || !f.allowed(err) {
							t.Errorf("pool %d: Acquire(%v): %v", pi, c.charges, err)
							return
						}
						mine = append(mine, c)
						time.Sleep(20 * ms) // a caller's pause before trying again
						continue
					}
					c.ok, c.start = true, time.Now()
					if f.maxHold > 0 {
						time.Sleep(time.Duration(rng.Int64N(int64(f.maxHold))))
					}
					if f.observe != nil {
						f.observe(tk)
					}
					c.end = time.Now()
					tk.Release()
					mine = append(mine, c)
				}
				mu.Lock()
				out = append(out, mine...)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	return out
}

// checkFixed checks a fixed window with completion (Binance's rules under
// window.NewFixedCompletion): in every window of Per aligned to the Unix
// epoch, the units of the calls whose [start, end] touches it are at most
// N, for every key. It returns the largest use of a window seen.
func checkFixed(t *testing.T, rule string, l window.Limit, calls []fleetCall) int64 {
	t.Helper()
	per := int64(l.Per)
	use := map[string]map[int64]int64{}
	for _, c := range calls {
		if !c.ok {
			continue
		}
		for _, ch := range c.charges {
			if ch.Rule != rule {
				continue
			}
			m := use[ch.Key]
			if m == nil {
				m = map[int64]int64{}
				use[ch.Key] = m
			}
			for w := c.start.UnixNano() / per; w <= c.end.UnixNano()/per; w++ {
				m[w] += ch.Weight
			}
		}
	}
	var peak int64
	for key, m := range use {
		for w, n := range m {
			if n > l.N {
				t.Errorf("%s[%q]: window at %v counts %d units > %d", rule, key, time.Unix(0, w*per).UTC(), n, l.N)
			}
			peak = max(peak, n)
		}
	}
	return peak
}

// checkCompletion checks the completion window: at every start, units in
// flight plus units of calls ended within Per are at most N, per key.
func checkCompletion(t *testing.T, rule string, l window.Limit, calls []fleetCall) {
	t.Helper()
	for _, ci := range calls {
		if !ci.ok {
			continue
		}
		for _, ch := range ci.charges {
			if ch.Rule != rule {
				continue
			}
			var used int64
			for _, cj := range calls {
				if !cj.ok || cj.start.After(ci.start) || !cj.end.Add(l.Per).After(ci.start) {
					continue
				}
				for _, ch2 := range cj.charges {
					if ch2.Rule == rule && ch2.Key == ch.Key {
						used += ch2.Weight
					}
				}
			}
			if used > l.N {
				t.Fatalf("at %v, %s[%q]: %d units in flight or ended within %v > %d", ci.start, rule, ch.Key, used, l.Per, l.N)
			}
		}
	}
}

// binanceTable is the Binance preset at scale 100 (a minute lasts 600 ms,
// 10 s last 100 ms) with smaller limits, so that a short run hits them.
func binanceTable() clientpool.Table {
	t := binance.Spot(binance.WithTimeScale(100))
	for i := range t.Rules {
		r := &t.Rules[i]
		switch r.Name {
		case binance.RuleRequestWeight:
			r.Limit.N = 120
		case binance.RuleRawRequests:
			r.Limit.N = 100
		case binance.RuleOrders10s:
			r.Limit.N = 4
		}
	}
	return t
}

// binanceCalls picks a Binance request (klines, a deep order book, or an
// order of one of two accounts) and classifies it with p.
func binanceCalls(t *testing.T, pools []*clientpool.Pool) func(rng *rand.Rand, pool int) []clientpool.Charge {
	return func(rng *rand.Rand, pool int) []clientpool.Charge {
		var req *http.Request
		switch rng.IntN(4) {
		case 0:
			req, _ = http.NewRequest("GET", "http://x/api/v3/klines?symbol=BTCUSDT", nil)
		case 1:
			req, _ = http.NewRequest("GET", "http://x/api/v3/depth?limit=500", nil)
		default:
			req, _ = http.NewRequest("POST", "http://x/api/v3/order", nil)
			req.Header.Set(binance.HeaderAPIKey, fmt.Sprint("acct-", rng.IntN(2)))
		}
		cs, err := pools[pool].Classify(req)
		if err != nil {
			t.Error(err)
		}
		return cs
	}
}

func checkBinance(t *testing.T, table clientpool.Table, calls []fleetCall) {
	t.Helper()
	ok := 0
	for _, c := range calls {
		if c.ok {
			ok++
		}
	}
	if ok == 0 {
		t.Fatal("no call admitted")
	}
	for _, r := range table.Rules {
		peak := checkFixed(t, r.Name, r.Limit, calls)
		t.Logf("%s: peak %d of %d per window", r.Name, peak, r.Limit.N)
	}
}

// Three Pools over one Redis run the Binance preset's rules (fixed windows
// with completion, per IP and per account): in every aligned window of
// every rule and key, the units of the calls of all three together stay
// within N. On a single server and on a cluster.
func TestRedisFleetBinance(t *testing.T) {
	t.Parallel() // long runs on their own servers: overlap their waits
	for _, cluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "server", true: "cluster"}[cluster], func(t *testing.T) {
			t.Parallel()
			var c goredis.UniversalClient
			if cluster {
				c = startCluster3(t)
			} else {
				c = newClient(t, redistest.Start(t).Addr())
			}
			table := binanceTable()
			table.Scope = "binance:ip-1"
			var pools []*clientpool.Pool
			for range 3 {
				pools = append(pools, newRedisPool(t, table, c, "fleet"))
			}
			calls := fleet{pools: pools, goroutines: 4, calls: 12, maxHold: 20 * ms, gen: binanceCalls(t, pools)}.run(t)
			checkBinance(t, table, calls)
			if cluster {
				checkOneSlot(t, c.(*goredis.ClusterClient), "fleet")
			}
		})
	}
}

// checkOneSlot checks that every key under prefix hashes to one slot
// (CLUSTER KEYSLOT), on one node.
func checkOneSlot(t *testing.T, c *goredis.ClusterClient, prefix string) {
	t.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	slots := map[int64][]string{}
	err := c.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error {
		keys, err := n.Keys(ctx, prefix+"*").Result()
		if err != nil {
			return err
		}
		for _, k := range keys {
			slot, err := n.ClusterKeySlot(ctx, k).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			slots[slot] = append(slots[slot], k)
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(slots) != 1 {
		t.Fatalf("keys of one scope in %d slots, want 1: %q", len(slots), slots)
	}
}

// okxTable is the OKX preset at scale 10 (2 s last 200 ms) with smaller
// limits for placing orders, so that a short run hits them.
func okxTable() clientpool.Table {
	t := okx.Table(okx.WithTimeScale(10))
	for i := range t.Rules {
		r := &t.Rules[i]
		switch r.Name {
		case okx.RulePlaceOrder:
			r.Limit.N = 3
		case okx.RuleSubAccountOrders:
			r.Limit.N = 5
		}
	}
	return t
}

// Three Pools over one Redis run OKX's order rules (completion windows: 60
// per 2 s per user and instrument, 1000 per 2 s per sub-account, both at
// once): at every start, units in flight plus units ended within Per stay
// within N, for every rule and key, across the three. On a single server
// and on a cluster.
func TestRedisFleetOKX(t *testing.T) {
	t.Parallel() // long runs on their own servers: overlap their waits
	for _, cluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "server", true: "cluster"}[cluster], func(t *testing.T) {
			t.Parallel()
			var c goredis.UniversalClient
			if cluster {
				c = startCluster3(t)
			} else {
				c = newClient(t, redistest.Start(t).Addr())
			}
			table := okxTable()
			table.Scope = "okx:uid-1"
			var pools []*clientpool.Pool
			for range 3 {
				pools = append(pools, newRedisPool(t, table, c, "fleet"))
			}
			gen := func(rng *rand.Rand, _ int) []clientpool.Charge {
				inst := fmt.Sprint("BTC-USDT-", rng.IntN(3))
				return []clientpool.Charge{
					{Rule: okx.RulePlaceOrder, Key: "uid-1|" + inst, Weight: 1},
					{Rule: okx.RuleSubAccountOrders, Key: "uid-1", Weight: 1},
				}
			}
			calls := fleet{pools: pools, goroutines: 3, calls: 10, maxHold: 10 * ms, gen: gen}.run(t)
			for _, r := range table.Rules {
				if r.Name == okx.RulePlaceOrder || r.Name == okx.RuleSubAccountOrders {
					checkCompletion(t, r.Name, r.Limit, calls)
				}
			}
			if cluster {
				checkOneSlot(t, c.(*goredis.ClusterClient), "fleet")
			}
		})
	}
}

// twoRules is a small table of two completion-window rules.
func twoRules(na, nb int64, per time.Duration) clientpool.Table {
	return clientpool.Table{Rules: []clientpool.Rule{ruleN("a", na, per), ruleN("b", nb, per)}}
}

// A throttle seen by one Pool pauses the same key in the other Pools at
// once: their next call on it fails fast (its admission comes after its
// deadline), other keys go on.
func TestRedisThrottlePausesFleet(t *testing.T) {
	c := newClient(t, redistest.Start(t).Addr())
	table := twoRules(100, 100, time.Second)
	p1 := newRedisPool(t, table, c, "thr")
	p2 := newRedisPool(t, table, c, "thr")
	ch := clientpool.Charge{Rule: "a", Key: "k", Weight: 1}
	tk := acquire(t, p1, ch)
	p1.Throttled(clientpool.Throttle{Status: 429, RetryAfter: 3 * time.Second}, tk.Charges())
	tk.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 500*ms)
	defer cancel()
	begin := time.Now()
	var err error
	for {
		// The pause goes to Redis in the background: wait for it to land.
		var tk2 *clientpool.Ticket
		tk2, err = p2.Acquire(ctx, ch)
		if err != nil {
			break
		}
		tk2.Release()
		if time.Since(begin) > 2*time.Second {
			t.Fatal("the other pool was never paused")
		}
		time.Sleep(10 * ms)
	}
	if !errors.Is(err, ratesem.ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("paused key: err = %v, want ratesem.ErrDeadline", err)
	}
	acquire(t, p2, clientpool.Charge{Rule: "a", Key: "other", Weight: 1}).Release()
}

// A usage header seen by one Pool (the server counts the IP's whole
// weight: another client spent it) tightens every Pool: their next call on
// that rule waits for the window to move.
func TestRedisObserveHeadersTightensFleet(t *testing.T) {
	c := newClient(t, redistest.Start(t).Addr())
	table := binance.Spot(binance.WithTimeScale(2)) // a minute of weight lasts 30 s
	p1 := newRedisPool(t, table, c, "obs")
	p2 := newRedisPool(t, table, c, "obs")
	req, _ := http.NewRequest("GET", "http://x/api/v3/klines", nil)
	cs, err := p1.Classify(req)
	if err != nil {
		t.Fatal(err)
	}
	// REQUEST_WEIGHT's windows here are 30 s, aligned to the clock: a
	// report read in one window that lands in the next is that window's
	// count and is dropped (rstore.ReconcileAt), so a try that straddles a
	// boundary proves nothing and is made again, once.
	per := int64(30 * time.Second)
	for try := 0; ; try++ {
		from := time.Now().UnixNano() / per
		tk := acquire(t, p1, cs...)
		h := http.Header{}
		h.Set(binance.HeaderUsedWeight1m, fmt.Sprint(binance.LimitRequestWeight))
		tk.ObserveHeaders(h)
		tk.Release()
		err := untilRefused(p2, 200*ms, 2*time.Second, cs...)
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		if try == 0 && time.Now().UnixNano()/per != from {
			continue
		}
		t.Fatalf("the usage header did not tighten the other pool: %v, want a wait past the deadline", err)
	}
	// RAW_REQUESTS, which the header does not count, is untouched.
	raw := clientpool.Charge{Rule: binance.RuleRawRequests, Weight: 1}
	acquire(t, p2, raw).Release()
}

// A cancelled Acquire leaves no trace in any rule, in any Pool: a call
// waiting on a full rule a and taking b too is cancelled; b's whole limit
// is then free for another Pool at once.
func TestRedisCancelLeavesNoTrace(t *testing.T) {
	c := newClient(t, redistest.Start(t).Addr())
	table := twoRules(2, 3, time.Minute)
	p1 := newRedisPool(t, table, c, "cancel")
	p2 := newRedisPool(t, table, c, "cancel")
	full := acquire(t, p1, clientpool.Charge{Rule: "a", Weight: 2})
	defer full.Release()
	for range 5 {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := p2.Acquire(ctx, clientpool.Charge{Rule: "b", Weight: 1}, clientpool.Charge{Rule: "a", Weight: 1})
			done <- err
		}()
		time.Sleep(20 * ms)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	tk, err := p1.Acquire(ctx, clientpool.Charge{Rule: "b", Weight: 3})
	if err != nil {
		t.Fatalf("b's whole limit after cancelled calls: %v", err)
	}
	tk.Release()
	for _, ks := range p2.Snapshot() {
		if ks.InFlight != 0 {
			t.Fatalf("%+v: units in flight after cancelled calls", ks)
		}
	}
}

// Two Pools built with different limits for one rule: the second to touch
// a key fails with ratesem.ErrLimitMismatch rather than enforce its own limit. A
// SetLimit in one Pool is adopted by the other.
func TestRedisLimitMismatchAndSetLimit(t *testing.T) {
	c := newClient(t, redistest.Start(t).Addr())
	p1 := newRedisPool(t, twoRules(3, 3, time.Minute), c, "lim")
	p2 := newRedisPool(t, twoRules(5, 3, time.Minute), c, "lim")
	acquire(t, p1, clientpool.Charge{Rule: "a", Key: "k", Weight: 1}).Release()
	_, err := p2.Acquire(context.Background(), clientpool.Charge{Rule: "a", Key: "k", Weight: 1})
	if !errors.Is(err, ratesem.ErrLimitMismatch) {
		t.Fatalf("err = %v, want ratesem.ErrLimitMismatch", err)
	}
	t.Logf("mismatch: %v", err)

	// p1 sets 2 per minute on a: p2, built with 5, adopts it on key k.
	if err := p1.SetLimit("a", window.Limit{N: 2, Per: time.Minute}); err != nil {
		t.Fatal(err)
	}
	// a[k] counts p1's call (ended within the minute): 1 more fits.
	acquire(t, p2, clientpool.Charge{Rule: "a", Key: "k", Weight: 1}).Release()
	ctx, cancel := context.WithTimeout(context.Background(), 300*ms)
	defer cancel()
	if _, err := p2.Acquire(ctx, clientpool.Charge{Rule: "a", Key: "k", Weight: 1}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third call under the adopted limit 2: err = %v, want a wait past the deadline", err)
	}

	// A key only p2 knows (under its 5): p1, whose limit of a was set by
	// SetLimit, writes it there when it meets the key, and p2 adopts it.
	acquire(t, p2, clientpool.Charge{Rule: "a", Key: "k2", Weight: 1}).Release()
	acquire(t, p1, clientpool.Charge{Rule: "a", Key: "k2", Weight: 1}).Release()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 300*ms)
	defer cancel2()
	if _, err := p2.Acquire(ctx2, clientpool.Charge{Rule: "a", Key: "k2", Weight: 1}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("k2 under the limit p1 set: err = %v, want a wait past the deadline", err)
	}
}

// Weights, rules and keys are checked before Redis: an unknown rule, a
// negative weight, a weight above the rule's limit or its concurrency cap,
// and a sum that overflows fail at once with their own errors even when
// Redis is down.
func TestRedisChecksBeforeRedis(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	table := twoRules(5, 5, time.Minute)
	table.Rules[1].MaxUnitsInFlight = 2
	p := newRedisPool(t, table, c, "chk", clientpool.WithMaxKeys(2))
	held := acquire(t, p, clientpool.Charge{Rule: "a", Key: "k1", Weight: 1}, clientpool.Charge{Rule: "b", Key: "k1", Weight: 1})
	defer held.Release()
	srv.Stop()
	ctx := context.Background()
	for _, tc := range []struct {
		cs   []clientpool.Charge
		want error
	}{
		{[]clientpool.Charge{{Rule: "nope", Weight: 1}}, ratesem.ErrUnknownRule},
		{[]clientpool.Charge{{Rule: "a", Weight: -1}}, ratesem.ErrNegativeWeight},
		{[]clientpool.Charge{{Rule: "a", Weight: math.MinInt64}}, ratesem.ErrNegativeWeight},
		{[]clientpool.Charge{{Rule: "a", Weight: 6}}, ratesem.ErrWeightTooLarge},
		{[]clientpool.Charge{{Rule: "b", Weight: 3}}, ratesem.ErrWeightTooLarge},
		{[]clientpool.Charge{{Rule: "a", Weight: math.MaxInt64}}, ratesem.ErrWeightTooLarge},
		{[]clientpool.Charge{{Rule: "a", Weight: math.MaxInt64}, {Rule: "a", Weight: math.MaxInt64}}, ratesem.ErrWeightTooLarge},
		{[]clientpool.Charge{{Rule: "a", Key: "k2", Weight: 1}}, ratesem.ErrTooManyKeys},
		{manyCharges(redisrate.MaxCharges + 1), ratesem.ErrTooManyCharges},
	} {
		begin := time.Now()
		_, err := p.Acquire(ctx, tc.cs...)
		if !errors.Is(err, tc.want) || errors.Is(err, ratesem.ErrUnavailable) {
			t.Errorf("Acquire(%v) = %v, want %v", tc.cs, err, tc.want)
		}
		if d := time.Since(begin); d > 100*ms {
			t.Errorf("Acquire(%v) took %v: it went to Redis", tc.cs, d)
		}
	}
	// A call Redis must decide fails with ratesem.ErrUnavailable, within a bound.
	begin := time.Now()
	if _, err := p.Acquire(ctx, clientpool.Charge{Rule: "a", Key: "k1", Weight: 1}); !errors.Is(err, ratesem.ErrUnavailable) {
		t.Errorf("Redis down: err = %v, want ratesem.ErrUnavailable", err)
	}
	if d := time.Since(begin); d > 3*time.Second {
		t.Errorf("Redis down: Acquire took %v", d)
	}
}

// New fails for a nil client, an empty prefix and a window without a
// Redis form.
func TestRedisNewErrors(t *testing.T) {
	c := newClient(t, "127.0.0.1:1")
	if _, err := clientpool.New(twoRules(1, 1, time.Second), redisrate.Shared(nil, "x")); err == nil {
		t.Error("nil client: no error")
	}
	if _, err := newRedisPoolErr(t, twoRules(1, 1, time.Second), c, ""); err == nil {
		t.Error("empty prefix: no error")
	}
	table := twoRules(1, 1, time.Second)
	table.Rules[0].Window = func(l window.Limit) window.Policy { return foreignPolicy{window.NewCompletion(l)} }
	if _, err := newRedisPoolErr(t, table, c, "x"); err == nil {
		t.Error("a window of another package: no error")
	} else {
		t.Log(err)
	}
	// Every window of package window has a Redis form.
	for name, mk := range map[string]func(window.Limit) window.Policy{
		"completion":       func(l window.Limit) window.Policy { return window.NewCompletion(l) },
		"fixed-completion": func(l window.Limit) window.Policy { return window.NewFixedCompletion(l) },
		"fixed":            func(l window.Limit) window.Policy { return window.NewFixedWindow(l) },
		"sliding-log":      func(l window.Limit) window.Policy { return window.NewSlidingLog(l, 5*ms) },
		"token-bucket":     func(l window.Limit) window.Policy { return window.NewTokenBucket(l, 3) },
		"gcra":             func(l window.Limit) window.Policy { return window.NewGCRA(l, 2) },
	} {
		table := twoRules(4, 4, time.Second)
		table.Rules[0].Window = mk
		if _, err := newRedisPoolErr(t, table, c, "x", redisrate.WithDeferredChecks()); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// foreignPolicy is a window.Policy of another package.
type foreignPolicy struct{ window.Policy }

// The observer sees the same kinds of Event in Redis mode as in process.
func TestRedisObserver(t *testing.T) {
	c := newClient(t, redistest.Start(t).Addr())
	var mu sync.Mutex
	kinds := map[ratesem.EventKind]int{}
	obs := clientpool.WithObserver(func(e ratesem.Event) {
		mu.Lock()
		kinds[e.Kind]++
		mu.Unlock()
	})
	table := binance.Spot(binance.WithTimeScale(2))
	p := newRedisPool(t, table, c, "ev", obs)
	req, _ := http.NewRequest("GET", "http://x/api/v3/klines", nil)
	cs, _ := p.Classify(req)
	tk := acquire(t, p, cs...)
	h := http.Header{}
	h.Set(binance.HeaderUsedWeight1m, "100")
	tk.ObserveHeaders(h)
	p.Throttled(clientpool.Throttle{Status: 429, RetryAfter: 50 * ms}, tk.Charges())
	tk.Release()
	if err := p.Pause(binance.RuleRawRequests, "", time.Now().Add(10*ms)); err != nil {
		t.Fatal(err)
	}
	// Reconciled reports the units Redis took in: its answer comes in the
	// background and is reported on the next caller's goroutine (a Pause
	// here), as in process an eviction is.
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * ms) {
		mu.Lock()
		n := kinds[ratesem.Reconciled]
		mu.Unlock()
		if n > 0 {
			break
		}
		if err := p.Pause(binance.RuleRawRequests, "", time.Now().Add(ms)); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, k := range []ratesem.EventKind{ratesem.Admitted, ratesem.Reconciled, ratesem.Throttled, ratesem.Paused} {
		if kinds[k] == 0 {
			t.Errorf("no %v event: %v", k, kinds)
		}
	}
}

// Close in process does nothing; in Redis mode later calls fail with
// ratesem.ErrClosed, and a ticket admitted before may still be released.
func TestRedisClose(t *testing.T) {
	in := newPool(t, []clientpool.Rule{ruleN("a", 1, time.Second)})
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	acquire(t, in, clientpool.Charge{Rule: "a", Weight: 1}).Release()

	c := newClient(t, redistest.Start(t).Addr())
	p := newRedisPool(t, twoRules(5, 5, time.Second), c, "close")
	tk := acquire(t, p, clientpool.Charge{Rule: "a", Weight: 1})
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Acquire(context.Background(), clientpool.Charge{Rule: "a", Weight: 1}); !errors.Is(err, ratesem.ErrClosed) {
		t.Fatalf("after Close: err = %v, want ratesem.ErrClosed", err)
	}
	tk.Release()
}

// Hostile keys (binary, 64 KiB long, full of braces and of the prefix's
// separators) and weights (0, the limit) work as any other, each key
// separately, and on a cluster every key of the scope stays in one slot.
func TestRedisHostileKeys(t *testing.T) {
	t.Parallel() // long runs on their own servers: overlap their waits
	for _, cluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "server", true: "cluster"}[cluster], func(t *testing.T) {
			t.Parallel()
			var c goredis.UniversalClient
			if cluster {
				c = startCluster3(t)
			} else {
				c = newClient(t, redistest.Start(t).Addr())
			}
			table := twoRules(2, 2, time.Minute)
			table.Scope = "{scope}}{"
			p1 := newRedisPool(t, table, c, "hostile")
			p2 := newRedisPool(t, table, c, "hostile")
			// A key beyond Redis's 512 bytes is kept under its SHA-256: a
			// short key spelling that name must not share its limiter.
			long := strings.Repeat("L", 513)
			sum := sha256.Sum256([]byte(long))
			posing := "\x00sha256:" + hex.EncodeToString(sum[:])
			keys := []string{"", "\x00", "\xff\xfe", "{", "}", "{}", "}{", "{k}", "a:b", "%7B", "hostile:{scope}:a",
				strings.Repeat("{x}", 1000), strings.Repeat("\x00\xff", 32<<10), long, posing, "\x00sha256:"}
			for _, k := range keys {
				acquire(t, p1, clientpool.Charge{Rule: "a", Key: k, Weight: 0}).Release()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				tk, err := p1.Acquire(ctx, clientpool.Charge{Rule: "a", Key: k, Weight: 2}, clientpool.Charge{Rule: "b", Key: k, Weight: 1})
				cancel()
				if err != nil {
					t.Fatalf("key %q: its whole limit: %v (does it share a limiter with another key?)", trunc(k), err)
				}
				tk.Release()
				// Each key is full now, in every pool, and no other key is.
				ctx, cancel = context.WithTimeout(context.Background(), 100*ms)
				_, err = p2.Acquire(ctx, clientpool.Charge{Rule: "a", Key: k, Weight: 1})
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("key %q: third unit of 2: err = %v", trunc(k), err)
				}
			}
			if cluster {
				checkOneSlot(t, c.(*goredis.ClusterClient), "hostile")
			}
		})
	}
}

func trunc(s string) string {
	if len(s) > 20 {
		return s[:20] + "…"
	}
	return s
}

// Redis restarted mid-run (every key and script lost): calls fail with
// ratesem.ErrUnavailable while it is down, go on when it is back (once the
// lost windows end: orders, under a day's window, fail fast), and the
// calls admitted before and after still hold every rule's window together
// (the lost state is held full for the time it forgets).
func TestRedisRestartMidRun(t *testing.T) {
	t.Parallel() // long runs on their own servers: overlap their waits
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	table := binanceTable()
	var pools []*clientpool.Pool
	for range 2 {
		pools = append(pools, newRedisPool(t, table, c, "restart"))
	}
	var restarted atomic.Bool
	var at time.Time
	calls := fleet{
		pools: pools, goroutines: 3, calls: 30, maxHold: 10 * ms, gen: binanceCalls(t, pools),
		// After the restart the pools find the scope's state lost and
		// hold every rule full until its window ends: an order (under
		// ORDERS_1D, a day: 14 min here) fails at once with ErrDeadline.
		allowed: func(err error) bool {
			return errors.Is(err, ratesem.ErrUnavailable) || errors.Is(err, ratesem.ErrDeadline)
		},
		during: func(i int) {
			if i == 10 && !restarted.Swap(true) {
				srv.Stop()
				// A call on a key no one waits on goes to Redis at once and
				// finds it down.
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := pools[1].Acquire(ctx, clientpool.Charge{Rule: binance.RuleOrders10s, Key: "probe", Weight: 1})
				cancel()
				if !errors.Is(err, ratesem.ErrUnavailable) {
					t.Errorf("Redis down: err = %v, want ratesem.ErrUnavailable", err)
				}
				time.Sleep(800 * ms) // longer than a window of REQUEST_WEIGHT
				srv.Start()
				at = time.Now()
				// This goroutine's calls left come after the prober found
				// Redis back (its probes are at most a second apart); the
				// other goroutines' may all fail fast while it is down.
				time.Sleep(1200 * ms)
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
	t.Logf("%d calls, %d failed (Redis down), %d admitted after the restart", len(calls), failed, after)
	if after == 0 {
		t.Fatal("no call admitted after the restart")
	}
}

// SCRIPT FLUSH mid-run: not one call fails, and the windows hold.
func TestRedisScriptFlushMidRun(t *testing.T) {
	t.Parallel() // long runs on their own servers: overlap their waits
	t.Run("server", func(t *testing.T) { t.Parallel(); runScriptFlush(t, newClient(t, redistest.Start(t).Addr())) })
	t.Run("cluster", func(t *testing.T) { t.Parallel(); runScriptFlush(t, startCluster3(t)) })
}

func runScriptFlush(t *testing.T, c goredis.UniversalClient) {
	table := binanceTable()
	var pools []*clientpool.Pool
	for range 2 {
		pools = append(pools, newRedisPool(t, table, c, "flush"))
	}
	calls := fleet{
		pools: pools, goroutines: 3, calls: 20, maxHold: 10 * ms, gen: binanceCalls(t, pools),
		during: func(i int) {
			if i%5 == 4 {
				if err := c.ScriptFlush(context.Background()).Err(); err != nil {
					t.Error(err)
				}
			}
		},
	}.run(t)
	checkBinance(t, table, calls)
}

// A hostile Retry-After of an hour pauses the fleet no longer than
// WithMaxPause, and Pause itself is capped the same way in Redis mode.
func TestRedisMaxPause(t *testing.T) {
	c := newClient(t, redistest.Start(t).Addr())
	table := twoRules(100, 100, time.Second)
	p1 := newRedisPool(t, table, c, "maxpause", clientpool.WithMaxPause(300*ms))
	p2 := newRedisPool(t, table, c, "maxpause", clientpool.WithMaxPause(300*ms))
	for _, pause := range []func(){
		func() {
			p1.Throttled(clientpool.Throttle{Status: 429, RetryAfter: time.Hour}, []clientpool.Charge{{Rule: "a", Key: "k", Weight: 1}})
		},
		func() {
			if err := p1.Pause("a", "k", time.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
		},
	} {
		begin := time.Now()
		pause()
		for landed := false; !landed; { // the pause reaches Redis in the background
			ctx, cancel := context.WithTimeout(context.Background(), 30*ms)
			tk, err := p2.Acquire(ctx, clientpool.Charge{Rule: "a", Key: "k", Weight: 1})
			cancel()
			if landed = err != nil; !landed {
				tk.Release()
				if time.Since(begin) > 250*ms {
					t.Fatal("the pause never reached the other pool")
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		tk, err := p2.Acquire(ctx, clientpool.Charge{Rule: "a", Key: "k", Weight: 1})
		cancel()
		if err != nil {
			t.Fatalf("after a capped pause: %v", err)
		}
		tk.Release()
		if d := time.Since(begin); d > time.Second {
			t.Fatalf("paused for %v, want at most about 300ms", d)
		}
		for _, ks := range p1.Snapshot() {
			if ks.Rule == "a" && ks.Key == "k" && ks.PausedUntil.After(begin.Add(time.Second)) {
				t.Fatalf("local pause until %v, want capped", ks.PausedUntil)
			}
		}
	}
}

// Snapshot and Len say what this process knows in Redis mode: its own
// units in flight per key, no window count (Used -1), the keys it used.
func TestRedisSnapshot(t *testing.T) {
	c := newClient(t, redistest.Start(t).Addr())
	p1 := newRedisPool(t, twoRules(5, 5, time.Second), c, "snap")
	p2 := newRedisPool(t, twoRules(5, 5, time.Second), c, "snap")
	tk := acquire(t, p1, clientpool.Charge{Rule: "a", Key: "x", Weight: 3}, clientpool.Charge{Rule: "b", Weight: 1})
	acquire(t, p2, clientpool.Charge{Rule: "a", Key: "x", Weight: 1}).Release()
	want := []clientpool.KeyState{{Rule: "a", Key: "x", InFlight: 3, Used: -1, Limit: window.Limit{N: 5, Per: time.Second}}, {Rule: "b", InFlight: 1, Used: -1, Limit: window.Limit{N: 5, Per: time.Second}}}
	if got := p1.Snapshot(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Snapshot = %v, want %v", got, want)
	}
	if p1.Len() != 2 || p2.Len() != 1 {
		t.Fatalf("Len = %d, %d, want 2, 1", p1.Len(), p2.Len())
	}
	tk.Release()
	for _, ks := range p1.Snapshot() {
		if ks.InFlight != 0 {
			t.Fatalf("%+v after Release", ks)
		}
	}
	if l, ok := p1.Limit("a"); !ok || l != (window.Limit{N: 5, Per: time.Second}) {
		t.Fatalf("Limit = %v, %v", l, ok)
	}
}

// manyCharges returns n charges of one unit on distinct keys of rule a.
func manyCharges(n int) []clientpool.Charge {
	cs := make([]clientpool.Charge, n)
	for i := range cs {
		cs[i] = clientpool.Charge{Rule: "a", Key: fmt.Sprint(i), Weight: 1}
	}
	return cs
}

// Throttled picks its targets as in process (Binance's -1015 names
// the account's ORDERS_10S alone) and pauses them in every Pool: another
// Pool's order on that account waits, its klines on the IP do not.
func TestRedisThrottledTargets(t *testing.T) {
	c := newClient(t, redistest.Start(t).Addr())
	table := binance.Spot()
	p1 := newRedisPool(t, table, c, "target")
	p2 := newRedisPool(t, table, c, "target")
	order, _ := http.NewRequest("POST", "http://x/api/v3/order", nil)
	order.Header.Set(binance.HeaderAPIKey, "acct")
	ocs, err := p1.Classify(order)
	if err != nil {
		t.Fatal(err)
	}
	tk := acquire(t, p1, ocs...)
	p1.Throttled(clientpool.Throttle{Status: 429, Body: []byte(`{"code":-1015,"msg":"Too many new orders."}`), RetryAfter: 5 * time.Second}, tk.Charges())
	tk.Release()
	if err := untilRefused(p2, 100*ms, 2*time.Second, ocs...); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the -1015 did not pause the other pool's orders: %v", err)
	}
	klines, _ := http.NewRequest("GET", "http://x/api/v3/klines", nil)
	kcs, _ := p2.Classify(klines)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	tk3, err := p2.Acquire(ctx, kcs...)
	if err != nil {
		t.Fatalf("klines on the IP after a -1015: %v", err)
	}
	tk3.Release()
}

// The Binance preset maps to Redis at Binance's real windows and at time
// scales whose windows are whole microseconds; at one whose aren't, New
// says which rule cannot be kept in Redis.
func TestRedisPresetWindows(t *testing.T) {
	c := newClient(t, redistest.Start(t).Addr())
	for _, table := range []clientpool.Table{binance.Spot(), binance.Spot(binance.WithTimeScale(20)), okx.Table(), okx.Table(okx.WithTimeScale(10))} {
		newRedisPool(t, table, c, "presets")
	}
	_, err := newRedisPoolErr(t, binance.Spot(binance.WithTimeScale(60)), c, "presets60") // 10 s / 60 is not whole µs
	if !errors.Is(err, rstore.ErrSpec) {
		t.Fatalf("scale 60: err = %v, want one matching rstore.ErrSpec", err)
	}
	t.Log(err)
	// SetLimit to a limit Redis cannot keep fails, and changes nothing.
	p := newRedisPool(t, twoRules(5, 5, time.Second), c, "presets")
	if err := p.SetLimit("a", window.Limit{N: 1 << 41, Per: time.Second}); !errors.Is(err, rstore.ErrSpec) {
		t.Fatalf("SetLimit(N 2^41): err = %v, want one matching rstore.ErrSpec", err)
	}
	if l, _ := p.Limit("a"); l.N != 5 {
		t.Fatalf("Limit after a failed SetLimit = %v", l)
	}
}

// Rule.Concurrency caps the units in flight per key across the fleet.
func TestRedisConcurrencyAcrossPools(t *testing.T) {
	c := newClient(t, redistest.Start(t).Addr())
	table := twoRules(100, 100, time.Second)
	table.Rules[0].MaxUnitsInFlight = 2
	p1 := newRedisPool(t, table, c, "conc")
	p2 := newRedisPool(t, table, c, "conc")
	ch := clientpool.Charge{Rule: "a", Key: "k", Weight: 1}
	t1, t2 := acquire(t, p1, ch), acquire(t, p2, ch)
	ctx, cancel := context.WithTimeout(context.Background(), 200*ms)
	_, err := p1.Acquire(ctx, ch)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third call in flight under a cap of 2: err = %v", err)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		tk, err := p2.Acquire(ctx, ch)
		if err == nil {
			tk.Release()
		}
		done <- err
	}()
	t1.Release() // room in flight, in another pool
	if err := <-done; err != nil {
		t.Fatalf("after a release elsewhere: %v", err)
	}
	t2.Release()
}

// SetLimit below a waiter's weight in one Pool: the waiter in another Pool
// fails with ErrWeightTooLarge at its next round trip (a head refused by a
// call in flight asks again within a quarter of Per: 500 ms here) rather
// than wait out its deadline.
func TestRedisSetLimitBelowWaiter(t *testing.T) {
	c := newClient(t, redistest.Start(t).Addr())
	p1 := newRedisPool(t, twoRules(5, 5, 2*time.Second), c, "below")
	p2 := newRedisPool(t, twoRules(5, 5, 2*time.Second), c, "below")
	full := acquire(t, p1, clientpool.Charge{Rule: "a", Key: "k", Weight: 5})
	defer full.Release()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := p2.Acquire(ctx, clientpool.Charge{Rule: "a", Key: "k", Weight: 4})
		done <- err
	}()
	time.Sleep(50 * ms)
	if err := p1.SetLimit("a", window.Limit{N: 2, Per: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	err := <-done
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the waiter failed after %v, want within Per/4 of SetLimit (plus jitter)", d)
	}
	if !errors.Is(err, ratesem.ErrWeightTooLarge) {
		t.Fatalf("err = %v, want ratesem.ErrWeightTooLarge", err)
	}
}

// Hostile usage counts in Redis mode: a count beyond int64 reads as "full
// until the window moves" in every Pool, never longer; a negative or
// malformed one changes nothing. Pool.Reconcile does the same as
// ObserveHeaders.
func TestRedisHostileUsage(t *testing.T) {
	c := newClient(t, redistest.Start(t).Addr())
	table := binance.Spot(binance.WithTimeScale(100)) // REQUEST_WEIGHT: 6000 per 600 ms
	p1 := newRedisPool(t, table, c, "usage")
	p2 := newRedisPool(t, table, c, "usage")
	weight := clientpool.Charge{Rule: binance.RuleRequestWeight, Weight: 1}
	for _, v := range []string{"-5", "12abc", "", "+7"} {
		tk := acquire(t, p1, weight)
		h := http.Header{}
		h.Set(binance.HeaderUsedWeight1m, v)
		tk.ObserveHeaders(h)
		tk.Release()
		if err := p1.Reconcile(binance.RuleRequestWeight, "", -1); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * ms) // the reports reach Redis in the background
	ctx, cancel := context.WithTimeout(context.Background(), 50*ms)
	tk, err := p2.Acquire(ctx, clientpool.Charge{Rule: binance.RuleRequestWeight, Weight: 5000})
	cancel()
	if err != nil {
		t.Fatalf("after negative and malformed counts: %v", err)
	}
	tk.Release()

	for _, report := range []func(){
		func() {
			tk := acquire(t, p1, weight)
			h := http.Header{}
			h.Set(binance.HeaderUsedWeight1m, "99999999999999999999999")
			tk.ObserveHeaders(h)
			tk.Release()
		},
		func() {
			if err := p1.Reconcile(binance.RuleRequestWeight, "", math.MaxInt64); err != nil {
				t.Fatal(err)
			}
		},
	} {
		// Wait for the report to land: a call must then wait. A usage
		// report of a call admitted in one window that reaches Redis in the
		// next is dropped by design (its count may be the earlier
		// window's); with 600 ms windows a try can straddle a boundary, so
		// it gets three tries of over a window each.
		var begin time.Time
		tightened := false
		for try := 0; try < 3 && !tightened; try++ {
			report()
			begin = time.Now()
			tightened = untilRefused(p2, 20*ms, time.Second, weight) != errNeverRefused
		}
		if !tightened {
			t.Fatal("a count beyond int64 never tightened the other pool")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		tk, err := p2.Acquire(ctx, weight)
		cancel()
		if err != nil {
			t.Fatalf("after a count beyond int64: %v (it must last until the window moves, not longer)", err)
		}
		tk.Release()
		if d := time.Since(begin); d > 2*time.Second {
			t.Fatalf("held %v after a count beyond int64, want at most about a 600 ms window", d)
		}
	}
}

// errNeverRefused is untilRefused's error when every call was admitted.
var errNeverRefused = errors.New("every call was admitted")

// untilRefused acquires charges from p, each try bounded by wait, and
// releases them, until a try fails (something written to Redis in the
// background has landed) or give has passed. It returns the failing try's
// error, or errNeverRefused.
func untilRefused(p *clientpool.Pool, wait, give time.Duration, charges ...clientpool.Charge) error {
	for begin := time.Now(); time.Since(begin) <= give; time.Sleep(5 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		tk, err := p.Acquire(ctx, charges...)
		cancel()
		if err != nil {
			return err
		}
		tk.Release()
	}
	return errNeverRefused
}
