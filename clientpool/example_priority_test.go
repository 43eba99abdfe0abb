package clientpool_test

import (
	"context"
	"fmt"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/window"
)

// An order cancel must not queue behind a backfill that shares the IP
// weight (Binance's REQUEST_WEIGHT, here one unit per second to keep the
// output short): given ratesem.PriorityHigh in its context, it is
// admitted before the backfill calls that queued earlier. WithMaxQueue
// bounds the backfill's queue, and WithQueueWait bounds how long the
// cancel may wait in it.
func ExampleWithMaxQueue_priority() {
	clk := clock.NewMock()
	queued := make(chan struct{}, 8)
	pool, err := clientpool.New(clientpool.Table{Rules: []clientpool.Rule{
		{Name: "ip-weight", Limit: window.Limit{N: 1, Per: time.Second}},
	}}, clientpool.WithClock(clk), clientpool.WithMaxQueue(4),
		clientpool.WithObserver(func(e ratesem.Event) {
			if e.Kind == ratesem.Queued {
				queued <- struct{}{}
			}
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	weight := clientpool.Charge{Rule: "ip-weight", Key: "203.0.113.7", Weight: 1}

	type admitted struct {
		name   string
		ticket *clientpool.Ticket
	}
	admissions := make(chan admitted)
	call := func(ctx context.Context, name string) {
		ticket, err := pool.Acquire(ctx, weight)
		if err != nil {
			fmt.Println(name, err)
			return
		}
		admissions <- admitted{name, ticket}
	}

	current, _ := pool.Acquire(context.Background(), weight) // backfill 1 runs
	for _, name := range []string{"backfill 2", "backfill 3", "backfill 4"} {
		go call(context.Background(), name)
		<-queued
	}
	cancel := ratesem.WithPriority(context.Background(), ratesem.PriorityHigh)
	cancel = ratesem.WithQueueWait(cancel, 5*time.Second)
	go call(cancel, "order cancel")
	<-queued

	for range 4 {
		current.Release()
		clk.Add(time.Second) // the completion window frees the unit a second after the release
		next := <-admissions
		fmt.Println("admitted:", next.name)
		current = next.ticket
	}
	current.Release()
	// Output:
	// admitted: order cancel
	// admitted: backfill 2
	// admitted: backfill 3
	// admitted: backfill 4
}
