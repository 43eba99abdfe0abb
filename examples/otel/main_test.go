package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestRun runs the example and checks the exported data: every call
// counted once as admitted, the tight one as refused, the histogram's count
// equal to the admissions, an empty queue at the end.
func TestRun(t *testing.T) {
	const calls = 12
	rm, err := collect(context.Background(), calls)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	var histCount uint64
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			switch d := mt.Data.(type) {
			case metricdata.Sum[int64]:
				if mt.Name == "ratesem.events" && !d.IsMonotonic {
					t.Errorf("ratesem.events is not monotonic")
				}
				for _, p := range d.DataPoints {
					k, _ := p.Attributes.Value(attribute.Key("kind"))
					got[mt.Name+"/"+k.AsString()] = p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					histCount += p.Count
					if len(p.Bounds) != 18 || p.Bounds[0] != 0.001 {
						t.Errorf("bounds %v; want 18 from 1 ms", p.Bounds)
					}
				}
			}
		}
	}
	if got["ratesem.events/admitted"] != calls || got["ratesem.events/refused"] != 1 || got["ratesem.queue.depth/"] != 0 {
		t.Errorf("data points %v; want %d admitted, 1 refused, depth 0", got, calls)
	}
	if histCount != calls {
		t.Errorf("histogram count %d, want %d", histCount, calls)
	}

	var out bytes.Buffer
	if err := run(context.Background(), &out, 6); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ratesem.events{kind=admitted} 6", "ratesem.events{kind=refused} 1", "ratesem.queue.depth 0", "ratesem.wait count 6"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}
}
