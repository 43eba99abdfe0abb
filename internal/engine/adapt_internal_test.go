package engine

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/adapt"
	"github.com/ratesem/ratesem/window"
)

// adaptEngine returns an Engine over rules on a mock clock.
func adaptEngine(t *testing.T, rules ...Rule) (*Engine, *clock.Mock) {
	t.Helper()
	clk := clock.NewMock()
	p, err := New(rules, "", func(c *Config) { c.Clock = clk })
	if err != nil {
		t.Fatal(err)
	}
	return p, clk
}

func adaptive(name string, n, floor int64) Rule {
	return Rule{Name: name, Limit: window.Limit{N: n, Per: time.Second}, Adapt: &Adaptive{Floor: floor}}
}

func take(t *testing.T, p *Engine, cs ...Charge) *Ticket {
	t.Helper()
	tk := new(Ticket)
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if err := p.Acquire(ctx, tk, cs); err != nil {
		t.Fatal(err)
	}
	return tk
}

// law returns the law of (rule, key), read under the lock.
func law(p *Engine, rule, key string) adapt.Law {
	p.mu.Lock()
	defer p.mu.Unlock()
	return *p.rules[rule].keys[key].ad
}

func windowN(p *Engine, rule, key string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rules[rule].keys[key].policy.Limit().N
}

var api = Charge{Rule: "api", Weight: 1}

// A release is a success of a call started at its admission: a level is
// proven by a window and as many successes as the level, then raised, and
// the key's window holds the new level.
func TestAdaptSuccessRaisesLevel(t *testing.T) {
	p, clk := adaptEngine(t, adaptive("api", 0, 2))
	a, b := take(t, p, api), take(t, p, api)
	if n := windowN(p, "api", ""); n != 2 {
		t.Fatalf("window N %d, want the floor 2", n)
	}
	clk.Add(time.Second)
	a.Release()
	if l := law(p, "api", ""); l.N() != 2 || l.S.Cur != 1 || l.S.Cycled != 1 {
		t.Fatalf("after one success: %+v", l.S)
	}
	b.Release()
	if l := law(p, "api", ""); l.N() != 3 || windowN(p, "api", "") != 3 {
		t.Fatalf("not raised after a clean cycle: %+v, window %d", l.S, windowN(p, "api", ""))
	}
	if ks := p.Snapshot(); len(ks) != 1 || ks[0].Limit.N != 3 {
		t.Fatalf("Snapshot: %+v, want the key's level 3", ks)
	}
}

// ThrottledTicket cuts (at the good level with nothing accepted in the
// last window: to the floor), pauses as every throttle does, makes the
// call's Release no success, and a second report of the same call cuts
// nothing more; a call admitted after the cut cuts again; a report after
// Release only pauses.
func TestAdaptThrottledTicket(t *testing.T) {
	p, clk := adaptEngine(t, adaptive("api", 10, 2))
	a := take(t, p, api)
	clk.Add(100 * time.Millisecond)
	p.ThrottledTicket(a, nil, 429, 0)
	l := law(p, "api", "")
	if l.N() != 2 || l.S.G != 2 || l.S.B != 10 || l.S.LastCut != 100_000 {
		t.Fatalf("cut: %+v", l.S)
	}
	if windowN(p, "api", "") != 2 {
		t.Fatalf("window N %d, want 2", windowN(p, "api", ""))
	}
	if p.Snapshot()[0].PausedUntil.IsZero() {
		t.Fatal("the throttle did not pause the key")
	}
	p.ThrottledTicket(a, nil, 429, 0) // the body after the headers
	if l2 := law(p, "api", ""); l2.S != l.S {
		t.Fatalf("a second report of one call changed the law: %+v -> %+v", l.S, l2.S)
	}
	clk.Add(time.Second) // out of the pause
	a.Release()
	if l2 := law(p, "api", ""); l2.S.Cur != 0 || l2.S.Lat != 0 {
		t.Fatalf("a throttled call's Release counted as a success: %+v", l2.S)
	}
	b := take(t, p, api) // admitted after the cut: its throttle counts
	p.ThrottledTicket(b, nil, 429, 0)
	if l2 := law(p, "api", ""); l2.S.LastCut != 1_100_000 || l2.N() != 2 {
		t.Fatalf("a throttle of a call after the cut: %+v", l2.S)
	}
	clk.Add(2 * time.Second)
	b.Release()
	c := take(t, p, api)
	c.Release()
	before := law(p, "api", "")
	p.ThrottledTicket(c, nil, 429, 0)
	if l2 := law(p, "api", ""); l2.S != before.S {
		t.Fatalf("a report after Release cut: %+v -> %+v", before.S, l2.S)
	}
}

