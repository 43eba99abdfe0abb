package ratesem

import (
	"slices"
	"sync/atomic"
	"time"
)

// waitBounds are the upper bounds of the wait histogram's buckets: 1 ms
// doubled 17 times, up to 131.072 s; a last bucket (+Inf) holds the rest.
var waitBounds = func() []time.Duration {
	b := make([]time.Duration, 18)
	for i := range b {
		b[i] = time.Millisecond << i
	}
	return b
}()

// Metrics turns Events into the counters a Prometheus or OpenTelemetry
// exporter wants: monotonic totals per kind, the distribution of the waits
// of admitted calls, and the current queue depth. Feed it as an observer
// (semaphore.WithObserver(m.Observe)); one Metrics may observe several
// limiters, which then add up. Read it with Snapshot.
//
// The zero Metrics is ready to use. It is safe for concurrent use; Observe
// takes no lock and does not allocate.
type Metrics struct {
	counts     [len(kindNames)]atomic.Uint64 // per EventKind
	depth      atomic.Int64
	waitSum    atomic.Int64      // ns
	waitCounts [19]atomic.Uint64 // per bucket, not cumulative; the last is +Inf
}

// Observe counts e. It never blocks.
func (m *Metrics) Observe(e Event) {
	if e.Queued && (e.Kind == Admitted || e.Kind == Refused || e.Kind == Cancelled) {
		m.depth.Add(-1)
	}
	if int(e.Kind) < len(m.counts) {
		m.counts[e.Kind].Add(1)
	}
	switch e.Kind {
	case Admitted:
		w := max(e.Wait, 0)
		m.waitSum.Add(int64(w))
		i, _ := slices.BinarySearch(waitBounds, w) // the first bound ≥ w; len: +Inf
		m.waitCounts[i].Add(1)
	case Queued:
		m.depth.Add(1)
	}
}

// MetricsSnapshot is a reading of a Metrics. The totals count events since
// the Metrics was made and never go down (Prometheus counters, OpenTelemetry
// monotonic sums). A clientpool.Pool reports one event per charge of a
// call, so the counts it feeds are of charges, not calls.
type MetricsSnapshot struct {
	// Admitted, Refused and Cancelled count the events of those kinds:
	// calls (charges, from a Pool) admitted, refused and cancelled.
	Admitted, Refused, Cancelled uint64
	// Throttled counts throttled responses as reported: a clientpool.Pool
	// reports one per charge of the response, a Transport one per
	// response.
	Throttled uint64
	// Paused counts the pauses set (Paused events).
	Paused uint64
	// Retried counts the retries a Transport decided to send (Retried
	// events; one whose context ended during its sleep was not sent).
	Retried uint64
	// Evicted counts the idle limiters a Pool dropped (Evicted events).
	Evicted uint64
	// Reconciled counts the usage reports that made a window count more
	// (Reconciled events), not the units.
	Reconciled uint64
	// Distrusted counts the server reports not taken at their word
	// (Distrusted events).
	Distrusted uint64
	// Unsettled counts the calls that kept their estimate because their
	// reply's body was closed unread (Unsettled events): a clientpool.Pool
	// reports one per charge, a Transport one per response.
	Unsettled uint64
	// QueueDepth is the number of calls waiting now (Queued events not yet
	// followed by their end), a gauge.
	QueueDepth int64
	// Wait is the distribution of the waits (Event.Wait) of admitted calls
	// in fixed exponential buckets, in the cumulative form Prometheus uses:
	// Counts[i] is the number of waits ≤ Bounds[i], and Count (the +Inf
	// bucket) the number of all of them.
	Wait struct {
		// Bounds are the buckets' upper bounds: 1 ms, 2 ms, 4 ms, …
		// 131.072 s, the same in every snapshot.
		Bounds []time.Duration
		// Counts are the cumulative counts, one per bound.
		Counts []uint64
		// Count is the number of waits observed (the +Inf bucket).
		Count uint64
		// Sum is the waits added up (Prometheus's _sum, in time.Duration).
		Sum time.Duration
	}
}

// Snapshot returns the current counts. Each number is read atomically but
// not all at one instant: under concurrent Observe calls a snapshot may
// count an event in one field and not yet in another. Counts and Count
// always agree with each other. It allocates the two slices.
func (m *Metrics) Snapshot() MetricsSnapshot {
	s := MetricsSnapshot{
		Admitted: m.counts[Admitted].Load(), Refused: m.counts[Refused].Load(),
		Cancelled: m.counts[Cancelled].Load(), Throttled: m.counts[Throttled].Load(),
		Paused: m.counts[Paused].Load(), Retried: m.counts[Retried].Load(),
		Evicted: m.counts[Evicted].Load(), Reconciled: m.counts[Reconciled].Load(),
		Distrusted: m.counts[Distrusted].Load(), Unsettled: m.counts[Unsettled].Load(),
		QueueDepth: m.depth.Load(),
	}
	h := &s.Wait
	h.Bounds = append([]time.Duration(nil), waitBounds...)
	h.Counts = make([]uint64, len(waitBounds))
	h.Sum = time.Duration(m.waitSum.Load())
	var c uint64
	for i := range m.waitCounts {
		c += m.waitCounts[i].Load()
		if i < len(h.Counts) {
			h.Counts[i] = c
		}
	}
	h.Count = c
	return s
}
