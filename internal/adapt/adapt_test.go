package adapt

import (
	"math"
	"math/rand"
	"slices"
	"testing"
)

const w = 1000 // a window of 1000 time units (ms in these tests)

func newLaw(floor, ceil int64) Law { return New(Params{Floor: floor, Ceiling: ceil, W: w}, 0) }

// prove runs n successes of calls started at from, ending at end, and
// returns the level after them.
func prove(l *Law, from, end int64) int64 {
	n := l.N()
	for range n {
		l.Success(from, end)
	}
	return l.N()
}

func TestNewClamps(t *testing.T) {
	l := New(Params{Floor: 0, Ceiling: -5, W: 0}, 0)
	if l.P.Floor != 1 || l.P.Ceiling != 1 || l.P.W != 1 || l.N() != 1 || l.S.G != 1 || l.S.LastCut != -1 || l.S.Inc != 1 {
		t.Fatalf("New clamps: %+v", l)
	}
	if l := New(Params{Floor: 10, Ceiling: 100, W: w}, 40); l.N() != 40 || l.S.G != 40 {
		t.Fatalf("start 40: %+v", l.S)
	}
	for _, start := range []int64{5, 101, -1} {
		if l := New(Params{Floor: 10, Ceiling: 100, W: w}, start); l.N() != 10 {
			t.Fatalf("start %d: N %d, want the floor", start, l.N())
		}
	}
}

// A level is proven only when W has passed AND N calls started at it succeeded.
func TestProofNeedsWindowAndFullCycle(t *testing.T) {
	l := newLaw(10, 1000)
	for range 100 { // many successes, but W has not passed
		l.Success(0, 500)
	}
	if l.N() != 10 {
		t.Fatalf("raised before W passed: %d", l.N())
	}
	l = newLaw(10, 1000)
	for range 9 { // W passed, but only 9 of 10 calls at the level succeeded
		l.Success(0, 1500)
	}
	if l.N() != 10 {
		t.Fatalf("raised after 9 of 10 calls: %d", l.N())
	}
	l.Success(0, 1500)
	if l.N() != 11 {
		t.Fatalf("not raised by the 10th: %d", l.N())
	}
	// Calls started before the change do not prove the new level.
	for range 50 {
		l.Success(1000, 3000)
	}
	if l.N() != 11 {
		t.Fatalf("calls started before the change proved it: %d", l.N())
	}
}

// Without a known B the step accelerates: +1, +2, +4 …, capped at 35% of N.
func TestAccelerateCapped(t *testing.T) {
	l := newLaw(10, 1<<40)
	var got []int64
	now := int64(0)
	for range 8 {
		now += w
		got = append(got, prove(&l, now-w, now))
	}
	want := []int64{11, 13, 17, 22, 29, 39, 52, 70} // inc 1, 2, 4, then capped at 35%: 17*35/100=5, 7, 10, 13, 18
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("levels %v, want %v", got, want)
		}
	}
}

// A failed probe above G goes back to G and remembers B; no deep cut.
func TestProbeFailBackToG(t *testing.T) {
	l := newLaw(10, 1000)
	prove(&l, 0, w) // 11, G 10
	if l.S.G != 10 || l.N() != 11 {
		t.Fatalf("%+v", l.S)
	}
	l.Throttle(w, w+10)
	if l.N() != 10 || l.S.B != 11 || l.S.G != 10 || l.S.LastCut != w+10 {
		t.Fatalf("probe failure: %+v", l.S)
	}
}

// Hysteresis: a throttle of a call started before the latest cut is ignored.
func TestHysteresis(t *testing.T) {
	l := newLaw(10, 1000)
	l.S.N, l.S.G = 100, 100
	l.S.LastChange = 1 << 40 // keep Tick out
	for range 300 {
		l.Success(0, 100)
	}
	l.Throttle(0, 100)
	n, st := l.N(), l.S
	l.Throttle(99, 150) // started before the cut at 100
	if l.S != st {
		t.Fatalf("throttle of a call before the cut changed the state: %+v -> %+v", st, l.S)
	}
	l.Throttle(100, 160) // started at the cut: counts
	if l.N() >= n || l.S.LastCut != 160 {
		t.Fatalf("throttle of a call after the cut ignored: %+v", l.S)
	}
}

