// Package adapt is the control law of ratesem's adaptive limits
// (clientpool.Adaptive): the limit N of one key's window when the server
// publishes none, raised while calls succeed and cut on throttles. It is a
// small pure state machine on explicit time: no clock, no lock, no
// allocation; the engine calls it under its own lock, and the Redis mode
// runs the same law in Lua inside its scripts (one HASH per key), which is
// why the state is a plain struct of int64s and every step is integer
// arithmetic (see "Exactness" below).
//
// # The law ("HL": hysteresis and last-good/last-bad memory)
//
// The law was designed and tuned by simulation against servers whose true
// limit is unknown and steps (100 > 50 > 150 > 75 > 100 per window) or
// drifts, counting completion windows, fixed windows or a sliding log;
// textbook AIMD (halve on every throttle) averages about 75% of the limit
// in its sawtooth. HL instead:
//
//   - ignores a throttle of a call started before the latest cut
//     (hysteresis: it was admitted under an older, higher level);
//   - on a throttle at a level above the last good one (a probe), goes back
//     to the last good level G and remembers the failed level as B (bad);
//   - on a throttle at the good level itself (the limit dropped), cuts to
//     max(Floor, min(⌊0.9·n⌋, ⌊0.95·slots⌋)), slots = the calls accepted in
//     the last window scaled by (W+latency)/W to the window's slots, and
//     that level is the new G;
//   - proves a level by one clean full cycle: a window W has passed since
//     it was set AND n calls started at it have succeeded; then it is G, and
//     n moves: without a known B it accelerates (+1, +2, +4 … at most 35%
//     of n per step); below B it halves the gap to B each cycle; one below
//     B it probes +1 only after max(2, ⌈100/n⌉) clean cycles (a probe costs
//     about one rejection: at most ~1% of calls); at B (proven clean) the
//     limit rose and B is stale: it is forgotten and the level probes n/16
//     upwards, then accelerates with steps that quadruple per cycle (×4,
//     not ×2; still at most 35% of n), so that a limit that rose far (50
//     to 150) is reached about two cycles sooner;
//   - never leaves [Floor, Ceiling].
//
// # Exactness (the Lua port)
//
// Every quantity is an int64 and every division floors non-negative
// operands (x·9/10 is n*9/10, never 0.9*n), so a port that computes with
// integers, or with doubles whose values stay below 2^53 and floors every
// quotient (math.floor in Lua), gives the same states for the same inputs.
// The largest intermediate products are a·Lat and prev·(W−elapsed) (a,
// prev: calls counted in a window): with times in µs they stay below 2^53
// for windows up to a day and up to 10^5 calls per window. Go computes them
// in 128 bits (mulDiv), so absurd inputs saturate instead of wrapping. Times are
// in one unit chosen by the caller (the engine and the Redis scripts use
// µs) and must be ≥ 0; the law never reads a clock. Inputs out of order
// (now before start, now before an earlier now) are taken as they come:
// a negative latency counts as 0, a window does not pass backwards, and a
// now before an instant the state recorded (LastChange, LastCut, CurStart:
// the clock went back) moves it to now first (back), so that the law goes
// on from the new clock instead of freezing until it catches up.
//
// # Against the simulation (LAW.md and law.go of the research)
//
// The same rules and constants, in integers: the successes of the last W
// are the two aligned buckets of the simulation's -approxa (Accepted), not
// a log; the latency average starts at the first sample (not 50 ms) and
// moves as (Lat·63 + d)/64; the deep cut is min(n·9/10, ⌊A·(W+Lat)/W⌋·95/100)
// clamped to [Floor, Ceiling]; Tick runs at every Success (the simulation
// ran it every ms; a level can only be proven by a success anyway, and a
// Throttle restarts the proof); LastCut starts at −1 (times are ≥ 0); the
// simulation's unreachable "n < G: back to G" branch is left out; after
// a forgotten B the steps grow ×4, not ×2 (RiseMul, below).
//
// # The climb after a step up (traces, issue 21)
//
// Traces of clientpool's TestAdaptiveUnknownServer (limit 50 to 150 at
// window 120, completion server, 500 runs of 5 seeds) show the level
// climbing the same way in every run; the level, not the throughput at
// it, sets the recovery. At N = 50 the law sits at the edge (G 50, B 51),
// probing 51 every 2 cycles (a cycle is about 1.07 W: W and N calls
// admitted at the level); after the step the next probe passes and B is
// forgotten one proof later: 2.3 to 2.7 windows after the step. With
// steps doubling from n/16 the level then went 54, 60, 72, 96, 129 (86%
// of 150, 6.8 windows after the step), 174 (throttled: back to 129, B
// 174), 151 (throttled), 140, 145. Each failed probe leaves the window
// holding more calls than the level (the server counts them as well), so
// admissions stop for part of a window and resume in a burst: 62 to 107
// calls in the window after a failed probe, against 140 at the level. The
// recovery (the first 3 windows whose mean reaches 85%) was 6 windows
// when those dips fell after it and 9 to 11 when they fell inside it (5
// runs in 500 at 10 or more). With steps ×4 after a forgotten B the climb
// is 54, 66, 89, 120, 162 (throttled), 141: the level passes 85% about
// two cycles sooner: over 500 runs every recovery after the step up took
// at most 8 windows (mean 5.8 against 6.2), and over 100 more seeds one
// took 10 (a failed probe's dip still inside the mean). The first step stays
// n/16: against a fixed-window server a level one above the limit passes
// a cycle now and then (B forgotten every ~10 windows at N = 100), and a
// larger first step would cost more rejections there.
package adapt

