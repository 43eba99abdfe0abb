package conformance_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratesem/ratesem/window"
)

// Settle: a call admitted for an estimate and settled to its actual
// weight counts as the actual weight from its end: a refund (estimate 8,
// actual 2) frees 6 units at once, a debit (estimate 2, actual 8) takes 6
// more until end + Per. Over Redis the settlement reaches Redis with the
// release, in the background: the refund is checked as "admitted well
// before end + Per", the debit at a third of Per after the end.

// TestSettleSemaphore checks settle on a RateSemaphore (limit 10).
func TestSettleSemaphore(t *testing.T) {
	forModesRun(t, false, func(t *testing.T, m mode) {
		per := m.per
		refund := m.mustSem(t, 10, per, semCfg{})
		end, err := refund.begin(context.Background(), 8)
		if err != nil {
			t.Fatal(err)
		}
		ended := time.Now()
		end(2)
		waitFor(t, m, "8 units free after a call settled from 8 to 2", func() bool {
			if !refund.TryAcquire(8) {
				return false
			}
			if at := time.Since(ended); at > per/2 {
				t.Errorf("the refund took %v to show (Per %v)", at, per)
			}
			return true
		})
		if refund.TryAcquire(1) {
			t.Error("a ninth unit was admitted: the settled call counts 2")
		}

		debit := m.mustSem(t, 10, per, semCfg{})
		end, err = debit.begin(context.Background(), 2)
		if err != nil {
			t.Fatal(err)
		}
		ended = time.Now()
		end(8)
		sleepUntil(ended.Add(per / 3))
		if debit.TryAcquire(3) {
			t.Error("3 units admitted within Per of a call settled from 2 to 8")
		}
		if !debit.TryAcquire(2) {
			t.Error("2 units refused beside a call settled to 8 (limit 10)")
		}
	})
}

// TestSettlePool checks Ticket.Settle on a Pool (limit 10).
func TestSettlePool(t *testing.T) {
	forModesRun(t, true, func(t *testing.T, m mode) {
		per := m.per
		p := m.mustPool(t, poolCfg{}, ruleSpec{name: "r", limit: window.Limit{N: 10, Per: per}})
		tk, err := p.Acquire(context.Background(), charge("r", "refund", 8))
		if err != nil {
			t.Fatal(err)
		}
		if err := tk.Settle("r", 2); err != nil {
			t.Fatal(err)
		}
		ended := time.Now()
		tk.Release()
		waitFor(t, m, "8 units free after a call settled from 8 to 2", func() bool {
			tk := tryPool(t, p, m.quick(), charge("r", "refund", 8))
			if tk == nil {
				return false
			}
			if at := time.Since(ended); at > per/2 {
				t.Errorf("the refund took %v to show (Per %v)", at, per)
			}
			return true
		})
		if tk := tryPool(t, p, m.quick(), charge("r", "refund", 1)); tk != nil {
			t.Error("a ninth unit was admitted: the settled call counts 2")
		}

		tk, err = p.Acquire(context.Background(), charge("r", "debit", 2))
		if err != nil {
			t.Fatal(err)
		}
		if err := tk.Settle("r", 8); err != nil {
			t.Fatal(err)
		}
		ended = time.Now()
		tk.Release()
		sleepUntil(ended.Add(per / 3))
		if tk := tryPool(t, p, m.quick(), charge("r", "debit", 3)); tk != nil {
			t.Error("3 units admitted within Per of a call settled from 2 to 8")
		}
		if tk := tryPool(t, p, m.quick(), charge("r", "debit", 2)); tk == nil {
			t.Error("2 units refused beside a call settled to 8 (limit 10)")
		}
	})
}
