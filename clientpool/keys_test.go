package clientpool_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
)

// WithMaxKeys: a full pool refuses a new key at once with ratesem.ErrTooManyKeys
// while every key's window still counts calls (never merging keys or
// forgetting one); once a window has forgotten its calls, that key is
// evicted for the new one, idle timeout or not.
func TestMaxKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{ruleN("user", 1, time.Second)}, clientpool.WithMaxKeys(3))
		for i := range 3 {
			acquire(t, p, clientpool.Charge{Rule: "user", Key: fmt.Sprint(i), Weight: 1}).Release()
		}
		begin := time.Now()
		_, err := p.Acquire(context.Background(), clientpool.Charge{Rule: "user", Key: "new", Weight: 1})
		if !errors.Is(err, ratesem.ErrTooManyKeys) {
			t.Fatalf("a 4th key under WithMaxKeys(3): %v", err)
		}
		if time.Since(begin) != 0 {
			t.Fatal("ratesem.ErrTooManyKeys was not at once")
		}
		if err := p.Pause("user", "new", time.Now().Add(time.Second)); !errors.Is(err, ratesem.ErrTooManyKeys) {
			t.Fatalf("Pause of a 4th key: %v", err)
		}
		if err := p.Reconcile("user", "new", 1); !errors.Is(err, ratesem.ErrTooManyKeys) {
			t.Fatalf("Reconcile of a 4th key: %v", err)
		}
		// Existing keys still work, and still count: key 0 is full until 1s.
		acquire(t, p, clientpool.Charge{Rule: "user", Key: "0", Weight: 1}).Release()
		if d := time.Since(begin); d != time.Second {
			t.Fatalf("key 0 admitted after %v, want 1s: its accounting must survive", d)
		}
		// Keys 1 and 2 have been quiet for 2 Per: their windows forgot.
		time.Sleep(time.Second)
		acquire(t, p, clientpool.Charge{Rule: "user", Key: "new", Weight: 1}).Release()
		if got := p.Len(); got > 3 {
			t.Fatalf("Len = %d above the cap", got)
		}
		// A key in flight is never evicted, even when its window is old.
		hold := acquire(t, p, clientpool.Charge{Rule: "user", Key: "0", Weight: 1})
		time.Sleep(time.Hour)
		for i := range 10 {
			acquire(t, p, clientpool.Charge{Rule: "user", Key: fmt.Sprint("n", i), Weight: 1}).Release()
			time.Sleep(3 * time.Second)
		}
		found := false
		for _, ks := range p.Snapshot() {
			found = found || ks.Key == "0" && ks.InFlight == 1
		}
		if !found {
			t.Fatal("the key in flight was evicted")
		}
		hold.Release()
		if _, err := clientpool.New(clientpool.Table{}, clientpool.WithMaxKeys(-1)); err == nil {
			t.Fatal("WithMaxKeys(-1) accepted")
		}
	})
}

// A paused key is not evicted before its pause ends.
func TestPausedKeyNotEvicted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{ruleN("user", 1, time.Second)}, clientpool.WithMaxKeys(1), clientpool.WithIdleTimeout(time.Second))
		if err := p.Pause("user", "a", time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Minute)
		if _, err := p.Acquire(context.Background(), clientpool.Charge{Rule: "user", Key: "b", Weight: 1}); !errors.Is(err, ratesem.ErrTooManyKeys) {
			t.Fatalf("a new key while the only one is paused: %v", err)
		}
		time.Sleep(31 * time.Minute)
		acquire(t, p, clientpool.Charge{Rule: "user", Key: "b", Weight: 1}).Release()
	})
}

// Eviction is incremental: with many idle keys, no Acquire looks at more
// than a few of them, and they all go in the end. (1e6 keys unless
// -short or -race; the work is counted, not timed.)
func TestEvictionIncremental(t *testing.T) {
	keys := 1_000_000
	if testing.Short() || raceEnabled {
		keys = 100_000
	}
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{ruleN("user", 5, time.Second), ruleN("ip", 1e9, time.Second)}, clientpool.WithIdleTimeout(time.Minute))
		for i := range keys {
			acquire(t, p, clientpool.Charge{Rule: "user", Key: fmt.Sprint("u", i), Weight: 1}).Release()
		}
		time.Sleep(2 * time.Minute)
		worst, calls := 0, 0
		for p.Len() > 2 {
			before := p.EvictWork()
			acquire(t, p, clientpool.Charge{Rule: "ip", Weight: 1}).Release()
			worst = max(worst, p.EvictWork()-before)
			if calls++; calls > keys {
				t.Fatalf("Len = %d after %d calls", p.Len(), calls)
			}
		}
		if worst > 16 {
			t.Fatalf("one Acquire looked at %d idle keys (of %d)", worst, keys)
		}
		t.Logf("%d idle keys evicted over %d calls, at most %d looked at per call", keys, calls, worst)
	})
}
