package clientpool_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/window"
)

// Waiters on many keys, each key free again at its own instant, are each
// admitted exactly at that instant (the heap of wake instants and the one
// timer), in any order of arrival.
func TestWakeInstantsPerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{ruleN("k", 1, time.Second)})
		begin := time.Now()
		const keys = 200
		// Key i's only unit ends at i ms: it is free again at 1s + i ms.
		var wg sync.WaitGroup
		for i := range keys {
			key := fmt.Sprint(i)
			wg.Go(func() {
				tk := acquire(t, p, clientpool.Charge{Rule: "k", Key: key, Weight: 1})
				time.Sleep(time.Duration(i) * time.Millisecond)
				tk.Release()
			})
		}
		wg.Wait()
		got := make([]time.Duration, keys)
		for i := keys - 1; i >= 0; i-- { // arrive in reverse order
			key := fmt.Sprint(i)
			wg.Go(func() {
				acquire(t, p, clientpool.Charge{Rule: "k", Key: key, Weight: 1}).Release()
				got[i] = time.Since(begin)
			})
		}
		wg.Wait()
		for i, d := range got {
			if want := time.Second + time.Duration(i)*time.Millisecond; d != want {
				t.Fatalf("key %d admitted at %v, want %v", i, d, want)
			}
		}
	})
}

// A waiter whose admission comes after its deadline fails at once with
// ratesem.ErrDeadline (and context.DeadlineExceeded), and leaves no trace.
func TestDeadlineFailFast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{ruleN("a", 1, time.Second), ruleN("b", 5, time.Second)})
		acquire(t, p, clientpool.Charge{Rule: "a", Weight: 1}).Release()
		begin := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 500*ms)
		defer cancel()
		_, err := p.Acquire(ctx, clientpool.Charge{Rule: "b", Weight: 1}, clientpool.Charge{Rule: "a", Weight: 1})
		if !errors.Is(err, ratesem.ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want ratesem.ErrDeadline and DeadlineExceeded", err)
		}
		if d := time.Since(begin); d != 0 {
			t.Fatalf("failed after %v, want at once", d)
		}
		acquire(t, p, clientpool.Charge{Rule: "b", Weight: 5}).Release() // b untouched
	})
}

// SetLimit fails the waiters too heavy for the new limit at once, and
// admits those a raised limit lets through.
func TestSetLimitWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{ruleN("a", 4, time.Hour), ruleN("b", 10, time.Hour)})
		acquire(t, p, clientpool.Charge{Rule: "a", Weight: 4}).Release()
		heavy := make(chan error, 1)
		go func() {
			_, err := p.Acquire(context.Background(), clientpool.Charge{Rule: "b", Weight: 1}, clientpool.Charge{Rule: "a", Weight: 3})
			heavy <- err
		}()
		light := make(chan time.Duration, 1)
		begin := time.Now()
		go func() {
			acquire(t, p, clientpool.Charge{Rule: "a", Key: "other", Weight: 1}).Release()
			acquire(t, p, clientpool.Charge{Rule: "a", Weight: 1}).Release()
			light <- time.Since(begin)
		}()
		synctest.Wait()
		if err := p.SetLimit("a", window.Limit{N: 2, Per: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if err := <-heavy; !errors.Is(err, ratesem.ErrWeightTooLarge) {
			t.Fatalf("waiter of weight 3 after SetLimit to 2: %v", err)
		}
		if err := p.SetLimit("a", window.Limit{N: 6, Per: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if d := <-light; d != 0 {
			t.Fatalf("the light waiter went after %v once the limit was raised, want at once", d)
		}
		for _, ks := range p.Snapshot() {
			if ks.InFlight != 0 {
				t.Fatalf("%+v", ks)
			}
		}
	})
}

// FIFO per limiter with several rules: a call refused by a shared rule is
// served before later calls on that rule, even lighter ones, and a call
// that queued behind it on one rule does not hold up another rule's calls.
func TestFIFOPerLimiterAcrossRules(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{ruleN("sub", 4, time.Second), ruleN("inst", 10, time.Second)})
		acquire(t, p, clientpool.Charge{Rule: "sub", Weight: 3}).Release() // sub: 1 left until 1s
		begin := time.Now()
		order := make(chan string, 3)
		go func() { // A: needs 4 of sub: waits until 1s
			acquire(t, p, clientpool.Charge{Rule: "sub", Weight: 4}, clientpool.Charge{Rule: "inst", Key: "x", Weight: 1}).Release()
			order <- fmt.Sprint("A@", time.Since(begin))
		}()
		synctest.Wait()
		go func() { // B: 1 of sub would fit now, but A was refused first
			acquire(t, p, clientpool.Charge{Rule: "sub", Weight: 1}).Release()
			order <- fmt.Sprint("B@", time.Since(begin))
		}()
		synctest.Wait()
		go func() { // C: only inst x: not held up by A's wait on sub
			acquire(t, p, clientpool.Charge{Rule: "inst", Key: "x", Weight: 1}).Release()
			order <- fmt.Sprint("C@", time.Since(begin))
		}()
		want := []string{"C@0s", "A@1s", "B@2s"}
		for _, w := range want {
			if got := <-order; got != w {
				t.Fatalf("got %s, want %s (order %v)", got, w, want)
			}
		}
	})
}

// The multi-rule property with many keys, deadlines (fail-fast) and
// throttles mixed in: every call ends (admitted, cancelled or failed
// early), nothing stays in flight, and no window is exceeded.
func TestMultiRulePropertyManyKeys(t *testing.T) {
	rules := []clientpool.Rule{
		ruleN("ip", 20, time.Second),
		ruleN("account", 6, 500*ms),
		ruleN("instrument", 3, 300*ms),
	}
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			runMultiRule(t, rules, multiRule{
				seed: seed, stream: 9, calls: 800, maxGap: 10 * ms, maxHold: 50 * ms,
				cancelOneIn: 5, maxCancel: 800 * ms, skipOneIn: 3, keys: 12, throttleOneIn: 40,
				opts: []clientpool.Option{clientpool.WithMaxPause(200 * ms)},
			})
		})
	}
}
