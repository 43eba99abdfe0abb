package remote

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/internal/rstore"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// BenchmarkDecideRelease: a whole call through this package (Decide, then
// Release) on one limiter at 1, 16 and 64 goroutines, against one
// decision of rstore's Store.Admit (one EVALSHA a call, the floor of a
// design without batching) in the same run. It reports calls/s and round
// trips per call, and the releases dropped (the release queue full: the
// lease covers them, but they cost no round trip) per call (go test -run
// XXX -bench DecideRelease -count 3).
func BenchmarkDecideRelease(b *testing.B) {
	srv := redistest.Start(b)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), PoolSize: 64, MinIdleConns: 64})
	b.Cleanup(func() { c.Close() })
	h := &batchHook{}
	c.AddHook(h)
	st, err := rstore.New(c, "bench", rstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	e, err := New(Config{Store: st})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.Close() })
	fw := &rstore.Spec{Kind: rstore.FixedWindow, Limit: window.Limit{N: 1 << 40, Per: time.Hour}}
	cs := []rstore.Charge{{Rule: "r", Key: "k", Spec: fw, Weight: 1}}
	ctx := context.Background()
	ops := []struct {
		name string
		op   func() error
	}{
		{"rstore-Admit", func() error { _, err := st.Admit(ctx, "a", cs); return err }},
		{"Decide+Release", func() error {
			o, err := e.Decide(ctx, "d", cs)
			if err == nil && o.Call == nil {
				err = fmt.Errorf("refused: %+v", o)
			}
			if err == nil {
				o.Call.Release()
			}
			return err
		}},
	}
	for _, g := range []int{1, 16, 64} {
		for _, o := range ops {
			b.Run(fmt.Sprintf("g%d/%s", g, o.name), func(b *testing.B) {
				run := func(n int) {
					var left atomic.Int64
					left.Store(int64(n))
					var wg sync.WaitGroup
					for range g {
						wg.Go(func() {
							for left.Add(-1) >= 0 {
								if err := o.op(); err != nil {
									b.Error(err)
									return
								}
							}
						})
					}
					wg.Wait()
				}
				run(4 * g) // warm: connections, scripts
				for len(e.rel) > 0 {
					time.Sleep(time.Millisecond)
				}
				h.reset()
				dropped := e.Stats().ReleasesDropped
				b.ResetTimer()
				run(b.N)
				for len(e.rel) > 0 { // the releases' round trips count
					time.Sleep(100 * time.Microsecond)
				}
				b.StopTimer()
				trips, _ := h.reset()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
				b.ReportMetric(float64(trips)/float64(b.N), "round-trips/op")
				b.ReportMetric(float64(e.Stats().ReleasesDropped-dropped)/float64(b.N), "dropped-releases/op")
			})
		}
	}
}
