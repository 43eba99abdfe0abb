package clientpool_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// Ticket.Settle in Redis mode: the settled weight is what every process
// sharing the limit sees once the release reaches Redis (Close sends it).
func TestRedisTicketSettle(t *testing.T) {
	c := newClient(t, redistest.Start(t).Addr())
	table := clientpool.Table{Rules: []clientpool.Rule{{Name: "tokens", Limit: window.Limit{N: 100, Per: time.Minute}}}}
	a := newRedisPool(t, table, c, "settle")
	b := newRedisPool(t, table, c, "settle") // another process
	tk, err := a.Acquire(context.Background(), clientpool.Charge{Rule: "tokens", Weight: 100})
	if err != nil {
		t.Fatal(err)
	}
	if err := tk.Settle("tokens", 30); err != nil {
		t.Fatal(err)
	}
	tk.Release()
	a.Close()
	try := func(n int64) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		tk, err := b.Acquire(ctx, clientpool.Charge{Rule: "tokens", Weight: n})
		if err != nil {
			return false
		}
		tk.Release()
		return true
	}
	if try(71) || !try(70) {
		t.Fatal("after a settlement to 30 of 100: want exactly 70 free in the other process")
	}
}

// Rule.TimeUnit in Redis mode: a call settles to its duration with its
// release, a debit (estimate 1, ran 300 ms) and a refund (estimate 5000,
// ran 300 ms) alike, through Acquire and TryAcquire, and another process
// sees both. Without the settlement the other process would see 5001
// units; without the debit, about 301.
func TestRedisTimedSettle(t *testing.T) {
	c := newClient(t, redistest.Start(t).Addr())
	table := clientpool.Table{Rules: []clientpool.Rule{{Name: "cpu", Limit: window.Limit{N: 10000, Per: time.Minute}, TimeUnit: time.Millisecond}}}
	a := newRedisPool(t, table, c, "timed")
	b := newRedisPool(t, table, c, "timed") // another process
	debit, err := a.Acquire(context.Background(), clientpool.Charge{Rule: "cpu", Weight: 1})
	if err != nil {
		t.Fatal(err)
	}
	refund, _, err := a.TryAcquire(clientpool.Charge{Rule: "cpu", Weight: 5000})
	if err != nil || refund == nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
	debit.Release()
	refund.Release()
	a.Close()
	try := func(n int64) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		tk, err := b.Acquire(ctx, clientpool.Charge{Rule: "cpu", Weight: n})
		if err != nil {
			return false
		}
		if err := tk.Settle("cpu", 0); err != nil { // leave no trace
			t.Fatal(err)
		}
		tk.Release()
		return true
	}
	if try(10000 - 600 + 1) {
		t.Fatal("two calls of at least 300 ms each: want at most 9400 ms free in the other process")
	}
	if !try(8000) { // unless the machine stalls the two calls for more than 2 s
		t.Fatal("two calls of about 300 ms each: want 8000 ms free in the other process")
	}
}

// In Redis mode a settlement to less than the estimate wakes the calls
// waiting on the key at once, as in process: here B (500 of 1000) waits
// behind an ended call (300, for 10 s) and A in flight (estimate 500); A
// ends after 100 ms and settles to about 100: B fits at once. Before, B
// slept until the instant Redis had named while A counted 500: the ended
// call's expiry, 10 s later.
func TestRedisSettleWakesWaiters(t *testing.T) {
	c := newClient(t, redistest.Start(t).Addr())
	table := clientpool.Table{Rules: []clientpool.Rule{{Name: "cpu", Limit: window.Limit{N: 1000, Per: 10 * time.Second}, TimeUnit: time.Millisecond}}}
	p := newRedisPool(t, table, c, "wake")
	ended, err := p.Acquire(context.Background(), clientpool.Charge{Rule: "cpu", Weight: 300})
	if err != nil {
		t.Fatal(err)
	}
	ended.Settle("cpu", 300) // counts 300 for 10 s, whatever its duration
	ended.Release()
	a, err := p.Acquire(context.Background(), clientpool.Charge{Rule: "cpu", Weight: 500})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		ctx, cancel := context.WithCancel(context.Background()) // no deadline: no fail-fast on the named instant
		defer time.AfterFunc(5*time.Second, cancel).Stop()
		b, err := p.Acquire(ctx, clientpool.Charge{Rule: "cpu", Weight: 500})
		if err != nil {
			got <- -1
			return
		}
		b.Release()
		got <- time.Since(start)
	}()
	time.Sleep(100 * time.Millisecond)
	a.Release()
	if d := <-got; d < 0 || d > 3*time.Second {
		t.Fatalf("B admitted after %v, want soon after A's settlement to about 100 of 500 (not the ended call's expiry, 10 s)", d)
	}
}
