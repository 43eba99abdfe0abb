package clientpool_test

import (
	"context"
	"math"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/window"
)

// FuzzPoolArithmetic feeds the pool's numeric entry points (merged
// weights, a server's usage count through Ticket.ObserveHeaders and
// Reconcile, a Retry-After) with any int64: nothing panics, no call
// heavier than the limit is admitted, the window never counts a negative
// or wrapped number, no throttle pauses beyond the cap, and no more than N
// units start in any window afterwards.
func FuzzPoolArithmetic(f *testing.F) {
	f.Add(int64(1), int64(1), int64(0), int64(0))
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64-998), int64(5), int64(-1))
	f.Add(int64(2), int64(3), int64(math.MaxInt64), int64(math.MaxInt64))
	f.Add(int64(-1), int64(1), int64(math.MinInt64), int64(math.MinInt64))
	f.Add(int64(0), int64(10), int64(-5), int64(int64(2*time.Second)))
	f.Fuzz(func(t *testing.T, w1, w2, used, retryAfter int64) {
		synctest.Test(t, func(t *testing.T) {
			const n, maxPause = 10, time.Minute
			r := clientpool.Rule{Name: "w", Limit: window.Limit{N: n, Per: time.Second}, PauseOnThrottle: true,
				Usage: func(http.Header) (int64, bool) { return used, true }}
			fixed := clientpool.Rule{Name: "f", Limit: window.Limit{N: n, Per: time.Second},
				Window: func(l window.Limit) window.Policy { return window.NewFixedWindow(l) },
				Usage:  func(http.Header) (int64, bool) { return used, true }}
			p := newPool(t, []clientpool.Rule{r, fixed}, clientpool.WithMaxPause(maxPause))
			ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			defer cancel()
			cs := []clientpool.Charge{{Rule: "w", Key: "k", Weight: w1}, {Rule: "w", Key: "k", Weight: w2}, {Rule: "f", Key: "k", Weight: 1}}
			if tk, err := p.Acquire(ctx, cs...); err == nil {
				if w1 < 0 || w2 < 0 || w1 > n || w2 > n || w1+w2 > n {
					t.Fatalf("admitted weights %d + %d under N = %d", w1, w2, n)
				}
				tk.ObserveHeaders(http.Header{})
				p.Throttled(clientpool.Throttle{Status: http.StatusTooManyRequests, RetryAfter: time.Duration(retryAfter)}, tk.Charges())
				tk.Release()
			}
			_ = p.Reconcile("w", "k", used)
			_ = p.Reconcile("f", "k", used)
			for _, ks := range p.Snapshot() {
				if ks.Used < 0 || ks.Used > 3*n {
					t.Fatalf("%s[%s]: Used = %d", ks.Rule, ks.Key, ks.Used)
				}
				if !ks.PausedUntil.IsZero() && time.Until(ks.PausedUntil) > maxPause {
					t.Fatalf("%s[%s] paused for %v, above the cap %v", ks.Rule, ks.Key, time.Until(ks.PausedUntil), maxPause)
				}
			}
			// From now on at most N units start in any Per (completion window).
			begin := time.Now()
			var starts []time.Duration
			for time.Since(begin) < 3*time.Second {
				tk, err := p.Acquire(context.Background(), clientpool.Charge{Rule: "w", Key: "k", Weight: 1})
				if err != nil {
					t.Fatal(err)
				}
				starts = append(starts, time.Since(begin))
				tk.Release()
			}
			for i := range starts {
				j := i
				for j < len(starts) && starts[j]-starts[i] < time.Second {
					j++
				}
				if j-i > n {
					t.Fatalf("%d starts within 1s from %v", j-i, starts[i])
				}
			}
		})
	})
}