// A throttle without its call (ThrottledTargets, Pool.Throttled) is taken
// as a call started a window ago: it cuts at most once per window.
func TestAdaptThrottledWithoutTicket(t *testing.T) {
	p, clk := adaptEngine(t, adaptive("api", 50, 2))
	take(t, p, api).Release()
	clk.Add(time.Second)
	p.ThrottledTargets([]Charge{api}, nil, 429, 0)
	first := law(p, "api", "")
	if first.S.LastCut != 1_000_000 || first.N() >= 50 {
		t.Fatalf("no cut: %+v", first.S)
	}
	clk.Add(500 * time.Millisecond)
	p.ThrottledTargets([]Charge{api}, nil, 429, 0)
	if l := law(p, "api", ""); l.S != first.S {
		t.Fatalf("a second cut within the window: %+v", l.S)
	}
	clk.Add(600 * time.Millisecond)
	p.ThrottledTargets([]Charge{api}, nil, 429, 0)
	if l := law(p, "api", ""); l.S.LastCut != 2_100_000 {
		t.Fatalf("no cut a window later: %+v", l.S)
	}
}

// An overload (503) cuts the adaptive level and pauses nothing.
func TestAdaptOverloaded(t *testing.T) {
	p, clk := adaptEngine(t, adaptive("api", 10, 2))
	a := take(t, p, api)
	clk.Add(10 * time.Millisecond)
	p.OverloadedTicket(a, nil)
	if l := law(p, "api", ""); l.N() != 2 || l.S.LastCut != 10_000 {
		t.Fatalf("503 did not cut: %+v", l.S)
	}
	if !p.Snapshot()[0].PausedUntil.IsZero() {
		t.Fatal("a 503 paused the key")
	}
	a.Release()
	if l := law(p, "api", ""); l.S.Cur != 0 {
		t.Fatalf("an overloaded call's Release counted as a success: %+v", l.S)
	}
}

// A throttle about another rule (its targets) cuts no adaptive key, and
// the call's Release is no success for them either.
func TestAdaptThrottleTargets(t *testing.T) {
	p, clk := adaptEngine(t, adaptive("api", 10, 2),
		Rule{Name: "ip", Limit: window.Limit{N: 100, Per: time.Second}, PauseOnThrottle: true})
	ip := Charge{Rule: "ip", Weight: 1}
	a := take(t, p, api, ip)
	clk.Add(10 * time.Millisecond)
	p.ThrottledTicket(a, nil, 429, 0) // about "ip", the marked rule
	if l := law(p, "api", ""); l.N() != 10 || l.S.LastCut != -1 {
		t.Fatalf("a throttle about another rule cut: %+v", l.S)
	}
	a.Release()
	if l := law(p, "api", ""); l.S.Cur != 0 {
		t.Fatalf("a throttled call counted as a success: %+v", l.S)
	}
}

// A limit the key learns from a reply (Rule.Learn) is its ceiling.
func TestAdaptLearnIsCeiling(t *testing.T) {
	r := adaptive("api", 8, 2)
	r.Learn = func(h http.Header, _ time.Time) (Learned, bool) {
		return Learned{Limit: window.Limit{N: 5}, Remaining: -1}, true
	}
	p, _ := adaptEngine(t, r)
	a := take(t, p, api)
	a.ObserveHeaders(http.Header{})
	if l := law(p, "api", ""); l.N() != 5 || l.P.Ceiling != 5 || windowN(p, "api", "") != 5 {
		t.Fatalf("learned 5: %+v, window %d", l, windowN(p, "api", ""))
	}
	a.Release()
}

