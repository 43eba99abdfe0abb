package ratesem_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/semaphore"
	"github.com/ratesem/ratesem/window"
)

// One errors.Is check works whichever package returned the error: here a
// RateSemaphore whose next admission would come after the context's
// deadline fails at once with ErrDeadline, which also matches
// context.DeadlineExceeded.
func Example_errors() {
	sem := semaphore.New(1, time.Hour) // 1 call per hour
	ctx := context.Background()
	if err := sem.Acquire(ctx, 1); err != nil {
		panic(err)
	}
	sem.Release(1) // the next call may start an hour from now

	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	err := sem.Acquire(ctx, 1) // returns at once
	fmt.Println(errors.Is(err, ratesem.ErrDeadline), errors.Is(err, context.DeadlineExceeded))
	// Output: true true
}

// A limit read at run time is checked with window.ParseLimit before its
// numbers go to a constructor, which would panic on a negative limit.
func Example_limitFromData() {
	for _, s := range []string{"10/2s", "-1/2s"} {
		l, err := window.ParseLimit(s)
		if err != nil {
			fmt.Println(errors.Is(err, ratesem.ErrInvalidLimit))
			continue
		}
		sem := semaphore.New(l.N, l.Per)
		fmt.Println(sem.Limit())
	}
	// Output:
	// 10/2s
	// true
}
