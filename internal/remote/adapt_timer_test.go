package remote

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesem/ratesem/internal/rspec"
	"github.com/ratesem/ratesem/internal/rstore"
	"github.com/ratesem/ratesem/window"
)

// gatedStore is an rstore.Store whose adaptive reports wait for gate
// (when not nil) before their round trip: a report held in flight.
type gatedStore struct {
	*rstore.Store
	gate chan struct{}
}

func (g *gatedStore) AdaptAll(ctx context.Context, scope string, c rspec.Charge, b rspec.AdaptBounds, evs ...rspec.AdaptEvent) (rspec.AdaptLevel, error) {
	if g.gate != nil {
		<-g.gate
	}
	return g.Store.AdaptAll(ctx, scope, c, b, evs...)
}

// armedFlushes counts e's limiters with a flush timer pending.
func armedFlushes(e *Engine) int {
	e.ad.mu.Lock()
	defer e.ad.mu.Unlock()
	n := 0
	for _, q := range e.ad.m {
		if q.timer != nil {
			n++
		}
	}
	return n
}

// TestAdaptFlushTimerClose: Close stops the flush timers pending (each
// would keep the closed Engine and its queues until it fires, an eighth of
// Per on: 45 days for a Per of a year, for every limiter), and a success
// after Close arms none.
func TestAdaptFlushTimerClose(t *testing.T) {
	clk := &vclock{t: time.UnixMicro(1_700_000_000_000_000)}
	e, _ := realEngine(t, clk, Config{Timeout: time.Second})
	per := time.Hour
	b := rspec.AdaptBounds{Floor: 5, Ceiling: 100}
	answers := make(chan int64, 64)
	then := func(n int64, err error) { answers <- n }
	t0 := clk.now()
	const keys = 50
	cs := make([]rspec.Charge, keys)
	for i := range cs {
		cs[i] = rspec.Charge{Rule: "r", Key: "k" + string(rune('A'+i)), Spec: &rspec.Spec{Kind: rspec.Completion, Limit: window.Limit{N: 5, Per: per}}}
		_ = e.AdaptSuccess("s", cs[i], b, t0.Add(-time.Millisecond), time.Millisecond, 1, then)
		<-answers
	}
	// successes that may prove the level, within an eighth of Per of the
	// last report: a timer per limiter
	for _, c := range cs {
		for range 2 {
			_ = e.AdaptSuccess("s", c, b, t0.Add(per), time.Millisecond, 1, then)
		}
	}
	if n := armedFlushes(e); n != keys {
		t.Fatalf("%d flush timers pending, want one per limiter (%d)", n, keys)
	}
	_ = e.Close()
	for i := 0; armedFlushes(e) != 0; i++ {
		if i == 100 {
			t.Fatalf("10 ms after Close: %d flush timers still pending", armedFlushes(e))
		}
		time.Sleep(100 * time.Microsecond)
	}
	_ = e.AdaptSuccess("s", cs[0], b, t0.Add(per), time.Millisecond, 1, then)
	if n := armedFlushes(e); n != 0 {
		t.Fatalf("a success after Close armed %d flush timers", n)
	}
}

