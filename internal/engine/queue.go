package engine

import (
	"container/heap"
	"fmt"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/wake"
)

// The waiting engine. Each limiter has a queue (lqueue) of the waiters it
// refused at their latest try, or that arrived while it had such a waiter
// (they queue behind it), in arrival order. A waiter is tried again only
// when a limiter whose queue it heads may have changed its answer: a
// Release or cancellation on that limiter, the instant the limiter named
// for its head (kept in the pool's min-heap of wake instants, with one
// timer set for the top), or SetLimit. So the work of a call touches only
// its own limiters and the top of the heap, never other keys' waiters.
//
// FIFO per limiter: a waiter may be admitted only when, on each of its
// limiters, no earlier waiter is queued (behindLocked). A waiter that a
// limiter admits at a try leaves that limiter's queue even when another
// limiter refuses it: it no longer holds up the calls behind it there (a
// rule with room is not left idle behind one instrument's limit). The
// oldest waiter is never behind anyone, so overlapping rule sets cannot
// deadlock.

// lqueue is the queue of one limiter, allocated while it has waiters.
type lqueue struct {
	lim        *limiter
	head, tail *qnode
	wake       time.Time // when the head may be admitted; valid while hidx ≥ 0
	hidx       int       // index in Pool.wakes; -1 when not there
	pending    bool      // in Pool.pend
}

// wakeHeap is a min-heap of queues by wake instant (container/heap).
type wakeHeap []*lqueue

// Len implements heap.Interface.
func (h wakeHeap) Len() int { return len(h) }

// Less implements heap.Interface: the earlier wake instant first.
func (h wakeHeap) Less(i, j int) bool { return h[i].wake.Before(h[j].wake) }

// Swap implements heap.Interface, keeping each queue's index current.
func (h wakeHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hidx, h[j].hidx = i, j
}

// Push implements heap.Interface; x is an *lqueue.
func (h *wakeHeap) Push(x any) {
	q := x.(*lqueue)
	q.hidx = len(*h)
	*h = append(*h, q)
}

// Pop implements heap.Interface: it removes the last queue and marks it
// out of the heap.
func (h *wakeHeap) Pop() any {
	old := *h
	q := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	q.hidx = -1
	return q
}

// behindLocked reports whether an earlier waiter is queued on n's limiter.
func behindLocked(n *qnode) bool {
	q := n.held().lim.q
	if q == nil || q.head == nil {
		return false
	}
	if n.inq {
		return q.head != n
	}
	return q.head.w.rank.Before(n.w.rank)
}

// enqueueLocked puts n in its limiter's queue, in arrival order.
func (p *Engine) enqueueLocked(n *qnode) {
	l := n.held().lim
	if l.q == nil {
		l.q = &lqueue{lim: l, hidx: -1}
	}
	q := l.q
	at := q.tail
	for at != nil && n.w.rank.Before(at.w.rank) {
		at = at.prev
	}
	n.prev = at
	if at == nil {
		n.next = q.head
		q.head = n
	} else {
		n.next = at.next
		at.next = n
	}
	if n.next != nil {
		n.next.prev = n
	} else {
		q.tail = n
	}
	n.inq = true
}

// dequeueLocked takes n out of its limiter's queue; when n was its head,
// the next one must be tried.
func (p *Engine) dequeueLocked(n *qnode) {
	q := n.held().lim.q
	if n.prev != nil {
		n.prev.next = n.next
	} else {
		q.head = n.next
		if q.hidx >= 0 {
			heap.Remove(&p.wakes, q.hidx)
		}
		p.markPending(q)
	}
	if n.next != nil {
		n.next.prev = n.prev
	} else {
		q.tail = n.prev
	}
	n.prev, n.next, n.inq = nil, nil, false
}

// markPending makes settleLocked try q's head again.
func (p *Engine) markPending(q *lqueue) {
	if !q.pending {
		q.pending = true
		p.pend = append(p.pend, q)
	}
}

// setWakeLocked files q in the heap for the instant its head n named at
// its latest refusal, or takes it out when there is none (n nil or not
// refused; refused until a release) or it is not after now.
func (p *Engine) setWakeLocked(q *lqueue, n *qnode, now time.Time) {
	var at time.Time
	if n != nil && n.refused && n.when != 0 {
		at = p.instant(n.when)
	}
	switch {
	case !at.After(now):
		if q.hidx >= 0 {
			heap.Remove(&p.wakes, q.hidx)
		}
	case q.hidx >= 0:
		if !q.wake.Equal(at) {
			q.wake = at
			heap.Fix(&p.wakes, q.hidx)
		}
	default:
		q.wake = at
		heap.Push(&p.wakes, q)
	}
}

