package clientpool_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/window"
)

// Pool.TryAcquire has window.Limiter.TryN's contract over all of a call's
// charges at once.
func TestPoolTryAcquire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := clientpool.New(clientpool.Table{Rules: []clientpool.Rule{
			{Name: "a", Limit: window.Limit{N: 2, Per: time.Second}},
			{Name: "b", Limit: window.Limit{N: 1, Per: 3 * time.Second}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		a, b := clientpool.Charge{Rule: "a", Weight: 1}, clientpool.Charge{Rule: "b", Weight: 1}
		tk, d, err := p.TryAcquire(a, b)
		if tk == nil || d != 0 || err != nil {
			t.Fatalf("TryAcquire = %v, %v, %v; want admitted", tk, d, err)
		}
		// b is full of a call in flight: only its release helps.
		if tk2, d, err := p.TryAcquire(a, b); tk2 != nil || d != 0 || !errors.Is(err, ratesem.ErrInFlight) {
			t.Fatalf("b in flight: %v, %v, %v; want ratesem.ErrInFlight", tk2, d, err)
		}
		if ks := p.Snapshot(); ks[0].InFlight != 1 || ks[1].InFlight != 1 {
			t.Fatalf("a refusal changed the pool: %+v", ks)
		}
		tk.Release()
		// b's completion window: the call ended now, 3 s to wait; a has room.
		if tk2, d, err := p.TryAcquire(a, b); tk2 != nil || err != nil || d != 3*time.Second {
			t.Fatalf("after the release: %v, %v, %v; want 3s", tk2, d, err)
		}
		time.Sleep(3 * time.Second)
		tk, d, err = p.TryAcquire(a, b)
		if tk == nil || d != 0 || err != nil {
			t.Fatalf("after the wait: %v, %v, %v", tk, d, err)
		}
		tk.Release()
		if _, _, err := p.TryAcquire(clientpool.Charge{Rule: "a", Weight: 3}); !errors.Is(err, ratesem.ErrWeightTooLarge) {
			t.Fatalf("weight 3 of 2: %v", err)
		}
		if _, _, err := p.TryAcquire(clientpool.Charge{Rule: "x", Weight: 1}); !errors.Is(err, ratesem.ErrUnknownRule) {
			t.Fatalf("unknown rule: %v", err)
		}
	})
}
