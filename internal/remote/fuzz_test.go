package remote

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/internal/rstore"
)

// FuzzRefusal feeds the engine refusals with any numbers a server could
// send (waits of any sign and size, any refusing index, any flags) and
// charges of any weight and Per: Acquire never panics, never spins (at most
// one round trip per MinRetry), and ends with an error matching
// context.DeadlineExceeded (or a weight error) when Redis never admits.
func FuzzRefusal(f *testing.F) {
	f.Add(int64(0), 0, false, false, int64(1), int64(time.Second))
	f.Add(int64(-1), -1, true, false, int64(1), int64(1))
	f.Add(int64(1<<63-1), 1<<30, true, true, int64(5), int64(0))
	f.Add(int64(time.Millisecond), 0, false, true, int64(0), int64(-time.Second))
	f.Fuzz(func(t *testing.T, wait int64, refused int, release, paused bool, weight, per int64) {
		synctest.Test(t, func(t *testing.T) {
			fk := newFake()
			d := rstore.Decision{Wait: time.Duration(wait), Refused: refused, Release: release, Paused: paused}
			fk.decide = func() *rstore.Decision { return &d }
			e, err := New(Config{Store: fk, MaxPause: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			cs := []rstore.Charge{charge("a", spec(5, time.Duration(per)), weight), charge("b", spec(1, time.Second), 1)}
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			_, err = acquire(e, ctx, "s", cs)
			if err == nil {
				t.Fatal("admitted though Redis never admits")
			}
			if weight >= 0 && weight <= 5 && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%v; want DeadlineExceeded", err)
			}
			if a, _, _ := fk.counts(); a > 102 {
				t.Fatalf("%d round trips in 100 ms", a)
			}
		})
	})
}
