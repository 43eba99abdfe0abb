package clientpool_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/window"
)

const ms = time.Millisecond

func ruleN(name string, n int64, per time.Duration) clientpool.Rule {
	return clientpool.Rule{Name: name, Limit: window.Limit{N: n, Per: per}}
}

func newPool(t *testing.T, rules []clientpool.Rule, opts ...clientpool.Option) *clientpool.Pool {
	t.Helper()
	p, err := clientpool.New(clientpool.Table{Rules: rules}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func acquire(t *testing.T, p *clientpool.Pool, cs ...clientpool.Charge) *clientpool.Ticket {
	t.Helper()
	tk, err := p.Acquire(context.Background(), cs...)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// call is one call of the multi-rule property test.
type call struct {
	charges    []clientpool.Charge
	arrive     time.Duration
	hold       time.Duration
	cancelAt   time.Duration // 0: never
	ok         bool
	start, end time.Duration
}

// TestMultiRuleProperty: random calls falling under random subsets of three
// rules (completion windows, several keys each) with random weights, holds,
// arrivals and cancellations, on virtual time; at every start, for every
// rule and key, units in flight + units of calls that ended within Per ≤ N.
func TestMultiRuleProperty(t *testing.T) {
	rules := []clientpool.Rule{
		ruleN("ip", 10, time.Second),
		ruleN("account", 6, 500*ms),
		ruleN("instrument", 3, 300*ms),
	}
	for seed := range uint64(8) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			runMultiRule(t, rules, multiRule{
				seed: seed, stream: 5, calls: 600, maxGap: 20 * ms, maxHold: 100 * ms,
				cancelOneIn: 10, maxCancel: 500 * ms, skipOneIn: 2, keys: 3,
			})
		})
	}
}

// multiRule is the shape of one run of the multi-rule property test.
type multiRule struct {
	seed, stream    uint64        // of the PCG random source
	calls           int           // calls in the run
	maxGap, maxHold time.Duration // arrival gaps in [0, maxGap), holds in [1ms, maxHold]
	cancelOneIn     int           // one call in cancelOneIn has a deadline in [1ms, maxCancel]
	maxCancel       time.Duration
	skipOneIn       int // a call skips each rule with probability 1/skipOneIn
	keys            int // keys per keyed rule ("ip" is unkeyed)
	throttleOneIn   int // one admitted call in throttleOneIn reports a throttle without Retry-After; 0: none
	opts            []clientpool.Option
}

// runMultiRule runs m on virtual time and checks, over every recorded start
// and end, that no rule's window was exceeded, that every call ended
// (admitted, cancelled or failed early) and that nothing stays in flight.
func runMultiRule(t *testing.T, rules []clientpool.Rule, m multiRule) {
	t.Helper()
	var calls []call
	synctest.Test(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(m.seed, m.stream))
		p := newPool(t, rules, m.opts...)
		calls = make([]call, m.calls)
		var arrive time.Duration
		for i := range calls {
			c := &calls[i]
			arrive += time.Duration(rng.IntN(int(m.maxGap/ms))) * ms
			c.arrive = arrive
			c.hold = time.Duration(1+rng.IntN(int(m.maxHold/ms))) * ms
			if rng.IntN(m.cancelOneIn) == 0 {
				c.cancelAt = time.Duration(1+rng.IntN(int(m.maxCancel/ms))) * ms
			}
			for _, r := range rules {
				if rng.IntN(m.skipOneIn) == 0 {
					continue
				}
				key := fmt.Sprint("k", rng.IntN(m.keys))
				if r.Name == "ip" {
					key = ""
				}
				c.charges = append(c.charges, clientpool.Charge{Rule: r.Name, Key: key, Weight: 1 + rng.Int64N(r.Limit.N)})
			}
		}
		begin := time.Now()
		var wg sync.WaitGroup
		for i := range calls {
			c := &calls[i]
			throttle := m.throttleOneIn > 0 && rng.IntN(m.throttleOneIn) == 0
			wg.Go(func() {
				time.Sleep(c.arrive)
				ctx := context.Background()
				if c.cancelAt > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, c.cancelAt)
					defer cancel()
				}
				tk, err := p.Acquire(ctx, c.charges...)
				if err != nil {
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("Acquire: %v", err)
					}
					return
				}
				c.ok, c.start = true, time.Since(begin)
				if throttle {
					p.Throttled(clientpool.Throttle{Status: 429}, tk.Charges())
				}
				time.Sleep(c.hold)
				c.end = time.Since(begin)
				tk.Release()
			})
		}
		wg.Wait()
		for _, ks := range p.Snapshot() {
			if ks.InFlight != 0 {
				t.Fatalf("%s[%s]: %d units still in flight after every call ended", ks.Rule, ks.Key, ks.InFlight)
			}
		}
	})
	checkWindows(t, rules, calls)
}

