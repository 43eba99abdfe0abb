package ratesem

import (
	"context"
	"time"

	"github.com/ratesem/ratesem/internal/callctx"
)

// Priority is the scheduling class of a call that must wait: among the
// calls queued on one limiter, a higher class is served first, within a
// starvation bound. There are three classes: PriorityLow,
// PriorityNormal (the zero value: a context without WithPriority) and
// PriorityHigh; a value above PriorityHigh counts as PriorityHigh and one
// below PriorityLow as PriorityLow.
//
// A priority changes only the order of waiters: a call admitted at once is
// admitted whatever its class, and within a class waiters are served in
// arrival order.
//
// The starvation bound, per limiter: a waiting call is overtaken by at most
// 16 calls of each higher class that arrived after it (so a PriorityLow call
// by at most 32 in all, a PriorityNormal one by at most 16, a PriorityHigh
// one by none); after that, later calls of a higher class queue behind it.
// A call never waits behind a call of a lower class that arrived after it.
// "Arrived" counts calls that had to wait: a call admitted at once
// overtakes nobody.
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

// WithPriority returns a copy of ctx that gives the calls made with it the
// priority p (see Priority) in every limiter of this module that queues:
// semaphore.RateSemaphore, clientpool.Pool and an httpclient.Transport
// (through the request's context). It does not block; it is safe for
// concurrent use, like every context.
func WithPriority(ctx context.Context, p Priority) context.Context {
	// p clamped to the classes: PriorityLow, PriorityNormal or PriorityHigh.
	return callctx.WithPriority(ctx, int8(min(max(p, PriorityLow), PriorityHigh)))
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
	return callctx.WithQueueWait(ctx, max(d, 0))
}
