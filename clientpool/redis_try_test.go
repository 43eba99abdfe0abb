package clientpool_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// Pool.TryAcquire over Redis: admitted at once across processes, refused
// without waiting (ratesem.ErrInFlight: internal/remote does not say the
// wait yet), the weight errors before any round trip.
func TestRedisPoolTryAcquire(t *testing.T) {
	c := newClient(t, redistest.Start(t).Addr())
	table := clientpool.Table{Rules: []clientpool.Rule{{Name: "r", Limit: window.Limit{N: 2, Per: time.Minute}}}}
	p1 := newRedisPool(t, table, c, "try")
	p2 := newRedisPool(t, table, c, "try")
	ch := clientpool.Charge{Rule: "r", Weight: 1}
	t1, d, err := p1.TryAcquire(ch)
	if t1 == nil || d != 0 || err != nil {
		t.Fatalf("first: %v, %v, %v", t1, d, err)
	}
	t2, d, err := p2.TryAcquire(ch)
	if t2 == nil || d != 0 || err != nil {
		t.Fatalf("second, another process: %v, %v, %v", t2, d, err)
	}
	begin := time.Now()
	if t3, _, err := p1.TryAcquire(ch); t3 != nil || !errors.Is(err, ratesem.ErrInFlight) {
		t.Fatalf("third of 2: %v, %v; want ratesem.ErrInFlight", t3, err)
	}
	if d := time.Since(begin); d > time.Second {
		t.Fatalf("a refusal took %v", d)
	}
	if _, _, err := p1.TryAcquire(clientpool.Charge{Rule: "r", Weight: 3}); !errors.Is(err, ratesem.ErrWeightTooLarge) {
		t.Fatalf("weight 3 of 2: %v", err)
	}
	t1.Release()
	t2.Release()
}
