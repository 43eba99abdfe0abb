// Package sched orders the waiters of a limiter by priority class, within
// the starvation bound MaxOvertakes, as one total order fixed when
// each waiter arrives: limiters that share waiters (a call under several
// rules) then agree on who goes first, so they cannot deadlock.
package sched

import (
	"context"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/callctx"
)

// MaxOvertakes is the starvation bound of the priority classes, per
// limiter: a waiting call is overtaken by at most MaxOvertakes calls of
// each higher class that arrived after it. ratesem.Priority's doc states
// its value for users; change both together.
const MaxOvertakes = 16

// PriorityOf returns the priority ratesem.WithPriority gave ctx, or
// ratesem.PriorityNormal when none was given. Limiters read it only when a
// call must wait.
func PriorityOf(ctx context.Context) ratesem.Priority {
	return ratesem.Priority(callctx.Priority(ctx))
}

// QueueWaitOf returns the queue-wait budget ratesem.WithQueueWait gave ctx,
// or 0 (no budget) when none was given. Limiters read it only when a call
// must wait.
func QueueWaitOf(ctx context.Context) time.Duration { return callctx.QueueWait(ctx) }

// Class returns p clamped to the classes: ratesem.PriorityLow,
// PriorityNormal or PriorityHigh.
func Class(p ratesem.Priority) ratesem.Priority {
	return min(max(p, ratesem.PriorityLow), ratesem.PriorityHigh)
}

// Rank is a waiter's place in the order; compare with Before.
//
// The order is lexicographic on (k1, k2, seq). With H the High arrivals and
// N the Normal arrivals before a waiter, K = MaxOvertakes:
//
//	High   (its High index h):   k1 = 2h,          k2 = 0
//	Normal (its Normal index n): k1 = 2(H+K) + 1,  k2 = 2n
//	Low:                         k1 = 2(H+K) + 1,  k2 = 2(N+K) + 1
//
// A High waiter precedes an older Normal or Low one iff h ≤ H+K: at most K
// later Highs overtake it. A Normal precedes an older Low iff no High
// arrived between them and n ≤ N+K: at most K later Normals. Within a
// class, k1 and k2 grow with arrival, so the class is FIFO; an older waiter
// of a higher class always precedes (its h ≤ H, or its H is smaller or its
// n ≤ N). Fixed tuples compared lexicographically form a total order.
type Rank struct{ k1, k2, seq uint64 }

// Before reports whether a is served before b.
func (a Rank) Before(b Rank) bool {
	if a.k1 != b.k1 {
		return a.k1 < b.k1
	}
	if a.k2 != b.k2 {
		return a.k2 < b.k2
	}
	return a.seq < b.seq
}

// Ranker hands out the ranks of one limiter or pool, in arrival order. The
// zero Ranker is ready; it is not safe for concurrent use (its owner's lock
// covers it).
type Ranker struct{ highs, normals, seq uint64 }

// Next returns the rank of a waiter of priority p arriving now.
func (r *Ranker) Next(p ratesem.Priority) Rank {
	const k = MaxOvertakes
	r.seq++
	switch Class(p) {
	case ratesem.PriorityHigh:
		r.highs++
		return Rank{k1: 2 * r.highs, seq: r.seq}
	case ratesem.PriorityNormal:
		r.normals++
		return Rank{k1: 2*(r.highs+k) + 1, k2: 2 * r.normals, seq: r.seq}
	default:
		return Rank{k1: 2*(r.highs+k) + 1, k2: 2*(r.normals+k) + 1, seq: r.seq}
	}
}
