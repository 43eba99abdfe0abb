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