import (
	"math"
	"math/bits"
)

// Law constants (LAW.md, tuned by simulation; see the package doc).
const (
	// BetaNum/BetaDen is the deep cut of the good level: n·9/10.
	BetaNum, BetaDen = 9, 10
	// BetaANum/BetaADen scales the slots of the calls accepted in the last
	// window: slots·95/100.
	BetaANum, BetaADen = 95, 100
	// EdgeWait is the fewest clean cycles one below B before probing B.
	EdgeWait = 2
	// EdgeCalls: one edge probe per ≥ EdgeCalls calls (⌈EdgeCalls/n⌉ cycles).
	EdgeCalls = 100
	// ProveB is the clean cycles at B after which B is forgotten.
	ProveB = 1
	// Probe0Den: the first step above a forgotten B is n/16 (at least 1).
	Probe0Den = 16
	// RiseMul: in the climb after a forgotten B the step is multiplied by
	// RiseMul per cycle (by 2 in the first climb from the start level).
	RiseMul = 4
	// IncCapNum/IncCapDen caps a step at n·35/100 (at least 1).
	IncCapNum, IncCapDen = 35, 100
	// LatWeight: the latency average moves by 1/64 of a sample.
	LatWeight = 64
)

// Params configure a Law: units of calls (or weight units) per window and a
// time unit of the caller's choice, the same for W and every instant.
type Params struct {
	// Floor is the lowest level and the one a new key starts at (≥ 1).
	Floor int64
	// Ceiling is the highest level (≥ Floor): the published limit when one
	// is known, else a generous bound.
	Ceiling int64
	// W is the window's length (> 0), in the time unit of the instants.
	W int64
}

// State is one key's law state: plain int64s, the same fields a Redis HASH
// keeps. The zero State is not valid: start from New.
type State struct {
	// N is the current level: the window's limit (calls, or units, per W).
	N int64
	// G is the last good level: the highest level proven by a clean cycle
	// (or the level a deep cut set).
	G int64
	// B is the last bad level: the lowest level that drew a throttle and
	// was not proven since; 0 when none is known.
	B int64
	// Inc is the next step up when no B is known (1, doubling, capped).
	Inc int64
	// Clean counts clean cycles at B or one below it (probing rules);
	// while no B is known, 1 marks a climb after a forgotten B (steps
	// grow by RiseMul) and 0 the first climb from the start level.
	Clean int64
	// Cycled counts the units of successes of calls started at or after
	// LastChange: a level is proven once Cycled ≥ N and W has passed.
	Cycled int64
	// LastChange is the instant the level last changed (or was proven).
	LastChange int64
	// LastCut is the instant of the latest cut; −1 before any. A throttle
	// of a call started before it is ignored (hysteresis).
	LastCut int64
	// Lat is the average latency of successful calls (start to end), an
	// exponential average of weight 1/LatWeight; 0 before the first.
	Lat int64
	// Cur, Prev count the units of successes ending in the current and previous
	// aligned windows [CurStart, CurStart+W) and the one before; CurStart
	// is a multiple of W. Their weighted sum estimates the successes of the
	// last W (Accepted).
	Cur, Prev, CurStart int64
}