// tryWaiterLocked tries to admit w at now, unless it is queued behind an
// earlier waiter on one of its limiters (it then joins that queue), and
// files it in the queues of the limiters that refuse it. It grants w, or
// fails it when its admission would come after its deadline.
func (p *Engine) tryWaiterLocked(w *waiter, now time.Time) {
	behind := false
	for i := range w.nodes {
		n := &w.nodes[i]
		if behindLocked(n) {
			behind = true
			if !n.inq {
				p.enqueueLocked(n)
			}
		}
	}
	if behind {
		return
	}
	// Decided outside the lock (Redis mode, asking): every node refused
	// with no instant, w holds its place at the head of its queues
	// meanwhile.
	at, needRelease, ok := p.book.decideLocked(w, now)
	if ok {
		w.granted = now
		p.finishLocked(w, nil)
		return
	}
	if !needRelease && !w.qdead.IsZero() && at.After(w.qdead) &&
		(w.deadline.IsZero() || !w.qdead.After(w.deadline)) {
		// Its admission comes after its queue-wait budget, which runs out
		// no later than its deadline: fail now.
		p.finishLocked(w, queueTimeout(w, now, at))
		return
	}
	if !needRelease && !w.deadline.IsZero() && at.After(w.deadline) {
		// Its admission comes after its deadline: fail now rather than
		// when the deadline fires (golang/go#54541).
		p.finishLocked(w, &wake.DeadlineError{Sentinel: ratesem.ErrDeadline, Wait: at.Sub(now)})
		return
	}
	for i := range w.nodes {
		n := &w.nodes[i]
		switch {
		case n.refused && !n.inq:
			p.enqueueLocked(n)
		case !n.refused && n.inq:
			p.dequeueLocked(n)
		}
		if q := w.held[i].lim.q; n.refused && q.head == n {
			p.setWakeLocked(q, n, now)
		}
	}
}

// decideLocked is the bookkeeping's decision for w, at the head of all its
// queues, at now: admitted (ok), or refused with the instant it could be
// admitted (at; needRelease when only a release can help), each refusing
// node marked; or, asking, every node refused with no instant (zero at,
// needRelease false): the decision is being made outside the lock (Redis
// mode, redisMode.decideLocked) and w keeps its place meanwhile. In
// process the window policies decide under the lock (admitLocked).
func (b *inProc) decideLocked(w *waiter, now time.Time) (at time.Time, needRelease, ok bool) {
	return (*Engine)(b).admitLocked(w.held, w.nodes, now)
}

// countLocked counts w in its limiters' waiting calls (WithMaxQueue,
// Stats.Waiting).
func (p *Engine) countLocked(w *waiter) {
	for i := range w.held {
		w.held[i].lim.waiting++
	}
	w.uncounted = false
}

// finishLocked ends w's wait: granted when err is nil, failed otherwise.
func (p *Engine) finishLocked(w *waiter, err error) {
	for i := range w.nodes {
		if n := &w.nodes[i]; n.inq {
			p.dequeueLocked(n)
		}
	}
	p.waiters.Remove(w.elem)
	if !w.uncounted {
		for i := range w.held {
			w.held[i].lim.waiting--
		}
	}
	w.done, w.err = true, err
	if p.hook != nil {
		p.hook(w, true)
	}
	close(w.ready)
}

// settleLocked tries the heads of the pending queues until each is empty
// or its head is refused again, then sets the timer for the earliest wake
// instant. Every try either admits or fails a waiter, takes it out of a
// queue, or ends that queue's walk, so it terminates.
func (p *Engine) settleLocked(now time.Time) {
	for len(p.pend) > 0 {
		q := p.pend[len(p.pend)-1]
		p.pend[len(p.pend)-1] = nil
		p.pend = p.pend[:len(p.pend)-1]
		for q.head != nil {
			n := q.head
			p.tryWaiterLocked(n.w, now)
			if q.head == n {
				break // still refused here, or queued behind another limiter's head
			}
		}
		q.pending = false
		p.setWakeLocked(q, q.head, now)
		if q.head == nil && q.hidx < 0 && !q.pending && q.lim.q == q {
			q.lim.q = nil
		}
	}
	if len(p.wakes) == 0 {
		p.timer.Stop() // only a Release, a cancellation or SetLimit can help
		return
	}
	p.timer.Arm(p.clock, now, p.wakes[0].wake, p.onTimer)
}

func (p *Engine) onTimer() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.timer.Fired()
	if p.onWake != nil {
		p.onWake()
	}
	now := p.now()
	for len(p.wakes) > 0 && !p.wakes[0].wake.After(now) {
		p.markPending(heap.Pop(&p.wakes).(*lqueue))
	}
	p.settleLocked(now)
}

// queueTimeout is the error of w, which queued at w.since, when its
// queue-wait budget ran out at now, or its admission (at, when not zero)
// would come after the budget. It matches ratesem.ErrQueueTimeout and not
// context.DeadlineExceeded.
func queueTimeout(w *waiter, now, at time.Time) error {
	budget := w.qdead.Sub(w.since)
	if at.IsZero() {
		return fmt.Errorf("%w: still queued after %v", ratesem.ErrQueueTimeout, budget)
	}
	return fmt.Errorf("%w: admission in %v, budget %v (%v left)", ratesem.ErrQueueTimeout, at.Sub(now), budget, w.qdead.Sub(now))
}

// expire fails w with ratesem.ErrQueueTimeout when its queue-wait budget
// ran out before it was admitted. A waiter admitted meanwhile keeps its
// admission: it came no later than the budget.
func (p *Engine) expire(w *waiter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.done {
		return
	}
	now := p.now()
	p.finishLocked(w, queueTimeout(w, now, time.Time{}))
	p.settleLocked(now)
}
