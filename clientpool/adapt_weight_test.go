package clientpool_test

import (
	"math"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/window"
)

// level returns the adaptive level of rule "api" for the key "".
func level(t *testing.T, p *clientpool.Pool) int64 {
	t.Helper()
	for _, k := range p.Snapshot() {
		if k.Rule == "api" {
			return k.Limit.N
		}
	}
	t.Fatal("no key of rule api")
	return 0
}

// runWeighted runs windows of calls of weight w under an adaptive rule
// (Floor 10, Per 1 s) on a mock clock: each window, as many calls as the
// level admits, each released at once as a success.
func runWeighted(t *testing.T, p *clientpool.Pool, clk *clock.Mock, w int64, windows int) {
	t.Helper()
	for range windows {
		for {
			tk, _, _ := p.TryAcquire(clientpool.Charge{Rule: "api", Weight: w})
			if tk == nil {
				break
			}
			tk.Release()
		}
		clk.Add(time.Second)
	}
}

// The level of an adaptive rule is in units (Weights count in it), so the
// law counts units too: calls of weight 10 prove and cut a level as ten
// calls of weight 1 do. Counting calls, a level of N units needed N calls
// (N/10 windows) to be proven, so it hardly climbed, and a throttle cut it
// to 95% of the calls (not units) the last window accepted: the floor.
func TestAdaptiveWeighted(t *testing.T) {
	for _, w := range []int64{1, 10} {
		clk := clock.NewMock()
		p := newPool(t, []clientpool.Rule{{Name: "api", Limit: window.Limit{Per: time.Second}, Adapt: &clientpool.Adaptive{Floor: 10, Ceiling: 1000}}}, clientpool.WithClock(clk))
		runWeighted(t, p, clk, w, 30)
		up := level(t, p)
		if up < 100 {
			t.Fatalf("weight %d: level %d after 30 clean windows: want ≥ 100 (it climbs in units)", w, up)
		}
		// A throttle of a call at the good level cuts to about 90%.
		runWeighted(t, p, clk, w, 1) // the level is proven (G = N)
		n := level(t, p)
		tk, _, _ := p.TryAcquire(clientpool.Charge{Rule: "api", Weight: w})
		if tk == nil {
			t.Fatal("not admitted")
		}
		p.ThrottledTicket(clientpool.Throttle{Status: 503}, tk)
		tk.Release()
		if cut := level(t, p); cut < n*8/10 {
			t.Errorf("weight %d: one throttle cut the level from %d to %d: want ≥ 80%%", w, n, cut)
		}
	}
}

// SetLimit on an adaptive rule sets the ceiling, held to the bound New
// holds Adaptive.Ceiling to (2^40): an absurd N does not let a level
// climb toward int64's end.
func TestAdaptiveSetLimitHuge(t *testing.T) {
	clk := clock.NewMock()
	p := newPool(t, []clientpool.Rule{{Name: "api", Limit: window.Limit{Per: time.Second}, Adapt: &clientpool.Adaptive{Floor: 10}}}, clientpool.WithClock(clk))
	if err := p.SetLimit("api", window.Limit{N: math.MaxInt64, Per: time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := clientpool.New(clientpool.Table{Rules: []clientpool.Rule{{Name: "api", Limit: window.Limit{Per: time.Second}, Adapt: &clientpool.Adaptive{Floor: 10, Ceiling: 1 << 41}}}}); err == nil {
		t.Fatal("New took a Ceiling of 2^41")
	}
	for range 150 {
		tk, _, _ := p.TryAcquire(clientpool.Charge{Rule: "api", Weight: 10})
		if tk == nil {
			t.Fatal("not admitted")
		}
		if err := tk.Settle("api", math.MaxInt64); err != nil { // a hostile usage report
			t.Fatal(err)
		}
		tk.Release()
		clk.Add(2 * time.Second)
		if n := level(t, p); n < 10 || n > 1<<40 {
			t.Fatalf("level %d: want within [10, 2^40]", n)
		}
	}
}

// ThrottledTicket, Overloaded and Release of one ticket race (a body's
// throttle read by one goroutine while another closes it): each ticket
// ends once, the pool is left with nothing in flight, and the level stays
// within [Floor, Ceiling]. Run with -race.
func TestAdaptiveThrottleRacesRelease(t *testing.T) {
	p := newPool(t, []clientpool.Rule{{Name: "api", Limit: window.Limit{N: 50, Per: time.Millisecond}, Adapt: &clientpool.Adaptive{Floor: 5, Ceiling: 100}}})
	done := make(chan struct{})
	for i := range 300 {
		tk := acquire(t, p, clientpool.Charge{Rule: "api", Weight: 1})
		go func() {
			if i%2 == 0 {
				p.ThrottledTicket(clientpool.Throttle{Status: 429, RetryAfter: time.Microsecond}, tk)
			} else {
				p.Overloaded(clientpool.Throttle{Status: 503}, tk)
			}
			done <- struct{}{}
		}()
		go func() { tk.Release(); done <- struct{}{} }()
		<-done
		<-done
	}
	for _, k := range p.Snapshot() {
		if k.InFlight != 0 || k.Limit.N < 5 || k.Limit.N > 100 {
			t.Errorf("%+v: want nothing in flight, a level in [5, 100]", k)
		}
	}
}
