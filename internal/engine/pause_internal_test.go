package engine

import (
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/window"
)

// A pause ending no later than the one in force sets nothing and reports
// nothing, on the Pool's engine as on the semaphore's (One.Pause is
// Engine.Pause of its one key).
func TestPauseNotLaterReportsNothing(t *testing.T) {
	clk := clock.NewMock()
	var evs []ratesem.Event
	obs := func(e ratesem.Event) { evs = append(evs, e) }
	p, err := New([]Rule{{Name: "ip", Limit: window.Limit{N: 1, Per: time.Second}}}, "",
		func(c *Config) { c.Clock, c.Observer = clk, obs })
	if err != nil {
		t.Fatal(err)
	}
	o := NewOne(window.NewCompletion(window.Limit{N: 1, Per: time.Second}), Config{Clock: clk, Observer: obs, Concurrency: -1})
	pause := []func(time.Time){
		func(u time.Time) { _ = p.Pause("ip", "k", u) },
		o.Pause,
	}
	for i, pause := range pause {
		evs = nil
		pause(clk.Now().Add(300 * time.Millisecond))
		pause(clk.Now().Add(100 * time.Millisecond))
		pause(clk.Now().Add(300 * time.Millisecond))
		if len(evs) != 1 || evs[0].Kind != ratesem.Paused || evs[0].Pause != 300*time.Millisecond {
			t.Errorf("front %d: events %+v, want one Paused of 300ms", i, evs)
		}
	}
}
