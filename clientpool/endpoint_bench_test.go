package clientpool_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/window"
)

// BenchmarkClassifyEndpoints classifies a request against a table of n
// literal endpoints (what every table on 3c9e6ad was: exact paths), hit
// in the middle; parallel runs it on every P at once. Compare with the
// same benchmark on 3c9e6ad.
func BenchmarkClassifyEndpoints(b *testing.B) {
	for _, n := range []int{10, 1000, 5000} {
		t := clientpool.Table{Rules: []clientpool.Rule{{Name: "r", Limit: window.Limit{N: 1 << 40, Per: time.Second}}}}
		for i := range n {
			t.Endpoints = append(t.Endpoints, clientpool.Endpoint{Method: "GET", Path: fmt.Sprintf("/api/v3/endpoint%d/x", i),
				Costs: []clientpool.Cost{{Rule: "r", Units: 1}}})
		}
		start := time.Now()
		p, err := clientpool.New(t)
		if err != nil {
			b.Fatal(err)
		}
		built := time.Since(start)
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://api.test/api/v3/endpoint%d/x?symbol=BTC", n/2), nil)
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			b.Logf("New: %v", built)
			b.ReportAllocs()
			for b.Loop() {
				if cs, err := p.Classify(req); err != nil || len(cs) != 1 {
					b.Fatal(cs, err)
				}
			}
		})
		b.Run(fmt.Sprintf("n=%d/parallel", n), func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if cs, err := p.Classify(req); err != nil || len(cs) != 1 {
						b.Fatal(cs, err)
					}
				}
			})
		})
	}
}
