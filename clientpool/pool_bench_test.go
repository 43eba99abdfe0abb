package clientpool_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/window"
)

// BenchmarkBytesPerKey reports the heap held per live key: 100 000
// distinct keys, each used once, under a completion-window rule.
func BenchmarkBytesPerKey(b *testing.B) {
	const keys = 100_000
	names := make([]string, keys)
	for i := range names {
		names[i] = "user-" + strconv.Itoa(i)
	}
	for b.Loop() {
		b.StopTimer()
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		p, err := clientpool.New(clientpool.Table{Rules: []clientpool.Rule{
			{Name: "user", Limit: window.Limit{N: 10, Per: time.Second}},
		}})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for _, k := range names {
			t, err := p.Acquire(context.Background(), clientpool.Charge{Rule: "user", Key: k, Weight: 1})
			if err != nil {
				b.Fatal(err)
			}
			t.Release()
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		if p.Len() != keys {
			b.Fatalf("Len = %d", p.Len())
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/keys, "B/key")
		runtime.KeepAlive(p)
		b.StartTimer()
	}
}

// BenchmarkAcquireRelease measures an admitted call under two rules.
func BenchmarkAcquireRelease(b *testing.B) {
	p, err := clientpool.New(clientpool.Table{Rules: []clientpool.Rule{
		{Name: "ip", Limit: window.Limit{N: 1 << 40, Per: time.Millisecond}},
		{Name: "account", Limit: window.Limit{N: 1 << 40, Per: time.Millisecond}},
	}})
	if err != nil {
		b.Fatal(err)
	}
	cs := []clientpool.Charge{{Rule: "ip", Weight: 1}, {Rule: "account", Key: "a", Weight: 1}}
	b.ReportAllocs()
	for b.Loop() {
		t, err := p.Acquire(context.Background(), cs...)
		if err != nil {
			b.Fatal(err)
		}
		t.Release()
	}
}

// BenchmarkAcquireReleaseOtherKeysWaiting measures an admitted
// Acquire+Release on one key while waiters are blocked on other keys of
// another rule (one waiter per key, each key full for an hour): the cost
// must not depend on their number. (What remains of a slope at 100 000 is
// the garbage collector scanning 100 000 blocked goroutines: it is flat
// with GOGC=off.)
func BenchmarkAcquireReleaseOtherKeysWaiting(b *testing.B) {
	for _, waiters := range []int{0, 1000, 100_000} {
		b.Run(strconv.Itoa(waiters), func(b *testing.B) {
			p, err := clientpool.New(clientpool.Table{Rules: []clientpool.Rule{
				{Name: "free", Limit: window.Limit{N: 1 << 40, Per: time.Millisecond}},
				{Name: "other", Limit: window.Limit{N: 1, Per: time.Hour}},
			}})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			started := make(chan struct{}, 1024)
			done := make(chan struct{}, 1024)
			for i := range waiters {
				key := "w" + strconv.Itoa(i)
				if _, err := p.Acquire(ctx, clientpool.Charge{Rule: "other", Key: key, Weight: 1}); err != nil {
					b.Fatal(err)
				}
				go func() {
					started <- struct{}{}
					_, _ = p.Acquire(ctx, clientpool.Charge{Rule: "other", Key: key, Weight: 1})
					done <- struct{}{}
				}()
				<-started
			}
			// Let every waiter reach its queue.
			for range 100 {
				runtime.Gosched()
			}
			time.Sleep(10*time.Millisecond + time.Duration(waiters)*time.Microsecond)
			cs := []clientpool.Charge{{Rule: "free", Key: "me", Weight: 1}}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				t, err := p.Acquire(context.Background(), cs...)
				if err != nil {
					b.Fatal(err)
				}
				t.Release()
			}
			b.StopTimer()
			cancel()
			for range waiters {
				<-done
			}
		})
	}
}
