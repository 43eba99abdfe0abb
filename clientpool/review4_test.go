package clientpool_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/clientpool"
)

// The skew an epoch reset is read with grows with a reply's latency (and
// the Date's truncation), so two replies of one server window read its end
// more than a second apart when the earlier one in the server's order
// comes back slowly. That is not a new window: the slow reply's higher
// remaining must not set the budget anew. An honest server, 10 per window:
// X (9 left), then A (8) and B (7) counted in that order; B's reply comes
// back at once, A's 1.5 s later. The server has 7 left: a crawl may start
// 7 more, not 8 (on the base commit the slow reply started a "new window"
// of 8 − 0 unreported: 8 started and the server rejected one).
func TestReview4SlowReplyIsNotANewWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{epochRule()})
		c := clientpool.Charge{Rule: "core", Weight: 1}
		t0 := time.Now() // a whole second: Date truncates nothing
		end := t0.Add(10 * time.Second)
		x := acquire(t, p, c)
		x.ObserveHeaders(epochHeader(10, 9, end, t0))
		x.Release()
		a, b := acquire(t, p, c), acquire(t, p, c)
		time.Sleep(300 * time.Millisecond)
		b.ObserveHeaders(epochHeader(10, 7, end, t0))
		b.Release()
		time.Sleep(1200 * time.Millisecond)
		a.ObserveHeaders(epochHeader(10, 8, end, t0))
		a.Release()
		var held []*clientpool.Ticket
		for tryAcquire(p, c, &held) {
			if len(held) > 10 {
				break
			}
		}
		if len(held) != 7 {
			t.Fatalf("%d calls started with 7 left at the server", len(held))
		}
		for _, tk := range held {
			tk.Release()
		}
	})
}
