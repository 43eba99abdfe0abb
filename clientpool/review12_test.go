package clientpool_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/window"
)

// A rule that learns the server's windows (Learned.Reset) admits against
// the budget the server announced, and its window only caps the units in
// flight: a settlement (Ticket.Settle, Rule.Settle) changes nothing of the
// budget. A call charged 10 that really cost 100 leaves the client
// believing 280 remain where the server has 200: a call of 250 starts at
// once and the server rejects it.
func TestReview12QuotaIgnoresSettledDebit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{{
			Name:  "tokens",
			Limit: window.Limit{Per: time.Minute},
			Learn: clientpool.LearnRateLimit("X-RateLimit-", "", true),
		}})
		tk, err := p.Acquire(context.Background(), clientpool.Charge{Rule: "tokens", Weight: 10})
		if err != nil {
			t.Fatal(err)
		}
		tk.ObserveHeaders(rlHeader(300, 290, time.Now().Add(time.Minute))) // the server charged 10 at arrival
		if err := tk.Settle("tokens", 100); err != nil {                   // ... and 90 more at the end
			t.Fatal(err)
		}
		tk.Release()
		if acquireWithin(t, p, 30*time.Second, clientpool.Charge{Rule: "tokens", Weight: 250}) {
			t.Error("a call of 250 started in a window where the server has 200 left after a settled debit of 90")
		}
	})
}