func checkWindows(t *testing.T, rules []clientpool.Rule, calls []call) {
	t.Helper()
	limits := map[string]window.Limit{}
	for _, r := range rules {
		limits[r.Name] = r.Limit
	}
	ok, failed := 0, 0
	for _, ci := range calls {
		if !ci.ok {
			failed++
			continue
		}
		ok++
		for _, ch := range ci.charges {
			l := limits[ch.Rule]
			var used int64
			for _, cj := range calls {
				if !cj.ok || cj.start > ci.start || cj.end+l.Per <= ci.start {
					continue // not yet started, or ended before the window
				}
				for _, ch2 := range cj.charges {
					if ch2.Rule == ch.Rule && ch2.Key == ch.Key {
						used += ch2.Weight
					}
				}
			}
			if used > l.N {
				t.Fatalf("at %v, %s[%s]: %d units in flight or ended within %v > %d", ci.start, ch.Rule, ch.Key, used, l.Per, l.N)
			}
		}
	}
	if ok < len(calls)/2 || failed == 0 {
		t.Fatalf("%d calls admitted, %d cancelled: the test should mix both", ok, failed)
	}
}

// TestNoDeadlock: goroutines take overlapping rule sets in opposite orders,
// with cancellations, in real time; all of them finish.
func TestNoDeadlock(t *testing.T) {
	rules := []clientpool.Rule{ruleN("a", 2, 5*ms), ruleN("b", 2, 5*ms), ruleN("c", 3, 5*ms)}
	p := newPool(t, rules)
	sets := [][]string{{"a", "b"}, {"b", "a"}, {"b", "c"}, {"c", "a", "b"}, {"a"}, {"c", "b"}}
	var wg sync.WaitGroup
	for g := range 24 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 40 {
				set := sets[rng.IntN(len(sets))]
				var cs []clientpool.Charge
				for _, r := range set {
					cs = append(cs, clientpool.Charge{Rule: r, Weight: 1 + rng.Int64N(2)})
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(20))*ms)
				tk, err := p.Acquire(ctx, cs...)
				cancel()
				if err == nil {
					runtime.Gosched()
					tk.Release()
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("deadlock: goroutines still waiting after 60s")
	}
	for _, ks := range p.Snapshot() {
		if ks.InFlight != 0 {
			t.Fatalf("%s[%s]: %d units in flight after all released", ks.Rule, ks.Key, ks.InFlight)
		}
	}
}

// A call that waits on one rule takes nothing from the others meanwhile: a
// call on the free rule alone goes at once, and the waiting call, when
// admitted, finds the free rule's capacity untouched by its wait.
func TestNoCapacityBurnedWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{ruleN("ip", 2, time.Second), ruleN("order", 1, time.Second)})
		hold := acquire(t, p, clientpool.Charge{Rule: "order", Weight: 1})
		admitted := make(chan time.Time)
		go func() {
			tk := acquire(t, p, clientpool.Charge{Rule: "ip", Weight: 1}, clientpool.Charge{Rule: "order", Weight: 1})
			admitted <- time.Now()
			tk.Release()
		}()
		synctest.Wait()
		// The waiting call holds no ip unit: both ip units are free.
		a := acquire(t, p, clientpool.Charge{Rule: "ip", Weight: 2})
		a.Release()
		begin := time.Now()
		time.Sleep(10 * ms)
		hold.Release() // order free again 1s after this end
		if got := (<-admitted).Sub(begin); got != 10*ms+time.Second {
			t.Fatalf("the call waiting on order was admitted after %v, want %v", got, 10*ms+time.Second)
		}
	})
}

