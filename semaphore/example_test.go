package semaphore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/semaphore"
	"github.com/ratesem/ratesem/window"
)

// An errgroup fan-out: 20 calls under a limit of 5 per 50ms. The calls are
// stamped as they start and end; no window of 50ms ever holds more than 5
// calls that were in flight or had just ended.
func Example_errgroup() {
	sem := semaphore.New(5, 50*time.Millisecond)
	var mu sync.Mutex
	var starts, ends []time.Time

	g, ctx := errgroup.WithContext(context.Background())
	for range 20 {
		g.Go(func() error {
			return sem.Do(ctx, func(ctx context.Context) error {
				mu.Lock()
				starts = append(starts, time.Now())
				mu.Unlock()
				time.Sleep(2 * time.Millisecond) // the API call
				mu.Lock()
				ends = append(ends, time.Now())
				mu.Unlock()
				return nil
			})
		})
	}
	if err := g.Wait(); err != nil {
		fmt.Println(err)
	}
	// Batches of 5: each batch starts 50ms after the previous one ended.
	first, last := starts[0], starts[0]
	for _, s := range starts {
		if s.Before(first) {
			first = s
		}
		if s.After(last) {
			last = s
		}
	}
	fmt.Println("calls:", len(ends))
	fmt.Println("took at least 3 windows:", last.Sub(first) >= 3*50*time.Millisecond)
	// Output:
	// calls: 20
	// took at least 3 windows: true
}

// Weights: a call that costs 3 units (say an endpoint of weight 3) takes 3 of
// the 10 units per second. A weight above the limit fails at once.
func ExampleRateSemaphore_Acquire_weights() {
	sem := semaphore.New(10, time.Second)
	ctx := context.Background()
	if err := sem.Acquire(ctx, 3); err != nil {
		fmt.Println(err)
	}
	fmt.Println("in flight:", sem.Stats().InFlight)
	sem.Release(3)

	err := sem.Acquire(ctx, 11)
	fmt.Println(errors.Is(err, ratesem.ErrWeightTooLarge))
	// Output:
	// in flight: 3
	// true
}

// TryAcquire never blocks: after 2 calls under a limit of 2 per second, the
// third must wait a second after the first two ended.
func ExampleRateSemaphore_TryAcquire() {
	sem := semaphore.New(2, time.Second)
	fmt.Println(sem.TryAcquire(1), sem.TryAcquire(1))
	sem.Release(1)
	sem.Release(1)
	fmt.Println(sem.TryAcquire(1))
	// Output:
	// true true
	// false
}

// Pause holds new starts, for example after a 429 with Retry-After; PauseFor
// is the delay form the RoundTripper uses.
func ExampleRateSemaphore_PauseFor() {
	sem := semaphore.New(10, time.Second)
	sem.PauseFor(time.Minute)
	fmt.Println(sem.TryAcquire(1))
	fmt.Println(sem.Stats().PausedUntil.IsZero())
	// Output:
	// false
	// false
}

// Any window of package window can be the rate policy of a RateSemaphore,
// with waiting, FIFO order, cancellation and Pause on top: here GCRA at 10
// per second with bursts of 3, and at most 2 calls in flight.
func ExampleNewWithPolicy() {
	sem := semaphore.NewWithPolicy(
		window.NewGCRA(window.Limit{N: 10, Per: time.Second}, 3),
		semaphore.WithMaxUnitsInFlight(2),
	)
	fmt.Println(sem.TryAcquire(2), sem.TryAcquire(1)) // the second exceeds the cap of 2 in flight
	sem.Release(2)
	fmt.Println(sem.TryAcquire(1), sem.TryAcquire(1)) // the burst of 3 is spent
	sem.Release(1)
	err := sem.Acquire(context.Background(), 4) // heavier than the burst: never
	fmt.Println(errors.Is(err, ratesem.ErrWeightTooLarge))
	// Output:
	// true false
	// true false
	// true
}

// A call whose weight is known only after it (an LLM request's tokens) is
// admitted for an estimate and ends with what it really cost: the
// difference is free again at once.
func ExampleRateSemaphore_Begin() {
	s := semaphore.New(1000, time.Minute)           // 1000 tokens per minute
	call, err := s.Begin(context.Background(), 800) // prompt + max_tokens
	if err != nil {
		panic(err)
	}
	fmt.Println("another 800 now:", s.TryAcquire(800))
	call.End(150) // the reply's usage said 150 tokens
	fmt.Println("another 800 after settling:", s.TryAcquire(800))
	// Output:
	// another 800 now: false
	// another 800 after settling: true
}