// Law is one key's adaptive limit: its Params and State. It is not safe
// for concurrent use: the caller serializes (the engine's lock, a Redis
// script's atomicity).
type Law struct {
	P Params
	S State
}

// New returns a Law at p.Floor, with p clamped to sane values: Floor ≥ 1,
// Ceiling ≥ Floor, W ≥ 1. start, if within [Floor, Ceiling], is the
// initial level (and the initial G); else the level starts at Floor.
func New(p Params, start int64) Law {
	p.Floor = max(p.Floor, 1)
	p.Ceiling = max(p.Ceiling, p.Floor)
	p.W = max(p.W, 1)
	n := p.Floor
	if start > p.Floor && start <= p.Ceiling {
		n = start
	}
	return Law{P: p, S: State{N: n, G: n, Inc: 1, LastCut: -1}}
}

// N returns the current level: the window's limit.
func (l *Law) N() int64 { return l.S.N }

// back re-anchors the instants the state recorded when now is before them
// (the clock went back: a test clock, a Redis failover to a replica whose
// TIME is behind): the latest change and cut, and the current bucket,
// move to now, so that the level is proven and cut on the new clock
// rather than frozen until it catches up. A no-op on a clock that never
// goes back. Success, Throttle and Tick run it first.
func (l *Law) back(now int64) {
	s := &l.S
	if now < s.LastChange {
		s.LastChange = now
	}
	if now < s.LastCut {
		s.LastCut = now
	}
	if now < s.CurStart {
		s.CurStart = now - now%l.P.W
	}
}

// roll moves the two success buckets to the aligned window holding now.
func (l *Law) roll(now int64) {
	s, w := &l.S, l.P.W
	el := now - s.CurStart
	switch {
	case el >= 2*w:
		s.Prev, s.Cur = 0, 0
		s.CurStart = now - now%w
	case el >= w:
		s.Prev, s.Cur = s.Cur, 0
		s.CurStart += w
	}
}

// Accepted returns the estimated successes that ended in (now−W, now]:
// the current bucket plus the previous one weighted by the part of it
// still inside the last W, floored.
func (l *Law) Accepted(now int64) int64 {
	l.roll(now)
	s, w := &l.S, l.P.W
	el := min(max(now-s.CurStart, 0), w)
	return s.Cur + mulDiv(s.Prev, w-el, w)
}

// mulDiv returns ⌊a·b/c⌋ for a, b ≥ 0 and c > 0 with b ≤ c, or b any when
// the result fits: exact in 128 bits, so that absurd windows (a Per of
// centuries) cannot wrap; it saturates at math.MaxInt64.
func mulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int64(min(q, math.MaxInt64))
}

// Success reports a call of one unit started at start that ended at now
// without a throttle: SuccessUnits(start, now, 1).
func (l *Law) Success(start, now int64) { l.SuccessUnits(start, now, 1) }

// SuccessUnits reports a call of units units (its weight, or its settled
// weight: the level counts units, not calls) started at start that ended
// at now without a throttle. It counts the units in the last window and
// toward the proof of the level when the call started at it, the call's
// latency in the average, then runs Tick. units < 0 counts as 0; the
// counts saturate.
func (l *Law) SuccessUnits(start, now, units int64) {
	s := &l.S
	units = max(units, 0)
	l.back(now)
	l.roll(now)
	s.Cur = sat(s.Cur, units)
	if start >= s.LastChange {
		s.Cycled = sat(s.Cycled, units)
	}
	d := max(now-start, 0)
	if s.Lat == 0 {
		s.Lat = d
	} else {
		s.Lat = (s.Lat*(LatWeight-1) + d) / LatWeight
	}
	l.Tick(now)
}

// Throttle reports a call started at start that the server throttled
// (the reply came at now). A call started before the latest cut is
// ignored (hysteresis). Otherwise: a probe above G goes back to G (B = the
// probed level); a throttle at G cuts deep (see the package doc) and sets
// G to the cut level. Both restart the proof (Cycled, Clean, Inc) at now.
func (l *Law) Throttle(start, now int64) {
	s, p := &l.S, &l.P
	l.back(now)
	if start < s.LastCut {
		return
	}
	if s.N > s.G {
		s.B, s.N = s.N, s.G
	} else {
		s.B = s.N
		// ⌊A·(W+Lat)/W⌋ = A + ⌊A·Lat/W⌋ (A is whole), without overflow.
		a := l.Accepted(now)
		slots := sat(a, mulDiv(a, s.Lat, p.W))
		n := min(mulDiv(s.N, BetaNum, BetaDen), mulDiv(slots, BetaANum, BetaADen))
		s.N = min(max(n, p.Floor), p.Ceiling)
		s.G = s.N
	}
	s.Inc, s.Clean, s.Cycled = 1, 0, 0
	s.LastCut, s.LastChange = now, now
}