// A cancelled call leaves no trace in any rule: the call behind it is
// admitted exactly when it would have been without it.
func TestCancelLeavesNoTrace(t *testing.T) {
	run := func(withCancelled bool) time.Duration {
		var d time.Duration
		synctest.Test(t, func(t *testing.T) {
			p := newPool(t, []clientpool.Rule{ruleN("ip", 3, time.Second), ruleN("order", 1, time.Second)})
			begin := time.Now()
			first := acquire(t, p, clientpool.Charge{Rule: "order", Weight: 1}, clientpool.Charge{Rule: "ip", Weight: 1})
			time.Sleep(5 * ms)
			first.Release()
			if withCancelled {
				ctx, cancel := context.WithCancel(context.Background())
				errc := make(chan error)
				go func() {
					_, err := p.Acquire(ctx, clientpool.Charge{Rule: "ip", Weight: 1}, clientpool.Charge{Rule: "order", Weight: 1})
					errc <- err
				}()
				synctest.Wait()
				cancel()
				if err := <-errc; !errors.Is(err, context.Canceled) {
					t.Fatalf("cancelled Acquire = %v", err)
				}
			}
			tk := acquire(t, p, clientpool.Charge{Rule: "order", Weight: 1}, clientpool.Charge{Rule: "ip", Weight: 2})
			d = time.Since(begin)
			tk.Release()
		})
		return d
	}
	if with, without := run(true), run(false); with != without {
		t.Fatalf("admitted at %v behind a cancelled call, %v without it", with, without)
	}
}

// Pause by key: a pause of one instrument's key holds only that key.
func TestPauseByKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{ruleN("instrument", 10, time.Second), ruleN("account", 100, time.Second)})
		if err := p.Pause("instrument", "BTC-USDT", time.Now().Add(5*time.Second)); err != nil {
			t.Fatal(err)
		}
		begin := time.Now()
		eth := acquire(t, p, clientpool.Charge{Rule: "instrument", Key: "ETH-USDT", Weight: 1}, clientpool.Charge{Rule: "account", Weight: 1})
		if d := time.Since(begin); d != 0 {
			t.Fatalf("another instrument waited %v under BTC's pause", d)
		}
		eth.Release()
		btc := acquire(t, p, clientpool.Charge{Rule: "instrument", Key: "BTC-USDT", Weight: 1}, clientpool.Charge{Rule: "account", Weight: 1})
		if d := time.Since(begin); d != 5*time.Second {
			t.Fatalf("the paused instrument started after %v, want 5s", d)
		}
		btc.Release()
		if err := p.Pause("nope", "", time.Now().Add(time.Second)); !errors.Is(err, ratesem.ErrUnknownRule) {
			t.Fatalf("Pause of an unknown rule: %v", err)
		}
	})
}

// Throttled pauses the rules marked PauseOnThrottle, by key, and not the
// others.
func TestThrottledPausesMarkedRules(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inst := ruleN("instrument", 10, time.Second)
		inst.PauseOnThrottle = true
		p := newPool(t, []clientpool.Rule{inst, ruleN("account", 100, time.Second)})
		cs := []clientpool.Charge{{Rule: "instrument", Key: "BTC", Weight: 1}, {Rule: "account", Weight: 1}}
		p.Throttled(clientpool.Throttle{Status: http.StatusTooManyRequests, RetryAfter: 2 * time.Second}, cs)
		for _, ks := range p.Snapshot() {
			paused := !ks.PausedUntil.IsZero()
			if want := ks.Rule == "instrument"; paused != want {
				t.Fatalf("%s[%s] paused = %v, want %v", ks.Rule, ks.Key, paused, want)
			}
		}
	})
}

