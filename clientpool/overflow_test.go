package clientpool_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/window"
)

// Charges of one (rule, key) add up saturating: MaxInt64 + (MaxInt64 − 998)
// used to wrap to −1000, pass the weight checks and admit 1010 calls under
// 10 per hour, then panic in Release with the pool locked.
func TestMergedWeightsSaturate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{ruleN("h", 10, time.Hour)})
		ctx := context.Background()
		_, err := p.Acquire(ctx, clientpool.Charge{Rule: "h", Weight: math.MaxInt64}, clientpool.Charge{Rule: "h", Weight: math.MaxInt64 - 998})
		if !errors.Is(err, ratesem.ErrWeightTooLarge) {
			t.Fatalf("MaxInt64 + (MaxInt64-998) on one key: err = %v, want ratesem.ErrWeightTooLarge", err)
		}
		for _, w := range []int64{-1, -1000, math.MinInt64} {
			if _, err := p.Acquire(ctx, clientpool.Charge{Rule: "h", Weight: w}); !errors.Is(err, ratesem.ErrNegativeWeight) {
				t.Fatalf("weight %d: err = %v, want ratesem.ErrNegativeWeight", w, err)
			}
		}
		admitted := 0
		for range 20 {
			c, cancel := context.WithTimeout(ctx, time.Millisecond)
			tk, err := p.Acquire(c, clientpool.Charge{Rule: "h", Weight: 1})
			cancel()
			if err == nil {
				admitted++
				tk.Release()
			}
		}
		if admitted != 10 {
			t.Fatalf("%d calls admitted in an instant under 10 per hour", admitted)
		}
		if p.Len() != 1 {
			t.Fatalf("Len = %d", p.Len())
		}
	})
}

func TestNegativeWeightsEverywhere(t *testing.T) {
	_, err := clientpool.New(clientpool.Table{
		Rules:     []clientpool.Rule{ruleN("a", 1, time.Second)},
		Endpoints: []clientpool.Endpoint{{Path: "/x", Costs: []clientpool.Cost{{Rule: "a", Units: -1}}}},
	})
	if !errors.Is(err, ratesem.ErrNegativeWeight) {
		t.Fatalf("New with a negative cost: %v", err)
	}
	p, err := clientpool.New(clientpool.Table{
		Rules:     []clientpool.Rule{ruleN("a", 1, time.Second)},
		Endpoints: []clientpool.Endpoint{{Path: "/x", Costs: []clientpool.Cost{{Rule: "a", Weight: func(*http.Request) int64 { return -5 }}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Classify(httptest.NewRequest("GET", "/x", nil)); !errors.Is(err, ratesem.ErrNegativeWeight) {
		t.Fatalf("Classify with a negative weight: %v", err)
	}
}

// panicky is a window whose Done panics, standing for any bug in a window.
type panicky struct{ window.Policy }

func (panicky) Done(time.Time, int64) { panic("window bug") }

// A panic inside the pool's lock must not leave it locked: Len used to
// block forever after Release panicked.
func TestPanicDoesNotLeavePoolLocked(t *testing.T) {
	r := ruleN("a", 5, time.Second)
	r.Window = func(l window.Limit) window.Policy { return panicky{window.NewCompletion(l)} }
	p := newPool(t, []clientpool.Rule{r})
	tk := acquire(t, p, clientpool.Charge{Rule: "a", Weight: 1})
	func() {
		defer func() { _ = recover() }()
		tk.Release()
	}()
	done := make(chan int)
	go func() { done <- p.Len() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Len blocked: the pool stayed locked after a panic")
	}
}

func usageRule(name string, n int64, per time.Duration, mk func(window.Limit) window.Policy, used *int64) clientpool.Rule {
	r := ruleN(name, n, per)
	r.Window = mk
	r.Usage = func(http.Header) (int64, bool) { return *used, true }
	return r
}

// A server reporting used = MaxInt64 (X-MBX-USED-WEIGHT-1M:
// 9223372036854775807) makes the window full until it moves, never wraps
// it: the next call waits for the window, under every reconciling window.
// A negative report changes nothing.
func TestObserveHeadersHugeUsage(t *testing.T) {
	windows := map[string]func(window.Limit) window.Policy{
		"completion":  nil,
		"fixed":       func(l window.Limit) window.Policy { return window.NewFixedWindow(l) },
		"slidinglog":  func(l window.Limit) window.Policy { return window.NewSlidingLog(l, 0) },
		"tokenbucket": func(l window.Limit) window.Policy { return window.NewTokenBucket(l, l.N) },
	}
	for name, mk := range windows {
		for _, used := range []int64{math.MaxInt64, math.MaxInt64 - 1, 1 << 62, -1, math.MinInt64} {
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					u := used
					p := newPool(t, []clientpool.Rule{usageRule("w", 3000, time.Minute, mk, &u)})
					c := clientpool.Charge{Rule: "w", Weight: 2}
					tk := acquire(t, p, c)
					tk.ObserveHeaders(http.Header{})
					tk.ObserveHeaders(http.Header{}) // twice: no double count, no overflow
					tk.Release()
					begin := time.Now()
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
					defer cancel()
					admitted := 0
					for time.Since(begin) < 30*time.Second {
						tk, err := p.Acquire(ctx, c)
						if err != nil {
							t.Fatal(err)
						}
						tk.Release()
						if time.Since(begin) < 30*time.Second {
							admitted++
						}
					}
					if u < 0 {
						if admitted < 1000 {
							t.Fatalf("used %d: only %d calls in 30s: a negative report tightened the window", u, admitted)
						}
						return
					}
					if admitted > 0 {
						t.Fatalf("used %d: %d calls admitted within 30s of the server saying the window is full", u, admitted)
					}
				})
			})
		}
	}
}

// Reconcile with an absurd count saturates the same way.
func TestReconcileHugeUsage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{ruleN("w", 10, time.Second)})
		if err := p.Reconcile("w", "k", math.MaxInt64); err != nil {
			t.Fatal(err)
		}
		if err := p.Reconcile("w", "k", math.MaxInt64); err != nil {
			t.Fatal(err)
		}
		if err := p.Reconcile("w", "k", -1); err != nil {
			t.Fatal(err)
		}
		for _, ks := range p.Snapshot() {
			if ks.Used < 10 || ks.Used > 2*10 {
				t.Fatalf("Used = %d after MaxInt64 reports under 10 per second: want the window full (at most the limit taken in per report)", ks.Used)
			}
		}
		begin := time.Now()
		acquire(t, p, clientpool.Charge{Rule: "w", Key: "k", Weight: 1}).Release()
		if d := time.Since(begin); d != time.Second {
			t.Fatalf("after the server said MaxInt64 used, the next call went after %v, want the window (1s)", d)
		}
		for _, ks := range p.Snapshot() {
			if ks.Used < 0 || ks.Used > 2*10 {
				t.Fatalf("Used = %d after two MaxInt64 reports: want the window full, not wrapped", ks.Used)
			}
		}
	})
}
