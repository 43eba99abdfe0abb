package remote

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/internal/rspec"
	"github.com/ratesem/ratesem/internal/rstore"
	"github.com/ratesem/ratesem/window"
)

// TestAdaptReports: a limiter's successes go to Redis at most once per
// eighth of its Per (the first at once, the others batched, none lost);
// a throttle goes at once and cuts the fleet's level, which the next
// admission adopts, and the cut wakes this process's waiters (OnRoom).
func TestAdaptReports(t *testing.T) {
	clk := &vclock{t: time.UnixMicro(1_700_000_000_000_000)}
	var rooms atomic.Int64
	e, srv := realEngine(t, clk, Config{Timeout: time.Second, OnRoom: func(string, []rspec.Charge) { rooms.Add(1) }})
	st := e.st.(*rstore.Store)
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	per := 800 * time.Millisecond
	c := rspec.Charge{Rule: "r", Key: "k", Spec: &rspec.Spec{Kind: rspec.Completion, Limit: window.Limit{N: 50, Per: per}}, Weight: 1}
	b := rspec.AdaptBounds{Floor: 5, Ceiling: 100}
	if !e.CanAdapt() {
		t.Fatal("an rstore.Store keeps adaptive limits")
	}
	o, err := e.Decide(ctx, "s", []rspec.Charge{c})
	if err != nil || o.Call == nil || !o.Call.Start().Equal(clk.now()) {
		t.Fatalf("admission: %+v %v", o, err)
	}
	start := o.Call.Start()
	o.Call.Release()
	answers, then := reportAnswers(t)
	field := func(f string) int64 {
		x, err := rdb.HGet(ctx, st.Keys("s", c)[0]+":a", f).Result()
		if err != nil {
			t.Fatalf("field %s: %v", f, err)
		}
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	t0 := time.Now()
	for range 40 {
		if err := e.AdaptSuccess("s", c, b, start, time.Millisecond, 1, then); err != nil {
			t.Fatal(err)
		}
	}
	if n := <-answers; n != 5 {
		t.Fatalf("first report: level %d, want the floor", n)
	}
	if len(answers) != 0 || field("cur") != 1 {
		t.Fatalf("40 successes within an eighth of Per: %d more reports, %d counted in Redis; want the first alone", len(answers), field("cur"))
	}
	time.Sleep(per/adaptEvery - time.Since(t0) + 20*time.Millisecond)
	// they cannot prove the level (admitted before it was made): no timer
	// sends them, the next success does
	if len(answers) != 0 {
		t.Fatal("successes that cannot prove the level went without a success to send them")
	}
	if err := e.AdaptSuccess("s", c, b, start, time.Millisecond, 1, then); err != nil {
		t.Fatal(err)
	}
	<-answers
	if got := field("cur") + field("prev"); got != 41 {
		t.Fatalf("after an eighth of Per: %d successes in Redis, want all 41", got)
	}
	if lat := field("lat"); lat != 1000 {
		t.Fatalf("latency %dµs, want 1000", lat)
	}
	// climb: n successes per window, on Redis's (virtual) clock
	n := int64(5)
	for n < 12 {
		clk.mu.Lock()
		clk.t = clk.t.Add(per)
		clk.mu.Unlock()
		if n, err = st.Adapt(ctx, "s", c, b, rspec.AdaptEvent{Start: clk.now().Add(-time.Millisecond), Count: n}); err != nil {
			t.Fatal(err)
		}
	}
	before := rooms.Load()
	if err := e.AdaptThrottle("s", c, b, clk.now(), then); err != nil {
		t.Fatal(err)
	}
	cut := <-answers
	if cut >= n {
		t.Fatalf("throttle at %d: level %d", n, cut)
	}
	o, err = e.Decide(ctx, "s", []rspec.Charge{c})
	if err != nil || o.Call == nil {
		t.Fatalf("admission after the cut: %+v %v", o, err)
	}
	if _, sps := o.Call.Adopted(); len(sps) != 1 || sps[0].Limit.N != cut {
		t.Fatalf("admission after the cut adopted %v, want N %d", sps, cut)
	}
	o.Call.Release()
	// the first answer after a level this process knew changed: OnRoom
	if rooms.Load() == before {
		t.Fatal("a level change did not call OnRoom")
	}
	// the fallback's call (no start on Redis's clock) is not reported
	if err := e.AdaptSuccess("s", c, b, time.Time{}, time.Millisecond, 1, then); err != nil || len(answers) != 0 {
		t.Fatalf("a zero start: %v, %d reports", err, len(answers))
	}
}

// TestAdaptNoAdapter: an Engine over a Store that keeps no adaptive
// limits says so (CanAdapt) and refuses reports with ErrNoAdapt.
func TestAdaptNoAdapter(t *testing.T) {
	e, err := New(Config{Store: newFake()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	c := rspec.Charge{Rule: "r", Key: "k", Spec: &rspec.Spec{Kind: rspec.Completion, Limit: window.Limit{N: 5, Per: time.Second}}}
	if e.CanAdapt() {
		t.Fatal("the fake adapts")
	}
	if err := e.AdaptSuccess("s", c, rspec.AdaptBounds{Floor: 1}, time.Now(), 0, 1, nil); !errors.Is(err, ErrNoAdapt) {
		t.Fatalf("success: %v", err)
	}
	if err := e.AdaptThrottle("s", c, rspec.AdaptBounds{Floor: 1}, time.Now(), nil); !errors.Is(err, ErrNoAdapt) {
		t.Fatalf("throttle: %v", err)
	}
}

// TestAdaptSplitBySince: successes of calls admitted before the level's
// last change (as Redis last answered it) go in a report of their own, so
// that they do not keep the calls admitted since from proving the next
// level (a report proves with its earliest admission).
func TestAdaptSplitBySince(t *testing.T) {
	clk := &vclock{t: time.UnixMicro(1_700_000_000_000_000)}
	e, _ := realEngine(t, clk, Config{Timeout: time.Second})
	per := 800 * time.Millisecond
	c := rspec.Charge{Rule: "r", Key: "k", Spec: &rspec.Spec{Kind: rspec.Completion, Limit: window.Limit{N: 5, Per: per}}}
	b := rspec.AdaptBounds{Floor: 5, Ceiling: 100}
	answers, then := reportAnswers(t)
	t0 := clk.now() // the state is made now: its level changed at t0
	if err := e.AdaptSuccess("s", c, b, t0.Add(-time.Millisecond), time.Millisecond, 1, then); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	if n := <-answers; n != 5 {
		t.Fatalf("first report: %d", n)
	}
	clk.mu.Lock()
	clk.t = clk.t.Add(per)
	clk.mu.Unlock()
	// an old call, then 5 calls admitted after the change, within a
	// eighth of Per: queued; the next success sends them
	_ = e.AdaptSuccess("s", c, b, t0.Add(-time.Millisecond), time.Millisecond, 1, then)
	for range 4 {
		_ = e.AdaptSuccess("s", c, b, t0.Add(time.Millisecond), time.Millisecond, 1, then)
	}
	if len(answers) != 0 {
		t.Fatal("a report within an eighth of Per")
	}
	time.Sleep(per/adaptEvery - time.Since(sent) + 5*time.Millisecond)
	_ = e.AdaptSuccess("s", c, b, t0.Add(time.Millisecond), time.Millisecond, 1, then)
	if n := <-answers; n != 6 {
		t.Fatalf("5 successes of calls admitted at the level, a Per on: level %d, want 6 (proven, +1)", n)
	}
	// successes that prove the level go at once, not an eighth of Per
	// after the last report: 6 calls admitted a Per after the change
	t1 := clk.now()
	clk.mu.Lock()
	clk.t = clk.t.Add(per)
	clk.mu.Unlock()
	for i := range 6 {
		_ = e.AdaptSuccess("s", c, b, t1.Add(per), time.Millisecond, 1, then)
		if i < 5 && len(answers) != 0 {
			t.Fatalf("a report after %d successes that cannot prove the level", i+1)
		}
	}
	select {
	case n := <-answers:
		if n != 8 {
			t.Fatalf("the proving report: level %d, want 8 (6 + the doubled step 2)", n)
		}
	case <-time.After(per / 8):
		t.Fatal("the proving report waited")
	}
	// successes that may prove the level (admitted a Per after its
	// change) go an eighth of Per after the last report though no success
	// follows them (a timer): 7 of the 8 needed, then the 8th at once
	t2 := clk.now()
	clk.mu.Lock()
	clk.t = clk.t.Add(per)
	clk.mu.Unlock()
	for range 7 {
		_ = e.AdaptSuccess("s", c, b, t2.Add(per), time.Millisecond, 1, then)
	}
	select {
	case n := <-answers:
		if n != 8 {
			t.Fatalf("7 successes at the level: %d, want 8 (not proven)", n)
		}
	case <-time.After(per):
		t.Fatal("successes that may prove the level wait for another success")
	}
	_ = e.AdaptSuccess("s", c, b, t2.Add(per), time.Millisecond, 1, then)
	select {
	case n := <-answers:
		if n <= 8 {
			t.Fatalf("the 8th success: level %d, want it proven and raised", n)
		}
	case <-time.After(per / 8):
		t.Fatal("the proving report waited")
	}
}

// reportAnswers returns a channel of the levels Redis answered to reports
// and the callback that sends each there (a report's error fails the test).
func reportAnswers(t *testing.T) (chan int64, func(int64, error)) {
	answers := make(chan int64, 16)
	return answers, func(n int64, err error) {
		if err != nil {
			t.Errorf("report: %v", err)
		}
		answers <- n
	}
}
