package clientpool_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/window"
)

// A quota key's budget follows the server's own order: the reply with the
// lowest remaining is the latest the server counted, and counts every
// call whose reply said more; only the calls that have not reported may
// still be uncounted. Three calls in flight (A, B, C) whose replies come
// C (6 left), A (8), B (7): the server has 6 left, and 6 more start at
// once, a 7th waits. On the base commit the budget left out every call in
// flight again besides the later admissions: 3 started. A call admitted
// after the lowest report that says more (a server contradicting itself)
// gives nothing back.
func TestBudgetFollowsTheServersOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{{
			Name:  "core",
			Limit: window.Limit{Per: time.Hour},
			Learn: clientpool.LearnRateLimit("X-RateLimit-", "", true),
		}})
		c := clientpool.Charge{Rule: "core", Weight: 1}
		reset := time.Now().Add(30 * time.Minute).Truncate(time.Second)
		first := acquire(t, p, c)
		first.ObserveHeaders(rlHeader(10, 9, reset))
		first.Release()
		a, b, cc := acquire(t, p, c), acquire(t, p, c), acquire(t, p, c)
		cc.ObserveHeaders(rlHeader(10, 6, reset))
		a.ObserveHeaders(rlHeader(10, 8, reset))
		b.ObserveHeaders(rlHeader(10, 7, reset))
		for _, tk := range []*clientpool.Ticket{a, b, cc} {
			tk.Release()
		}
		var held []*clientpool.Ticket
		for range 6 {
			if !tryAcquire(p, c, &held) {
				t.Fatalf("the server has 6 left; %d started", len(held))
			}
		}
		if tryAcquire(p, c, &held) {
			t.Fatal("a 7th started beyond the server's remaining")
		}
		// A call admitted after the lowest report, reporting more: no
		// credit; its units stay spent.
		held[0].ObserveHeaders(rlHeader(10, 9, reset))
		if tryAcquire(p, c, &held) {
			t.Fatal("a report contradicting the server's order gave budget back")
		}
		for _, tk := range held {
			tk.Release()
		}
	})
}

// tryAcquire acquires c if it starts at once, keeping the ticket in held.
// startsAtOnce starts calls c on p, each admitted at once, until one is
// not (or more than limit started), checks that want started (the server
// has want left), and releases them.
func startsAtOnce(t *testing.T, p *clientpool.Pool, c clientpool.Charge, want, limit int) {
	t.Helper()
	var held []*clientpool.Ticket
	for len(held) <= limit && tryAcquire(p, c, &held) {
	}
	if len(held) != want {
		t.Fatalf("%d calls started with %d left at the server", len(held), want)
	}
	for _, tk := range held {
		tk.Release()
	}
}

func tryAcquire(p *clientpool.Pool, c clientpool.Charge, held *[]*clientpool.Ticket) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	tk, err := p.Acquire(ctx, c)
	if err != nil {
		return false
	}
	*held = append(*held, tk)
	return true
}

// A quota rule whose N was guessed (Limit.N > 0 with Learn): the calls in
// flight when the first report comes may reach the server after it, so
// they come out of the budget it sets. Five calls in flight, one reports
// 9 left: at most 5 more start (9 less the 4 others).
func TestBudgetGuessedLimitCountsCallsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{{
			Name:  "core",
			Limit: window.Limit{N: 10, Per: time.Hour},
			Learn: clientpool.LearnRateLimit("X-RateLimit-", "", true),
		}})
		c := clientpool.Charge{Rule: "core", Weight: 1}
		reset := time.Now().Add(30 * time.Minute).Truncate(time.Second)
		var held []*clientpool.Ticket
		for range 5 {
			held = append(held, acquire(t, p, c))
		}
		held[0].ObserveHeaders(rlHeader(10, 9, reset))
		more := 0
		for tryAcquire(p, c, &held) {
			more++
		}
		if more > 5 {
			t.Fatalf("%d more started: beyond 9 left less the 4 other calls in flight", more)
		}
		for _, tk := range held {
			tk.Release()
		}
	})
}
