package clientpool_test

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/redisrate"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// Pool.TryAcquire's edge inputs, in process and over Redis: no charges is
// admitted and holds nothing; a negative weight, an unknown rule and a
// weight of math.MaxInt64 are refused with their error classes, in both
// modes; over Redis more than redisrate.MaxCharges distinct charges is
// ratesem.ErrTooManyCharges. No refusal changes the pool.
func TestPoolTryAcquireEdgeInputs(t *testing.T) {
	table := clientpool.Table{Rules: []clientpool.Rule{{Name: "r", Limit: window.Limit{N: 2, Per: time.Minute}}}}
	modes := map[string]func(t *testing.T) *clientpool.Pool{
		"inproc": func(t *testing.T) *clientpool.Pool {
			p, err := clientpool.New(table)
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		"redis": func(t *testing.T) *clientpool.Pool {
			if testing.Short() {
				t.Skip("needs redis-server")
			}
			return newRedisPool(t, table, newClient(t, redistest.Start(t).Addr()), "edge")
		},
	}
	for name, mk := range modes {
		t.Run(name, func(t *testing.T) {
			p := mk(t)
			tk, d, err := p.TryAcquire()
			if tk == nil || d != 0 || err != nil {
				t.Fatalf("TryAcquire() = %v, %v, %v; want admitted", tk, d, err)
			}
			tk.Release()
			bad := []struct {
				charges []clientpool.Charge
				want    error
			}{
				{[]clientpool.Charge{{Rule: "r", Weight: -1}}, ratesem.ErrNegativeWeight},
				{[]clientpool.Charge{{Rule: "r", Weight: math.MinInt64}}, ratesem.ErrNegativeWeight},
				{[]clientpool.Charge{{Rule: "x", Weight: 1}}, ratesem.ErrUnknownRule},
				{[]clientpool.Charge{{Rule: "r", Weight: 3}}, ratesem.ErrWeightTooLarge},
				{[]clientpool.Charge{{Rule: "r", Weight: math.MaxInt64}}, ratesem.ErrWeightTooLarge},
				// merged: 1 + MaxInt64 saturates, never wraps to an admissible weight
				{[]clientpool.Charge{{Rule: "r", Weight: 1}, {Rule: "r", Weight: math.MaxInt64}}, ratesem.ErrWeightTooLarge},
			}
			for _, b := range bad {
				if tk, d, err := p.TryAcquire(b.charges...); tk != nil || d != 0 || !errors.Is(err, b.want) {
					t.Errorf("TryAcquire(%v) = %v, %v, %v; want %v", b.charges, tk, d, err, b.want)
				}
			}
			if ks := p.Snapshot(); len(ks) > 0 && ks[0].InFlight != 0 {
				t.Fatalf("a refusal changed the pool: %+v", ks)
			}
			if tk, d, err := p.TryAcquire(clientpool.Charge{Rule: "r", Weight: 2}); tk == nil || d != 0 || err != nil {
				t.Fatalf("the whole limit after the refusals: %v, %v, %v", tk, d, err)
			} else {
				tk.Release()
			}
		})
	}
	// More distinct charges than redisrate.MaxCharges: admitted in process,
	// ErrTooManyCharges over Redis (before any round trip).
	keyed := clientpool.Table{Rules: []clientpool.Rule{{Name: "k", Limit: window.Limit{N: 2, Per: time.Minute},
		Key: func(*http.Request) (string, bool) { return "", true }}}}
	many := make([]clientpool.Charge, redisrate.MaxCharges+1)
	for i := range many {
		many[i] = clientpool.Charge{Rule: "k", Key: fmt.Sprint(i), Weight: 1}
	}
	t.Run("inproc/many-charges", func(t *testing.T) {
		p, err := clientpool.New(keyed)
		if err != nil {
			t.Fatal(err)
		}
		tk, d, err := p.TryAcquire(many...)
		if tk == nil || d != 0 || err != nil {
			t.Fatalf("%d charges: %v, %v, %v; want admitted", len(many), tk, d, err)
		}
		tk.Release()
	})
	t.Run("redis/too-many-charges", func(t *testing.T) {
		if testing.Short() {
			t.Skip("needs redis-server")
		}
		p := newRedisPool(t, keyed, newClient(t, redistest.Start(t).Addr()), "edge")
		if tk, d, err := p.TryAcquire(many...); tk != nil || d != 0 || !errors.Is(err, ratesem.ErrTooManyCharges) {
			t.Fatalf("%d charges: %v, %v, %v; want ratesem.ErrTooManyCharges", len(many), tk, d, err)
		}
		if tk, d, err := p.TryAcquire(many[:redisrate.MaxCharges]...); tk == nil || d != 0 || err != nil {
			t.Fatalf("%d charges: %v, %v, %v; want admitted", redisrate.MaxCharges, tk, d, err)
		} else {
			tk.Release()
		}
	})
}
