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
	// window: invalid limit "10/2": duration: time: missing unit in duration "2"
}

// The completion window on explicit instants: 2 calls per second, counted
// from the end of each call.
func ExampleCompletion() {
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
func ExampleSlidingLog() {
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