// A throttle at G cuts to min(n·9/10, slots·95/100), at least Floor.
func TestDeepCut(t *testing.T) {
	l := newLaw(10, 1000)
	l.S.N, l.S.G = 100, 100
	l.Throttle(0, 0) // nothing accepted in the last window: the floor
	if l.N() != 10 || l.S.G != 10 || l.S.B != 100 {
		t.Fatalf("cut without accepted calls: %+v", l.S)
	}
	l = newLaw(10, 1000)
	l.S.N, l.S.G = 100, 100
	for range 200 { // 200 accepted in the last window: 9/10 rules
		l.S.LastChange = 1 << 40 // keep Tick out
		l.Success(5000, 5050)
	}
	l.Throttle(5050, 5100)
	if l.N() != 90 {
		t.Fatalf("cut by 9/10: %d, want 90", l.N())
	}
	l = newLaw(10, 1000)
	l.S.N, l.S.G = 100, 100
	for range 60 { // 60 accepted, latency 50: slots 60*1050/1000=63, ·95/100=59
		l.S.LastChange = 1 << 40
		l.Success(5000, 5050)
	}
	l.Throttle(5050, 5100)
	if l.N() != 59 || l.S.G != 59 {
		t.Fatalf("cut by accepted slots: %d, want 59", l.N())
	}
}

// Below B the level halves the gap to B per proven cycle.
func TestClimbBackHalvesGap(t *testing.T) {
	l := newLaw(10, 1000)
	l.S.N, l.S.G, l.S.B = 50, 50, 100
	if n := prove(&l, 0, w); n != 75 {
		t.Fatalf("climb: %d, want 75", n)
	}
	if n := prove(&l, w, 2*w); n != 87 {
		t.Fatalf("climb: %d, want 87", n)
	}
	l.S.N, l.S.B, l.S.LastChange = 97, 100, 2*w
	if n := prove(&l, 2*w, 3*w); n != 98 {
		t.Fatalf("climb by at least 1: %d, want 98", n)
	}
}

// One below B, a probe of +1 waits max(EdgeWait, ⌈EdgeCalls/n⌉) clean cycles.
func TestEdgeProbeWaits(t *testing.T) {
	l := newLaw(10, 1000)
	l.S.N, l.S.G, l.S.B = 20, 20, 21 // ⌈100/20⌉ = 5 cycles
	now := int64(0)
	for i := 1; i <= 5; i++ {
		now += w
		n := prove(&l, now-w, now)
		if i < 5 && n != 20 || i == 5 && n != 21 {
			t.Fatalf("cycle %d: %d", i, n)
		}
	}
	l = newLaw(10, 1000)
	l.S.N, l.S.G, l.S.B = 200, 200, 201 // EdgeWait = 2 rules
	if n := prove(&l, 0, w); n != 200 {
		t.Fatalf("probed after one cycle: %d", n)
	}
	if n := prove(&l, w, 2*w); n != 201 {
		t.Fatalf("no probe after two cycles: %d", n)
	}
}

// At B, proven clean, B is forgotten and the level probes n/16 upwards,
// then climbs with steps that quadruple (capped at 35%).
func TestForgetBAndProbe(t *testing.T) {
	l := newLaw(10, 1000)
	l.S.N, l.S.G, l.S.B = 160, 160, 160
	if n := prove(&l, 0, w); n != 170 || l.S.B != 0 {
		t.Fatalf("at B: %d B %d, want 170 B 0", n, l.S.B)
	}
	if l.S.Inc != 40 {
		t.Fatalf("inc %d, want 40 (quadrupled)", l.S.Inc)
	}
}

// After a step up of the true limit (50 to 150), the edge probe at B = 51
// passes: the climb from there takes 4 cycles to 120 (×4 steps: +3, +12,
// +23, +31), where doubling steps took 5 to 129 and 6 to 174, so that the
// acceptance test recovers within 10 windows of the step for every seed
// (clientpool's TestAdaptiveUnknownServer). A throttle ends the fast climb:
// the next climb from the start level doubles again.
func TestClimbAfterForgottenB(t *testing.T) {
	l := newLaw(10, 1000)
	l.S.N, l.S.G, l.S.B = 51, 51, 51
	var got []int64
	now := int64(0)
	for range 4 {
		now += w
		got = append(got, prove(&l, now-w, now))
	}
	if want := []int64{54, 66, 89, 120}; !slices.Equal(got, want) {
		t.Fatalf("climb after a forgotten B: %v, want %v", got, want)
	}
	l.Throttle(now, now+10) // the probe at 120 fails: back to 89, B 120
	if l.N() != 89 || l.S.B != 120 || l.S.Clean != 0 {
		t.Fatalf("after the throttle: %+v", l.S)
	}
}

