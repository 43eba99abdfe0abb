// Package callctx holds the values a call's context carries for the
// limiters: the priority class ratesem.WithPriority sets and the queue-wait
// budget ratesem.WithQueueWait sets. It imports nothing of the module, so
// the root package can write them and internal/sched read them.
package callctx

import (
	"context"
	"time"
)

type priorityKey struct{}

type queueWaitKey struct{}

// WithPriority returns a copy of ctx carrying the priority class p (−1, 0
// or 1, already clamped by the caller).
func WithPriority(ctx context.Context, p int8) context.Context {
	return context.WithValue(ctx, priorityKey{}, p)
}

// Priority returns the class WithPriority gave ctx, or 0 (normal).
func Priority(ctx context.Context) int8 {
	p, _ := ctx.Value(priorityKey{}).(int8)
	return p
}

// WithQueueWait returns a copy of ctx carrying the queue-wait budget d
// (≥ 0, already clamped by the caller).
func WithQueueWait(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, queueWaitKey{}, d)
}

// QueueWait returns the budget WithQueueWait gave ctx, or 0 (no budget).
func QueueWait(ctx context.Context) time.Duration {
	d, _ := ctx.Value(queueWaitKey{}).(time.Duration)
	return d
}