// TestAdaptFlushAfterFirstAnswer: successes queued while a limiter's
// first report is in flight, admitted long enough after the level's
// change to prove it, go an eighth of Per after that report even when no
// success follows: the flush is decided on the level the report answered
// (it was decided before, on no level at all, and they waited for the
// next success: up to a Per when a fleet admits in bursts).
func TestAdaptFlushAfterFirstAnswer(t *testing.T) {
	clk := &vclock{t: time.UnixMicro(1_700_000_000_000_000)}
	e0, srv := realEngine(t, clk, Config{Timeout: time.Second})
	g := &gatedStore{Store: e0.st.(*rstore.Store), gate: make(chan struct{})}
	e, err := New(Config{Store: g, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	_ = srv
	per := 400 * time.Millisecond
	c := rspec.Charge{Rule: "r", Key: "k", Spec: &rspec.Spec{Kind: rspec.Completion, Limit: window.Limit{N: 5, Per: per}}}
	b := rspec.AdaptBounds{Floor: 5, Ceiling: 100}
	answers, then := reportAnswers(t)
	t0 := clk.now() // the state is made at t0: its level changed then
	_ = e.AdaptSuccess("s", c, b, t0.Add(-time.Millisecond), time.Millisecond, 1, then)
	// the first report is held in flight; 3 successes of calls admitted
	// a Per after t0 queue meanwhile (3 of the 5 that prove the level)
	for range 3 {
		_ = e.AdaptSuccess("s", c, b, t0.Add(per), time.Millisecond, 1, then)
	}
	close(g.gate)
	if n := <-answers; n != 5 {
		t.Fatalf("first report: level %d, want 5", n)
	}
	sent := time.Now()
	select {
	case n := <-answers:
		if n != 5 {
			t.Fatalf("the queued successes: level %d, want 5", n)
		}
		if d := time.Since(sent); d > per/adaptEvery+per/4 {
			t.Fatalf("the queued successes went %v after the first answer", d)
		}
	case <-time.After(per):
		t.Fatal("successes that may prove the level, queued during the first report, wait for another success")
	}
	if got := clk.now(); !got.Equal(t0) {
		t.Fatal("clock moved")
	}
}

// TestAdaptFlushClockBack: after Redis's clock went back an hour (a
// failover to a replica whose TIME is behind; the law re-anchors the
// level's change to the new clock), successes admitted a Per after that
// change may prove the level, and the flush timer sends them though no
// success follows: this process takes the change Redis answered, earlier
// than the one it knew (it kept the later one and took every success for
// one admitted before the change, for as long as the clock's jump).
func TestAdaptFlushClockBack(t *testing.T) {
	clk := &vclock{t: time.UnixMicro(1_700_000_000_000_000)}
	e, _ := realEngine(t, clk, Config{Timeout: time.Second})
	per := 400 * time.Millisecond
	c := rspec.Charge{Rule: "r", Key: "k", Spec: &rspec.Spec{Kind: rspec.Completion, Limit: window.Limit{N: 5, Per: per}}}
	b := rspec.AdaptBounds{Floor: 5, Ceiling: 100}
	answers, then := reportAnswers(t)
	t0 := clk.now()
	_ = e.AdaptSuccess("s", c, b, t0.Add(-time.Millisecond), time.Millisecond, 1, then)
	<-answers
	set := func(at time.Time) {
		clk.mu.Lock()
		clk.t = at
		clk.mu.Unlock()
	}
	back := t0.Add(-time.Hour)
	set(back)
	time.Sleep(per/adaptEvery + 5*time.Millisecond)
	_ = e.AdaptSuccess("s", c, b, back.Add(-time.Millisecond), time.Millisecond, 1, then)
	if n := <-answers; n != 5 {
		t.Fatalf("after the clock went back: level %d, want 5", n)
	}
	set(back.Add(per))
	for range 3 {
		_ = e.AdaptSuccess("s", c, b, back.Add(per), time.Millisecond, 1, then)
	}
	select {
	case <-answers:
	case <-time.After(per):
		t.Fatal("successes that may prove the level, after the clock went back, wait for another success")
	}
}

// countingStore counts the adaptive round trips.
type countingStore struct {
	*rstore.Store
	n atomic.Int64
}

func (s *countingStore) AdaptAll(ctx context.Context, scope string, c rspec.Charge, b rspec.AdaptBounds, evs ...rspec.AdaptEvent) (rspec.AdaptLevel, error) {
	s.n.Add(1)
	return s.Store.AdaptAll(ctx, scope, c, b, evs...)
}

// TestAdaptFlushRedisDown: a flush timer that fires while Redis is taken
// as unreachable sends nothing, keeps the successes and arms no other
// timer (no spin): the next success after Redis is back sends them.
func TestAdaptFlushRedisDown(t *testing.T) {
	clk := &vclock{t: time.UnixMicro(1_700_000_000_000_000)}
	e0, _ := realEngine(t, clk, Config{Timeout: time.Second})
	cs := &countingStore{Store: e0.st.(*rstore.Store)}
	e, err := New(Config{Store: cs, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	per := 400 * time.Millisecond
	c := rspec.Charge{Rule: "r", Key: "k", Spec: &rspec.Spec{Kind: rspec.Completion, Limit: window.Limit{N: 5, Per: per}}}
	b := rspec.AdaptBounds{Floor: 5, Ceiling: 100}
	answers := make(chan int64, 16)
	then := func(n int64, err error) { answers <- n }
	t0 := clk.now()
	_ = e.AdaptSuccess("s", c, b, t0.Add(-time.Millisecond), time.Millisecond, 1, then)
	<-answers
	for range 3 {
		_ = e.AdaptSuccess("s", c, b, t0.Add(per), time.Millisecond, 1, then)
	}
	if armedFlushes(e) != 1 {
		t.Fatal("no flush timer armed")
	}
	e.markDown(errors.New("test: down"), false)
	time.Sleep(3 * per / adaptEvery)
	if n := cs.n.Load(); n != 1 || armedFlushes(e) != 0 || len(answers) != 0 {
		t.Fatalf("Redis down: %d round trips (want the first alone), %d timers armed, %d answers", n, armedFlushes(e), len(answers))
	}
	e.markUp()
	_ = e.AdaptSuccess("s", c, b, t0.Add(per), time.Millisecond, 1, then)
	select {
	case <-answers:
	case <-time.After(per):
		t.Fatal("the successes kept while Redis was down were not sent")
	}
	if cyc := func() int64 { e.ad.mu.Lock(); defer e.ad.mu.Unlock(); return e.ad.m[limKey{"s", c.Rule, c.Key}].cyc }(); cyc != 4 {
		t.Fatalf("after Redis came back: %d successes proving the level counted, want 4", cyc)
	}
}
