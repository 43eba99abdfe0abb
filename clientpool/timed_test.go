package clientpool_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/window"
)

// timedTable is one rule of 1000 ms of server time per minute, counted
// in ms (Rule.TimeUnit).
func timedTable() clientpool.Table {
	return clientpool.Table{Rules: []clientpool.Rule{{Name: "cpu", Limit: window.Limit{N: 1000, Per: time.Minute}, TimeUnit: time.Millisecond}}}
}

// free returns the most units p admits at once now under rule "cpu" (a
// binary search with TryAcquire, each admission taken back at once
// with a Settle of its own weight, so that the probe leaves no trace).
func free(t *testing.T, p *clientpool.Pool) int64 {
	t.Helper()
	lo, hi := int64(0), int64(1000) // lo admits, hi+1 does not
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if tk, _, _ := p.TryAcquire(clientpool.Charge{Rule: "cpu", Weight: mid}); tk != nil {
			if err := tk.Settle("cpu", 0); err != nil { // leave no trace
				t.Fatal(err)
			}
			tk.Release()
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// A call under a rule with TimeUnit counts its estimate while in flight
// and its duration, rounded up to the unit, from its release on: a debit
// when it ran longer than its estimate, a refund when shorter. Without the
// settlement the window would count the estimates (100 and 500).
func TestTimedSettlesToDuration(t *testing.T) {
	clk := clock.NewMock()
	p, err := clientpool.New(timedTable(), clientpool.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	long, err := p.Acquire(context.Background(), clientpool.Charge{Rule: "cpu", Weight: 100})
	if err != nil {
		t.Fatal(err)
	}
	short, err := p.Acquire(context.Background(), clientpool.Charge{Rule: "cpu", Weight: 500})
	if err != nil {
		t.Fatal(err)
	}
	if got := free(t, p); got != 400 {
		t.Fatalf("in flight: free %d, want 400 (the estimates count)", got)
	}
	clk.Add(10*time.Millisecond + time.Nanosecond) // 11 units: rounded up
	short.Release()
	if got := free(t, p); got != 1000-100-11 {
		t.Fatalf("after a refund to 11 ms: free %d, want %d", got, 1000-100-11)
	}
	clk.Add(240 * time.Millisecond) // long ran 250 ms + 1 ns: 251 units
	long.Release()
	if got := free(t, p); got != 1000-11-251 {
		t.Fatalf("after a debit to 251 ms: free %d, want %d", got, 1000-11-251)
	}
	clk.Add(time.Minute)
	if got := free(t, p); got != 1000 {
		t.Fatalf("a minute later: free %d, want 1000", got)
	}
}

// A weight the caller settles (a server's own report of its time) wins
// over the measure; a clock that goes back (by less than the window) leaves the estimate; a clock
// that jumps an hour ahead debits at most "full until the window moves".
func TestTimedHostile(t *testing.T) {
	clk := clock.NewMock()
	clk.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	p, err := clientpool.New(timedTable(), clientpool.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	acquire := func(w int64) *clientpool.Ticket {
		tk, err := p.Acquire(context.Background(), clientpool.Charge{Rule: "cpu", Weight: w})
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	tk := acquire(100)
	if err := tk.Settle("cpu", 7); err != nil {
		t.Fatal(err)
	}
	clk.Add(300 * time.Millisecond)
	tk.Release()
	if got := free(t, p); got != 993 {
		t.Fatalf("settled to 7 after 300 ms: free %d, want 993", got)
	}
	clk.Add(time.Minute)

	// A fresh pool, so that no end logged later than the clock's new
	// reading holds its window.
	back, err := clientpool.New(timedTable(), clientpool.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	tk, err = back.Acquire(context.Background(), clientpool.Charge{Rule: "cpu", Weight: 100})
	if err != nil {
		t.Fatal(err)
	}
	clk.Set(clk.Now().Add(-10 * time.Second)) // back
	tk.Release()
	clk.Add(10 * time.Second) // the window holds every start until its clock is back (it never runs backwards)
	if got := free(t, back); got != 900 {
		t.Fatalf("clock went back: free %d, want 900 (the estimate)", got)
	}
	clk.Add(time.Minute)

	tk = acquire(1)
	clk.Add(1000 * time.Hour) // 3.6e9 units
	tk.Release()
	if got := free(t, p); got != 0 {
		t.Fatalf("after a call of 1000 h: free %d, want 0", got)
	}
	clk.Add(time.Minute + time.Nanosecond)
	if got := free(t, p); got != 1000 {
		t.Fatalf("a minute after a call of 1000 h: free %d, want 1000 (full until the window moves)", got)
	}
}

// plainWindow is a window that cannot settle (no window.Settler).
type plainWindow struct{ window.Policy }

func TestTimedRefused(t *testing.T) {
	for name, r := range map[string]clientpool.Rule{
		"negative":    {Name: "cpu", Limit: window.Limit{N: 10, Per: time.Second}, TimeUnit: -time.Millisecond},
		"min":         {Name: "cpu", Limit: window.Limit{N: 10, Per: time.Second}, TimeUnit: time.Duration(-1 << 63)},
		"not settler": {Name: "cpu", Limit: window.Limit{N: 10, Per: time.Second}, TimeUnit: time.Millisecond, Window: func(l window.Limit) window.Policy { return plainWindow{window.NewCompletion(l)} }},
	} {
		if _, err := clientpool.New(clientpool.Table{Rules: []clientpool.Rule{r}}); !errors.Is(err, ratesem.ErrInvalidLimit) {
			t.Errorf("%s: New: %v, want ErrInvalidLimit", name, err)
		}
	}
	// Every window of package window settles.
	for name, w := range map[string]func(window.Limit) window.Policy{
		"fixed": func(l window.Limit) window.Policy { return window.NewFixedWindow(l) },
		"gcra":  func(l window.Limit) window.Policy { return window.NewGCRA(l, 1) },
	} {
		r := clientpool.Rule{Name: "cpu", Limit: window.Limit{N: 10, Per: time.Second}, TimeUnit: time.Millisecond, Window: w}
		if _, err := clientpool.New(clientpool.Table{Rules: []clientpool.Rule{r}}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
