package window_test

import (
	"fmt"
	"time"

	"github.com/ratesem/ratesem/window"
)

func ExampleParseLimit() {
	l, err := window.ParseLimit("6000/1m") // Binance spot REQUEST_WEIGHT per IP
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(l.N, l.Per, l)

	_, err = window.ParseLimit("10/2")
	fmt.Println(err)
	// Output:
	// 6000 1m0s 6000/1m
	// ratesem: invalid limit "10/2": duration: time: missing unit in duration "2"
}

// The completion window on explicit instants: 2 calls per second, counted
// from the end of each call.
func ExampleNewCompletion() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := window.NewCompletion(window.Limit{N: 2, Per: time.Second})
	show := func(d time.Duration) {
		at, ok := w.Admit(start.Add(d), 1)
		if ok {
			fmt.Printf("t=%v admitted\n", d)
		} else if at.IsZero() {
			fmt.Printf("t=%v refused until a call ends\n", d)
		} else {
			fmt.Printf("t=%v refused until t=%v\n", d, at.Sub(start))
		}
	}
	show(0)
	show(0)
	show(0)
	w.Done(start.Add(300*time.Millisecond), 1) // first call ends at 0.3s
	show(500 * time.Millisecond)
	show(1300 * time.Millisecond)
	// Output:
	// t=0s admitted
	// t=0s admitted
	// t=0s refused until a call ends
	// t=500ms refused until t=1.3s
	// t=1.3s admitted
}

// The start window with a margin: call k+N starts Per + margin after call k,
// however long the calls take.
func ExampleNewSlidingLog() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := window.NewSlidingLog(window.Limit{N: 1, Per: time.Second}, 50*time.Millisecond)
	_, ok := w.Admit(start, 1)
	fmt.Println(ok)
	at, ok := w.Admit(start.Add(time.Second), 1)
	fmt.Println(ok, at.Sub(start))
	// Output:
	// true
	// false 1.05s
}

// The token bucket's worst case, which users of token-bucket limiters keep
// filing as a bug: with burst N a full bucket plus the refill admits 2N−1
// calls within one window of Per.
func ExampleNewTokenBucket() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := window.NewTokenBucket(window.Limit{N: 5, Per: time.Second}, 0) // burst 5
	admitted := 0
	for t := time.Duration(0); t < time.Second; t += 10 * time.Millisecond {
		for {
			if _, ok := b.Admit(start.Add(t), 1); !ok {
				break
			}
			admitted++
		}
	}
	fmt.Println("admitted within one second:", admitted)
	// Output:
	// admitted within one second: 9
}

// A Limiter for callers that must not block: decide now, or learn how long
// until the call could start.
func ExampleLimiter_TryN() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := window.NewLimiter(window.NewGCRA(window.Limit{N: 10, Per: time.Second}, 2)) // 10/s, burst 2
	for i := range 4 {
		wait, err := l.TryN(start, 1)
		fmt.Println(i, wait, err)
	}
	_, err := l.TryN(start, 3)
	fmt.Println(err)
	// Output:
	// 0 0s <nil>
	// 1 0s <nil>
	// 2 100ms <nil>
	// 3 100ms <nil>
	// ratesem: weight exceeds the limit: weight 3, capacity 2 (10/1s)
}

// The fixed window counts in windows aligned to the clock, as Binance does:
// the minute window resets at every full minute.
func ExampleNewFixedWindow() {
	w := window.NewFixedWindow(window.Limit{N: 2, Per: time.Minute})
	at := time.Date(2026, 1, 1, 12, 0, 59, 0, time.UTC)
	fmt.Println(w.Admit(at, 2))
	next, ok := w.Admit(at, 1)
	fmt.Println(next.Format(time.TimeOnly), ok)
	// Output:
	// 0001-01-01 00:00:00 +0000 UTC true
	// 12:01:00 false
}
