package ratesem

import (
	"context"
	"time"
)

// Priority is the scheduling class of a call that must wait: among the
// calls queued on one limiter, a higher class is served first, within the
// starvation bound MaxOvertakes. There are three classes: PriorityLow,
// PriorityNormal (the zero value: a context without WithPriority) and
// PriorityHigh; a value above PriorityHigh counts as PriorityHigh and one
// below PriorityLow as PriorityLow.
//
// A priority changes only the order of waiters: a call admitted at once is
// admitted whatever its class, and within a class waiters are served in
// arrival order.
type Priority int8

// The priority classes.
const (
	// PriorityLow is for calls that may wait behind everything else,
	// within the starvation bound: a backfill, a bulk export.
	PriorityLow Priority = -1
	// PriorityNormal is the default class.
	PriorityNormal Priority = 0
	// PriorityHigh is for calls that must not wait behind others: an
	// order cancel under a weight it shares with a backfill.
	PriorityHigh Priority = 1
)

// MaxOvertakes is the starvation bound of the priority classes, per
// limiter: a waiting call is overtaken by at most MaxOvertakes calls of
// each higher class that arrived after it (so a PriorityLow call by at
// most 2×MaxOvertakes in all, a PriorityNormal one by at most MaxOvertakes,
// a PriorityHigh one by none); after that, later calls of a higher class
// queue behind it. A call never waits behind a call of a lower class that
// arrived after it. "Arrived" counts calls that had to wait: a call
// admitted at once overtakes nobody.
const MaxOvertakes = 16

// String returns "low", "normal" or "high", for a log attribute or a
// metric label.
func (p Priority) String() string {
	switch p.Class() {
	case PriorityLow:
		return "low"
	case PriorityHigh:
		return "high"
	}
	return "normal"
}

// Class returns p clamped to the classes: PriorityLow, PriorityNormal or
// PriorityHigh.
func (p Priority) Class() Priority { return min(max(p, PriorityLow), PriorityHigh) }

type priorityKey struct{}

type queueWaitKey struct{}

// WithPriority returns a copy of ctx that gives the calls made with it the
// priority p (see Priority) in every limiter of this module that queues:
// semaphore.RateSemaphore, clientpool.Pool and an httpclient.Transport
// (through the request's context). It does not block; it is safe for
// concurrent use, like every context.
func WithPriority(ctx context.Context, p Priority) context.Context {
	return context.WithValue(ctx, priorityKey{}, p.Class())
}

// PriorityOf returns the priority WithPriority gave ctx, or PriorityNormal
// when none was given. Limiters read it only when a call must wait.
func PriorityOf(ctx context.Context) Priority {
	p, _ := ctx.Value(priorityKey{}).(Priority)
	return p
}

// WithQueueWait returns a copy of ctx whose calls may wait at most d in a
// limiter's queue: a call not admitted within d of the moment it queued
// fails with an error matching ErrQueueTimeout (and not
// context.DeadlineExceeded), as soon as its admission is known to come
// later, or at d. The context's own deadline still bounds the whole
// request (queue wait, the request itself, reading the response); the
// budget bounds only the wait in the queue. d ≤ 0 means no budget (the
// default); a call admitted at once never reads it. It does not block; it
// is safe for concurrent use.
func WithQueueWait(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, queueWaitKey{}, max(d, 0))
}

// QueueWaitOf returns the queue-wait budget WithQueueWait gave ctx, or 0
// (no budget) when none was given. Limiters read it only when a call must
// wait.
func QueueWaitOf(ctx context.Context) time.Duration {
	d, _ := ctx.Value(queueWaitKey{}).(time.Duration)
	return d
}