func TestCeilingAndFloorBound(t *testing.T) {
	l := newLaw(10, 12)
	now := int64(0)
	for range 10 {
		now += w
		prove(&l, now-w, now)
	}
	if l.N() != 12 {
		t.Fatalf("ceiling: %d", l.N())
	}
	l.SetCeiling(11)
	if l.N() != 11 || l.S.G != 11 {
		t.Fatalf("SetCeiling: %+v", l.S)
	}
	l.SetCeiling(0)
	if l.N() != 10 || l.P.Ceiling != 10 {
		t.Fatalf("SetCeiling below floor: %+v", l)
	}
	for i := range 50 {
		l.Throttle(now+int64(i), now+int64(i))
	}
	if l.N() != 10 {
		t.Fatalf("below the floor: %d", l.N())
	}
}

func TestAcceptedBuckets(t *testing.T) {
	l := newLaw(10, 1000)
	l.S.LastChange = 1 << 40
	for range 10 {
		l.Success(100, 500) // bucket [0, 1000)
	}
	if a := l.Accepted(900); a != 10 {
		t.Fatalf("Accepted %d", a)
	}
	if a := l.Accepted(1500); a != 5 { // half of the previous bucket
		t.Fatalf("Accepted at 1500: %d, want 5", a)
	}
	if a := l.Accepted(5000); a != 0 || l.S.CurStart != 5000 {
		t.Fatalf("Accepted after 2W: %d %+v", a, l.S)
	}
}

func TestLatencyAverage(t *testing.T) {
	l := newLaw(10, 1000)
	l.S.LastChange = 1 << 40
	l.Success(0, 64)
	if l.S.Lat != 64 {
		t.Fatalf("first sample: %d", l.S.Lat)
	}
	l.Success(0, 128)
	if l.S.Lat != 65 {
		t.Fatalf("average: %d, want 65", l.S.Lat)
	}
	l.Success(500, 100) // now before start: 0
	if l.S.Lat != 63 {
		t.Fatalf("negative sample: %d, want 63", l.S.Lat)
	}
}

// Hostile inputs: times out of order, huge values; the level stays within bounds.
func TestFuzzBounds(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for seed := range 20 {
		l := New(Params{Floor: 3, Ceiling: 500, W: int64(1 + seed*100)}, 0)
		now := int64(0)
		for range 20000 {
			now += rng.Int63n(50) - 5
			now = max(now, 0)
			s := max(now-rng.Int63n(200)+20, 0)
			if rng.Intn(30) == 0 {
				l.Throttle(s, now)
			} else {
				l.Success(s, now)
			}
			if l.N() < 3 || l.N() > 500 || l.S.G < 3 || l.S.G > 500 || l.S.Inc < 1 || l.S.Lat < 0 {
				t.Fatalf("seed %d: state out of bounds: %+v", seed, l.S)
			}
		}
	}
}

// Apply is the three methods; replaying a run gives the same states (the
// law is deterministic).
func TestApplyReplay(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	var evs []Event
	now := int64(0)
	for range 5000 {
		now += rng.Int63n(20)
		k := EventSuccess
		switch rng.Intn(300) {
		case 0:
			k = EventThrottle
		case 1:
			k = EventTick
		}
		evs = append(evs, Event{Kind: k, Start: max(now-20-rng.Int63n(60), 0), Now: now})
	}
	a, b := newLaw(5, 300), newLaw(5, 300)
	top := int64(0)
	for _, e := range evs {
		top = max(top, a.N())
		a.Apply(e)
		switch e.Kind {
		case EventSuccess:
			b.Success(e.Start, e.Now)
		case EventThrottle:
			b.Throttle(e.Start, e.Now)
		case EventTick:
			b.Tick(e.Now)
		}
		if a != b {
			t.Fatalf("Apply(%+v): %+v, the methods: %+v", e, a.S, b.S)
		}
	}
	if top < 20 {
		t.Fatalf("the replay never climbed: top %d, %+v", top, a.S)
	}
}