// Idle keys are evicted after the idle time (and after their window has
// forgotten every call); a key in use is never evicted.
func TestEviction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{ruleN("user", 5, time.Second)}, clientpool.WithIdleTimeout(time.Minute))
		var held *clientpool.Ticket
		for i := range 1000 {
			tk := acquire(t, p, clientpool.Charge{Rule: "user", Key: fmt.Sprint("u", i), Weight: 1})
			if i == 0 {
				held = tk
				continue
			}
			tk.Release()
		}
		if p.Len() != 1000 {
			t.Fatalf("Len = %d after 1000 keys", p.Len())
		}
		time.Sleep(2 * time.Minute)
		// Eviction is incremental: a few keys per Acquire.
		for range 1000/4 + 1 {
			acquire(t, p, clientpool.Charge{Rule: "user", Key: "fresh", Weight: 1}).Release()
		}
		if got := p.Len(); got != 2 {
			t.Fatalf("Len = %d after the idle time; want 2 (the key in use and the fresh one)", got)
		}
		held.Release()
		// The released key's window still counts it for 1s: not evicted
		// before the idle time passes again.
		time.Sleep(30 * time.Second)
		acquire(t, p, clientpool.Charge{Rule: "user", Key: "fresh", Weight: 1}).Release()
		if got := p.Len(); got != 2 {
			t.Fatalf("Len = %d 30s after the last release; want 2", got)
		}
		time.Sleep(2 * time.Minute)
		acquire(t, p, clientpool.Charge{Rule: "user", Key: "last", Weight: 1}).Release()
		acquire(t, p, clientpool.Charge{Rule: "user", Key: "last", Weight: 1}).Release()
		if got := p.Len(); got != 1 {
			t.Fatalf("Len = %d after everything idled; want 1", got)
		}
	})
}

// SetLimit changes a rule for every key at run time, keeping the accounting.
func TestSetLimitKeepsAccounting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{ruleN("ip", 4, time.Second)})
		acquire(t, p, clientpool.Charge{Rule: "ip", Weight: 3}).Release()
		if err := p.SetLimit("ip", window.Limit{N: 3, Per: time.Second}); err != nil {
			t.Fatal(err)
		}
		begin := time.Now()
		acquire(t, p, clientpool.Charge{Rule: "ip", Weight: 1}).Release()
		if d := time.Since(begin); d != time.Second {
			t.Fatalf("admitted %v after lowering the limit to what was used; want 1s", d)
		}
		if _, err := p.Acquire(context.Background(), clientpool.Charge{Rule: "ip", Weight: 4}); !errors.Is(err, ratesem.ErrWeightTooLarge) {
			t.Fatalf("weight 4 under 3: %v", err)
		}
		if err := p.SetLimit("ip", window.Limit{}); err == nil {
			t.Fatal("SetLimit to a zero limit accepted")
		}
	})
}

func TestInvalidInput(t *testing.T) {
	for _, tc := range []struct {
		name  string
		table clientpool.Table
	}{
		{"no name", clientpool.Table{Rules: []clientpool.Rule{ruleN("", 1, time.Second)}}},
		{"zero N", clientpool.Table{Rules: []clientpool.Rule{ruleN("a", 0, time.Second)}}},
		{"zero Per", clientpool.Table{Rules: []clientpool.Rule{ruleN("a", 1, 0)}}},
		{"duplicate", clientpool.Table{Rules: []clientpool.Rule{ruleN("a", 1, time.Second), ruleN("a", 2, time.Second)}}},
		{"duplicate endpoint", clientpool.Table{Rules: []clientpool.Rule{ruleN("a", 1, time.Second)},
			Endpoints: []clientpool.Endpoint{{Path: "/x"}, {Path: "/x"}}}},
		{"unknown rule in endpoint", clientpool.Table{Rules: []clientpool.Rule{ruleN("a", 1, time.Second)},
			Endpoints: []clientpool.Endpoint{{Path: "/x", Costs: []clientpool.Cost{{Rule: "b"}}}}}},
	} {
		if _, err := clientpool.New(tc.table); err == nil {
			t.Errorf("%s: New accepted it", tc.name)
		}
	}
	p := newPool(t, []clientpool.Rule{ruleN("a", 2, time.Second)})
	ctx := context.Background()
	if _, err := p.Acquire(ctx, clientpool.Charge{Rule: "b", Weight: 1}); !errors.Is(err, ratesem.ErrUnknownRule) {
		t.Errorf("unknown rule: %v", err)
	}
	if _, err := p.Acquire(ctx, clientpool.Charge{Rule: "a", Weight: 3}); !errors.Is(err, ratesem.ErrWeightTooLarge) {
		t.Errorf("weight 3 under 2: %v", err)
	}
	if _, err := p.Acquire(ctx, clientpool.Charge{Rule: "a", Weight: 2}, clientpool.Charge{Rule: "a", Weight: 1}); !errors.Is(err, ratesem.ErrWeightTooLarge) {
		t.Errorf("2+1 on one key under 2: %v", err)
	}
	if _, err := p.Acquire(ctx, clientpool.Charge{Rule: "a", Weight: -1}); err == nil {
		t.Error("negative weight accepted")
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := p.Acquire(done, clientpool.Charge{Rule: "a", Weight: 1}); !errors.Is(err, context.Canceled) {
		t.Errorf("done context: %v", err)
	}
	tk := acquire(t, p)
	tk.Release()
	defer func() {
		if recover() == nil {
			t.Error("a second Release did not panic")
		}
	}()
	tk.Release()
}

// FIFO per limiter: a heavy call refused by a rule is not starved by a
// stream of light calls on the same rule and key that arrive after it.
func TestHeavyCallNotStarved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{ruleN("ip", 4, time.Second)})
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		var wg sync.WaitGroup
		wg.Go(func() { // a light call every 100ms, each held 10ms
			for ctx.Err() == nil {
				go func() {
					if tk, err := p.Acquire(ctx, clientpool.Charge{Rule: "ip", Weight: 1}); err == nil {
						time.Sleep(10 * ms)
						tk.Release()
					}
				}()
				time.Sleep(100 * ms)
			}
		})
		time.Sleep(550 * ms)
		begin := time.Now()
		heavyCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		tk, err := p.Acquire(heavyCtx, clientpool.Charge{Rule: "ip", Weight: 4})
		if err != nil {
			t.Fatalf("the heavy call was starved by lighter later calls: %v after %v", err, time.Since(begin))
		}
		if d := time.Since(begin); d > 2*time.Second {
			t.Fatalf("the heavy call waited %v behind lighter later calls", d)
		}
		tk.Release()
		stop()
		wg.Wait()
	})
}

