package ratesem_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/semaphore"
)

// A Metrics observes a RateSemaphore; its snapshot is what a Prometheus
// collector or an OpenTelemetry callback publishes (see examples/otel).
func ExampleMetrics() {
	var m ratesem.Metrics
	sem := semaphore.New(2, time.Second, semaphore.WithObserver(m.Observe))
	ctx := context.Background()
	for range 2 {
		if err := sem.Acquire(ctx, 1); err != nil {
			fmt.Println(err)
			return
		}
	}
	_ = sem.Acquire(ctx, 3) // heavier than the limit: refused at once
	sem.Release(2)

	s := m.Snapshot()
	fmt.Println("admitted", s.Admitted, "refused", s.Refused, "queue depth", s.QueueDepth)
	fmt.Println("waits ≤", s.Wait.Bounds[0], ":", s.Wait.Counts[0], "of", s.Wait.Count)
	// Output:
	// admitted 2 refused 1 queue depth 0
	// waits ≤ 1ms : 2 of 2
}