// Tick proves the level once W has passed since it was set and N calls
// started at it have succeeded, and then moves it (see the package doc).
// It changes nothing otherwise; calling it again at once is a no-op.
// Success runs it (the engine feeds every release to Success, so it needs
// no timer); a Redis script may run it on admissions too.
func (l *Law) Tick(now int64) {
	s, p := &l.S, &l.P
	l.back(now)
	if now-s.LastChange < p.W || s.Cycled < s.N {
		return
	}
	s.LastChange, s.Cycled = now, 0
	s.G = s.N
	switch {
	case s.B > 0 && s.N >= s.B:
		// Holding at the old bad level, clean: the limit rose and B is
		// stale. Forget it and probe upwards: a first step of n/16 (cheap
		// when the pass was luck, as against a fixed-window server), then
		// steps that quadruple (Clean = 1 marks this climb), so that a
		// limit that rose far is reached in few cycles.
		s.Clean++
		if s.Clean >= ProveB {
			s.B, s.Clean = 0, 1
			s.Inc = max(1, s.N/Probe0Den)
			l.step()
		}
	case s.B > 0 && s.N >= s.B-1:
		// At the edge: probe B again, rarely (a probe costs ~1 rejection).
		s.Clean++
		if s.Clean >= max(EdgeWait, (EdgeCalls+s.N-1)/s.N) {
			s.N = min(sat(s.N, 1), p.Ceiling)
			s.Clean = 0
		}
	case s.B > 0:
		// Climb back: halve the gap to B per cycle.
		s.N = min(sat(s.N, max(1, (s.B-s.N)/2)), p.Ceiling)
	default:
		l.step()
	}
}

// sat returns a+b for a, b ≥ 0, saturating at math.MaxInt64.
func sat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// step raises N by Inc (within the ceiling) and multiplies Inc by 2 (by
// RiseMul in a climb after a forgotten B: Clean > 0), capped at 35% of
// the new N (at least 1). It runs only while no B is known.
func (l *Law) step() {
	s := &l.S
	s.N = min(sat(s.N, s.Inc), l.P.Ceiling)
	mul := int64(2)
	if s.Clean > 0 {
		mul = RiseMul
	}
	s.Inc = min(mulDiv(s.Inc, mul, 1), max(1, mulDiv(s.N, IncCapNum, IncCapDen)))
}

// SetCeiling changes the ceiling (a limit the server published, learned
// from a reply): c < Floor counts as Floor. N and G are lowered to it; a
// higher ceiling lets N climb by the law's own steps.
func (l *Law) SetCeiling(c int64) {
	p, s := &l.P, &l.S
	p.Ceiling = max(c, p.Floor)
	s.N = min(s.N, p.Ceiling)
	s.G = min(s.G, p.Ceiling)
}

// Event is one input of a Law, for replaying a run (a diff test of another
// implementation of the law, such as the Redis scripts'): a success or a
// throttle of a call started at Start reported at Now, or a Tick at Now.
type Event struct {
	Kind       EventKind
	Start, Now int64
	// Units is a success's units (SuccessUnits); 0 means 1.
	Units int64
}

// EventKind is the kind of an Event.
type EventKind uint8

// The kinds of Event.
const (
	EventSuccess EventKind = iota
	EventThrottle
	EventTick
)

// Apply runs e on l: Success, Throttle or Tick. To diff-test another
// implementation, apply the same events to both from New's state and
// compare the State after each, field by field.
func (l *Law) Apply(e Event) {
	switch e.Kind {
	case EventSuccess:
		u := e.Units
		if u == 0 {
			u = 1
		}
		l.SuccessUnits(e.Start, e.Now, u)
	case EventThrottle:
		l.Throttle(e.Start, e.Now)
	case EventTick:
		l.Tick(e.Now)
	}
}