// canceledAfter returns a context that is done at once after one try: an
// Acquire on it reports whether the call could start now.
func canceledAfter(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	t.Cleanup(cancel)
	return ctx
}

// After the idle time the evicted keys' memory returns to the heap.
func TestEvictionReturnsMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{ruleN("user", 5, time.Second)}, clientpool.WithIdleTimeout(time.Minute))
		heap := func() uint64 {
			runtime.GC()
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			return m.HeapAlloc
		}
		before := heap()
		for i := range 50_000 {
			acquire(t, p, clientpool.Charge{Rule: "user", Key: fmt.Sprint("u", i), Weight: 1}).Release()
		}
		grown := heap()
		time.Sleep(2 * time.Minute)
		for range 50_000/4 + 1 { // eviction is incremental: a few keys per Acquire
			acquire(t, p, clientpool.Charge{Rule: "user", Key: "fresh", Weight: 1}).Release()
		}
		after := heap()
		if p.Len() != 1 {
			t.Fatalf("Len = %d after the idle time", p.Len())
		}
		if grown <= before || after > before+(grown-before)/5 {
			t.Fatalf("heap %d B before, %d B with 50k keys, %d B after eviction: want most of the growth back", before, grown, after)
		}
	})
}

// A call waiting on its own instrument's limit does not leave a shared rule
// idle: C waits on x's limit (1 per 4 s); D on another instrument needs only
// the sub-account rule, which has room again at 2 s, and goes then.
func TestNoHeadOfLineAcrossRules(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{ruleN("inst", 1, 4*time.Second), ruleN("sub", 2, 2*time.Second)})
		begin := time.Now()
		on := func(inst string) []clientpool.Charge {
			return []clientpool.Charge{{Rule: "inst", Key: inst, Weight: 1}, {Rule: "sub", Weight: 1}}
		}
		acquire(t, p, on("x")...).Release() // A
		acquire(t, p, on("y")...).Release() // B: sub full until 2s
		cAt := make(chan time.Duration)
		go func() { acquire(t, p, on("x")...).Release(); cAt <- time.Since(begin) }() // C: x full until 4s
		synctest.Wait()
		acquire(t, p, on("z")...).Release() // D
		if d := time.Since(begin); d != 2*time.Second {
			t.Fatalf("D went at %v; the sub-account rule had room at 2s while C waited on x", d)
		}
		if d := <-cAt; d != 4*time.Second {
			t.Fatalf("C went at %v, want 4s", d)
		}
	})
}
