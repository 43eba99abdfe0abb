package remote

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ratesem/ratesem/internal/rspec"
	"github.com/ratesem/ratesem/window"
)

// TestAdaptCeilingBeatsAnswerInFlight: a report of successes runs in Redis
// (level 40), then SetLimit's ceiling (AdaptCeiling) brings the level to 10,
// then the report's answer arrives. That answer is older than the ceiling's:
// the level this process is told (then) must stay 10, not go back to 40
// (a stress run of TestAdaptiveRedisSetLimit in clientpool saw the setter
// at 40 after SetLimit(10)). The hook holds script calls only (orevHook).
func TestAdaptCeilingBeatsAnswerInFlight(t *testing.T) {
	h := &orevHook{scriptsOnly: true, ran: make(chan struct{}, 1), hold: make(chan struct{})}
	e := orevEngine(t, h)
	ctx := context.Background()
	per := time.Second
	ch := rspec.Charge{Rule: "r", Key: "k", Spec: &rspec.Spec{Kind: rspec.Completion, Limit: window.Limit{N: 40, Per: per}}, Weight: 1}
	b := rspec.AdaptBounds{Floor: 2, Ceiling: 40, Start: 40}
	o, err := e.Decide(ctx, "s", []rspec.Charge{ch})
	if err != nil || o.Call == nil {
		t.Fatalf("admission: %+v %v", o, err)
	}
	start := o.Call.Start()
	o.Call.Release()

	// A report on another key first: the script is loaded (a first
	// EVALSHA would fail NOSCRIPT and run again, unheld).
	warm := ch
	warm.Key = "w"
	warmed := make(chan int64, 1)
	if err := e.AdaptSuccess("s", warm, b, start, time.Millisecond, 1, func(n int64, _ error) { warmed <- n }); err != nil {
		t.Fatal(err)
	}
	<-warmed

	var mu sync.Mutex
	var told []int64
	then := func(n int64, err error) {
		if err == nil {
			mu.Lock()
			told = append(told, n)
			mu.Unlock()
		}
	}
	h.arm()
	if err := e.AdaptSuccess("s", ch, b, start, time.Millisecond, 1, then); err != nil {
		t.Fatal(err)
	}
	<-h.ran // the report ran in Redis: level 40; its answer is held
	set := b
	set.Set, set.Force = 10, true
	n, err := e.AdaptCeiling(ctx, "s", ch, set)
	if err != nil || n != 10 {
		t.Fatalf("AdaptCeiling(10): %d, %v", n, err)
	}
	close(h.hold) // the report's answer (40) arrives now
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		k := len(told)
		mu.Unlock()
		if k > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the report's answer never came")
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := told[len(told)-1]; got != 10 {
		t.Fatalf("after AdaptCeiling(10), an older answer told the level %d, want 10 (told %v)", got, told)
	}
}