// SetLimit on an adaptive rule sets the ceiling of every key.
func TestAdaptSetLimitIsCeiling(t *testing.T) {
	p, _ := adaptEngine(t, adaptive("api", 8, 2))
	take(t, p, api).Release()
	if err := p.SetLimit("api", window.Limit{N: 4, Per: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if l := law(p, "api", ""); l.N() != 4 || l.P.Ceiling != 4 || l.P.W != 2_000_000 || windowN(p, "api", "") != 4 {
		t.Fatalf("SetLimit: %+v, window %d", l, windowN(p, "api", ""))
	}
	if lim, _ := p.Limit("api"); lim.N != 4 {
		t.Fatalf("rule limit %v", lim)
	}
}

// The rule's checks: a charge heavier than the floor is refused (a key's
// level may fall there); invalid floors and ceilings are refused at New
// (Redis mode's refusals: TestAdaptiveRedisRefusals, in clientpool).
func TestAdaptChecks(t *testing.T) {
	p, _ := adaptEngine(t, adaptive("api", 10, 2))
	err := p.Acquire(context.Background(), new(Ticket), []Charge{{Rule: "api", Weight: 3}})
	if !errors.Is(err, ratesem.ErrWeightTooLarge) {
		t.Fatalf("weight 3 over a floor of 2: %v", err)
	}
	for _, a := range []Adaptive{{Floor: 0}, {Floor: -1}, {Floor: 5, Ceiling: 4}, {Floor: 1, Ceiling: MaxLearnedN + 1}} {
		_, err := New([]Rule{{Name: "x", Limit: window.Limit{Per: time.Second}, Adapt: &a}}, "")
		if !errors.Is(err, ratesem.ErrInvalidLimit) {
			t.Errorf("Adaptive %+v: %v, want ErrInvalidLimit", a, err)
		}
	}
	if _, err := New([]Rule{{Name: "x", Limit: window.Limit{Per: time.Nanosecond}, Adapt: &Adaptive{Floor: 1}}}, ""); !errors.Is(err, ratesem.ErrInvalidLimit) {
		t.Errorf("Per 1ns: %v", err)
	}
}

// The level is each key's window's N, whatever the window; each key has
// its own.
func TestAdaptEveryWindow(t *testing.T) {
	wins := map[string]func(window.Limit) window.Policy{
		"fixed":     window.NewFixedWindow,
		"fixedcomp": window.NewFixedCompletion,
		"sliding":   func(l window.Limit) window.Policy { return window.NewSlidingLog(l, 0) },
		"counter":   window.NewSlidingWindowCounter,
		"token":     func(l window.Limit) window.Policy { return window.NewTokenBucket(l, l.N) },
		"gcra":      func(l window.Limit) window.Policy { return window.NewGCRA(l, 1) },
	}
	for name, w := range wins {
		r := adaptive("api", 0, 2)
		r.Window = w
		p, clk := adaptEngine(t, r)
		a := take(t, p, Charge{Rule: "api", Key: "k1", Weight: 1})
		take(t, p, Charge{Rule: "api", Key: "k2", Weight: 1}).Release()
		clk.Add(time.Second)
		a.Release()
		b := take(t, p, Charge{Rule: "api", Key: "k1", Weight: 1})
		clk.Add(time.Second)
		b.Release()
		if n := windowN(p, "api", "k1"); n != 3 {
			t.Errorf("%s: k1's window N %d, want 3", name, n)
		}
		if n := windowN(p, "api", "k2"); n != 2 {
			t.Errorf("%s: k2's window N %d, want 2 (its own level)", name, n)
		}
	}
}

// panicky is a window whose SetLimit panics while armed.
type panicky struct {
	window.Policy
	armed *bool
}

func (p panicky) SetLimit(now time.Time, l window.Limit) {
	if *p.armed {
		panic("SetLimit")
	}
	p.Policy.SetLimit(now, l)
}

// A Rule.Window that panics when the level moves leaves the call released
// and the engine usable; the next signal sets the window to the law's
// level.
func TestAdaptPanickingWindow(t *testing.T) {
	armed := true
	r := adaptive("api", 0, 2)
	r.Window = func(l window.Limit) window.Policy { return panicky{window.NewCompletion(l), &armed} }
	p, clk := adaptEngine(t, r)
	a, b := take(t, p, api), take(t, p, api)
	clk.Add(time.Second)
	a.Release()
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		b.Release() // raises the level: SetLimit panics
	}()
	if ks := p.Snapshot(); ks[0].InFlight != 0 {
		t.Fatalf("units in flight after the panic: %+v", ks[0])
	}
	armed = false
	clk.Add(time.Second)
	c := take(t, p, api) // the engine is not locked
	clk.Add(time.Second)
	c.Release()
	if l, n := law(p, "api", ""), windowN(p, "api", ""); n != l.N() {
		t.Fatalf("window %d, law %d after the panic", n, l.N())
	}
}
