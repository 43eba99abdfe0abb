// Command otel exports ratesem's counters to OpenTelemetry metrics: a
// ratesem.Metrics fed by a RateSemaphore's observer is read by observable
// instruments at each collection (the event totals and the queue depth),
// and the waits of admitted calls go to an OTel histogram with the same
// exponential buckets.
//
// It lives in a module of its own (this directory's go.mod) so that the
// library's module does not depend on OpenTelemetry:
//
//	cd examples/otel && go run .
//
// It fans out calls through a limit of 5 per 100 ms, and one call heavier
// than the limit (refused at once with ratesem.ErrWeightTooLarge),
// collects once through a ManualReader and prints the data points.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/semaphore"
)

func main() {
	if err := run(context.Background(), os.Stdout, 20); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// Instrument registers on meter the instruments that publish m and returns
// the observer to give the limiters: it feeds m and records each admitted
// call's wait (in seconds) in the histogram ratesem.wait. The totals are
// one monotonic counter, ratesem.events, with a kind attribute; the queue
// depth is the up-down counter ratesem.queue.depth. Both are read from m
// at each collection.
func Instrument(meter metric.Meter, m *ratesem.Metrics) (func(ratesem.Event), error) {
	events, err := meter.Int64ObservableCounter("ratesem.events",
		metric.WithDescription("Events of the rate limiters, by kind."), metric.WithUnit("{event}"))
	if err != nil {
		return nil, err
	}
	depth, err := meter.Int64ObservableUpDownCounter("ratesem.queue.depth",
		metric.WithDescription("Calls waiting in the limiters' queues."), metric.WithUnit("{call}"))
	if err != nil {
		return nil, err
	}
	var bounds []float64
	for _, b := range m.Snapshot().Wait.Bounds {
		bounds = append(bounds, b.Seconds())
	}
	wait, err := meter.Float64Histogram("ratesem.wait",
		metric.WithDescription("How long admitted calls waited for the limiter."), metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(bounds...))
	if err != nil {
		return nil, err
	}
	kinds := []ratesem.EventKind{ratesem.Admitted, ratesem.Refused, ratesem.Cancelled,
		ratesem.Throttled, ratesem.Paused, ratesem.Retried, ratesem.Evicted, ratesem.Reconciled, ratesem.Distrusted, ratesem.Unsettled}
	attrs := make([]metric.ObserveOption, len(kinds))
	for i, k := range kinds {
		attrs[i] = metric.WithAttributes(attribute.String("kind", k.String()))
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := m.Snapshot()
		totals := []uint64{s.Admitted, s.Refused, s.Cancelled, s.Throttled, s.Paused, s.Retried, s.Evicted, s.Reconciled, s.Distrusted, s.Unsettled}
		for i, v := range totals {
			o.ObserveInt64(events, int64(v), attrs[i])
		}
		o.ObserveInt64(depth, s.QueueDepth)
		return nil
	}, events, depth)
	if err != nil {
		return nil, err
	}
	return func(e ratesem.Event) {
		m.Observe(e)
		if e.Kind == ratesem.Admitted {
			// The observer must not block: the SDK's Record only adds to
			// in-memory aggregates.
			wait.Record(context.Background(), e.Wait.Seconds())
		}
	}, nil
}

// run fans out calls through a RateSemaphore observed by OTel instruments,
// collects once and prints the data points to out.
func run(ctx context.Context, out io.Writer, calls int) error {
	rm, err := collect(ctx, calls)
	if err != nil {
		return err
	}
	print(out, rm)
	return nil
}

// collect runs the calls and returns one collection of the metrics.
func collect(ctx context.Context, calls int) (metricdata.ResourceMetrics, error) {
	var rm metricdata.ResourceMetrics
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(ctx)

	var m ratesem.Metrics
	observe, err := Instrument(provider.Meter("github.com/ratesem/ratesem/examples/otel"), &m)
	if err != nil {
		return rm, err
	}
	sem := semaphore.New(5, 100*time.Millisecond, semaphore.WithObserver(observe))

	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * time.Millisecond) // arrive in order
			_ = sem.Do(ctx, func(context.Context) error { time.Sleep(5 * time.Millisecond); return nil })
		})
	}
	// A call heavier than the limit: refused at once.
	if err := sem.Acquire(ctx, 6); !errors.Is(err, ratesem.ErrWeightTooLarge) {
		return rm, fmt.Errorf("the heavy call: %v, want ratesem.ErrWeightTooLarge", err)
	}
	wg.Wait()

	err = reader.Collect(ctx, &rm)
	return rm, err
}

// print writes the data points, one per line, sorted.
func print(out io.Writer, rm metricdata.ResourceMetrics) {
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			switch d := mt.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s%s %d", mt.Name, labels(p.Attributes), p.Value))
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s count %d sum %.3fs", mt.Name, p.Count, p.Sum))
					var cum uint64
					for i, c := range p.BucketCounts {
						cum += c
						if c != 0 && i < len(p.Bounds) {
							lines = append(lines, fmt.Sprintf("%s bucket le=%gs %d", mt.Name, p.Bounds[i], cum))
						}
					}
				}
			}
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Fprintln(out, l)
	}
}

func labels(s attribute.Set) string {
	if s.Len() == 0 {
		return ""
	}
	v, _ := s.Value("kind")
	return "{kind=" + v.AsString() + "}"
}
