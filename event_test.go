package ratesem_test

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/ratesem/ratesem"
)

func TestEventKindString(t *testing.T) {
	want := map[ratesem.EventKind]string{
		ratesem.Admitted: "admitted", ratesem.Queued: "queued", ratesem.Refused: "refused",
		ratesem.Cancelled: "cancelled", ratesem.Throttled: "throttled", ratesem.Paused: "paused",
		ratesem.Retried: "retried", ratesem.Evicted: "evicted", ratesem.Reconciled: "reconciled",
		ratesem.Distrusted: "distrusted", ratesem.Unsettled: "unsettled", 0: "EventKind(0)", 200: "EventKind(200)",
	}
	for k, s := range want {
		if got := k.String(); got != s {
			t.Errorf("EventKind(%d).String() = %q, want %q", int(k), got, s)
		}
	}
}

// The wait histogram's buckets: a bound is inclusive, a negative wait
// counts as 0, the longest waits go to +Inf only.
func TestMetricsBuckets(t *testing.T) {
	var m ratesem.Metrics
	for _, w := range []time.Duration{
		-time.Hour, 0, time.Millisecond, // ≤ 1ms
		time.Millisecond + 1, 2 * time.Millisecond, // ≤ 2ms
		131072 * time.Millisecond,                  // the last bound
		131072*time.Millisecond + 1, math.MaxInt64, // +Inf
	} {
		m.Observe(ratesem.Event{Kind: ratesem.Admitted, Wait: w})
	}
	h := m.Snapshot().Wait
	if len(h.Bounds) != 18 || len(h.Counts) != 18 || h.Bounds[0] != time.Millisecond || h.Bounds[17] != 131072*time.Millisecond {
		t.Fatalf("bounds %v, counts %v", h.Bounds, h.Counts)
	}
	if h.Counts[0] != 3 || h.Counts[1] != 5 || h.Counts[16] != 5 || h.Counts[17] != 6 || h.Count != 8 {
		t.Errorf("cumulative counts %v, count %d; want 3, 5, …, 5, 6 and 8", h.Counts, h.Count)
	}
	for i := 1; i < len(h.Counts); i++ {
		if h.Counts[i] < h.Counts[i-1] {
			t.Errorf("counts not cumulative: %v", h.Counts)
		}
	}
	// Sum adds the waits (a negative one as 0).
	var small ratesem.Metrics
	small.Observe(ratesem.Event{Kind: ratesem.Admitted, Wait: 3 * time.Millisecond})
	small.Observe(ratesem.Event{Kind: ratesem.Admitted, Wait: -time.Second})
	if s := small.Snapshot().Wait.Sum; s != 3*time.Millisecond {
		t.Errorf("Sum = %v, want 3ms", s)
	}
}

// Totals per kind and the queue depth gauge: Queued raises it, the end of
// a queued call lowers it, the end of a call that never queued does not.
func TestMetricsTotalsAndDepth(t *testing.T) {
	var m ratesem.Metrics
	for _, e := range []ratesem.Event{
		{Kind: ratesem.Queued}, {Kind: ratesem.Queued}, {Kind: ratesem.Queued},
		{Kind: ratesem.Admitted, Queued: true},
		{Kind: ratesem.Refused, Queued: true, Err: ratesem.ErrDeadline},
		{Kind: ratesem.Refused, Err: ratesem.ErrWeightTooLarge},
		{Kind: ratesem.Cancelled},
		{Kind: ratesem.Throttled, Status: 429}, {Kind: ratesem.Paused}, {Kind: ratesem.Retried, Attempt: 1},
		{Kind: ratesem.Evicted}, {Kind: ratesem.Reconciled, Weight: 5}, {Kind: ratesem.Distrusted}, {Kind: ratesem.Unsettled, Weight: 60},
		{Kind: 0}, {Kind: 200},
	} {
		m.Observe(e)
	}
	s := m.Snapshot()
	got := [...]uint64{s.Admitted, s.Refused, s.Cancelled, s.Throttled, s.Paused, s.Retried, s.Evicted, s.Reconciled, s.Distrusted, s.Unsettled}
	if want := [...]uint64{1, 2, 1, 1, 1, 1, 1, 1, 1, 1}; got != want {
		t.Errorf("totals %v, want %v", got, want)
	}
	if s.QueueDepth != 1 {
		t.Errorf("QueueDepth = %d, want 1", s.QueueDepth)
	}
}

// Observe from many goroutines loses nothing (run with -race).
func TestMetricsConcurrent(t *testing.T) {
	var m ratesem.Metrics
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				m.Observe(ratesem.Event{Kind: ratesem.Queued})
				m.Observe(ratesem.Event{Kind: ratesem.Admitted, Queued: true, Wait: time.Millisecond})
				_ = m.Snapshot()
			}
		})
	}
	wg.Wait()
	s := m.Snapshot()
	if s.Admitted != 8000 || s.Wait.Count != 8000 || s.QueueDepth != 0 || s.Wait.Sum != 8000*time.Millisecond {
		t.Errorf("admitted %d, count %d, depth %d, sum %v", s.Admitted, s.Wait.Count, s.QueueDepth, s.Wait.Sum)
	}
}

func BenchmarkMetricsObserve(b *testing.B) {
	var m ratesem.Metrics
	e := ratesem.Event{Kind: ratesem.Admitted, Wait: 3 * time.Millisecond}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Observe(e)
		}
	})
}