// Absurd inputs (a window of centuries, huge counts and latencies) saturate
// instead of wrapping: the level stays within [Floor, Ceiling].
func TestAbsurdNumbers(t *testing.T) {
	const huge = int64(1) << 62
	l := New(Params{Floor: 1, Ceiling: 1 << 40, W: huge}, 1<<40)
	l.S.Prev, l.S.Cur, l.S.Lat = 1<<40, 1<<40, huge
	l.Throttle(0, huge/2)
	if l.N() < 1 || l.N() > 1<<40 {
		t.Fatalf("level %d out of bounds", l.N())
	}
	if got := mulDiv(1<<40, huge, 3); got != math.MaxInt64 {
		t.Fatalf("mulDiv saturation: %d", got)
	}
	if got := mulDiv(7, 9, 10); got != 6 {
		t.Fatalf("mulDiv(7, 9, 10) = %d", got)
	}
	if got := mulDiv(1<<62, 4, 8); got != 1<<61 {
		t.Fatalf("mulDiv exact in 128 bits: %d", got)
	}
}

// A success of k units moves the counts and the proof as k successes of
// one unit at the same instants do (the level counts units); the latency
// average takes one sample per call. Negative units count as 0.
func TestSuccessUnits(t *testing.T) {
	p := Params{Floor: 10, Ceiling: 1000, W: 1000}
	a, b := New(p, 0), New(p, 0)
	for now := int64(10); now < 20000; now += 100 {
		a.SuccessUnits(now-10, now, 10)
		for range 10 {
			b.Success(now-10, now)
		}
		a.S.Lat = b.S.Lat
		if a.S != b.S {
			t.Fatalf("at %d: units %+v, calls %+v", now, a.S, b.S)
		}
	}
	c := New(p, 0)
	c.SuccessUnits(0, 10, -5)
	if c.S.Cur != 0 || c.S.Cycled != 0 {
		t.Errorf("negative units counted: %+v", c.S)
	}
	var e Law = New(p, 0)
	e.Apply(Event{Kind: EventSuccess, Start: 0, Now: 10, Units: 7})
	if e.S.Cur != 7 {
		t.Errorf("Apply with Units 7: Cur %d", e.S.Cur)
	}
}

// Near math.MaxInt64 (a Ceiling of "no limit" from a caller, successes of
// absurd settled weights) the level saturates at the ceiling: it never
// wraps below Floor, and a cut is about 90% of it, not the floor.
func TestHugeLevels(t *testing.T) {
	const big = math.MaxInt64
	l := New(Params{Floor: 1, Ceiling: big, W: 10}, big-2)
	for i := int64(1); i <= 10; i++ {
		l.SuccessUnits(i*100-1, i*100, big)
		if l.N() < 1 || l.N() > big {
			t.Fatalf("step %d: level %d", i, l.N())
		}
	}
	if l.N() != big {
		t.Fatalf("level %d, want the ceiling %d", l.N(), int64(big))
	}
	l.SuccessUnits(2000, 2001, big) // proven at the ceiling: G = N
	l.Throttle(2001, 2002)          // in the window of those successes
	if l.N() < big/10*8 {
		t.Errorf("a throttle at %d cut to %d: want about 90%%", int64(big), l.N())
	}
}

// A clock that goes back (a test clock set back, Redis failing over to a
// replica whose TIME is behind, an NTP step) re-anchors the law at the
// new now: the level is not frozen until the clock catches up with the
// instants it recorded, and throttles are heard again.
func TestClockBack(t *testing.T) {
	const w = 1000
	l := New(Params{Floor: 10, Ceiling: 1000, W: w}, 100)
	late := int64(3600 * 1000) // an hour of ms
	l.Success(late-5, late)
	l.Throttle(late, late+1) // a cut at the good level: LastCut = late+1
	cut := l.N()
	// The clock is back at 0: ten windows of clean successes.
	for now := int64(10); now < 10*w; now += 10 {
		for range cut / 10 {
			l.Success(now-5, now)
		}
	}
	if l.N() <= cut {
		t.Fatalf("level %d after ten clean windows on a clock set back: want above %d", l.N(), cut)
	}
	before := l.N()
	l.Throttle(10*w, 10*w+1)
	if l.N() >= before {
		t.Errorf("a throttle after the clock went back was ignored: level %d", l.N())
	}
}
