package rstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ratesem/ratesem/internal/adapt"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"

	goredis "github.com/redis/go-redis/v9"
)

// hlState is the law's state as adaptScript keeps it (field for field;
// m, the latest instant seen, is Redis's own).
type hlState struct {
	n, G, B, inc, clean, cyc, chg, cut, cur, prev, cst, lat, m int64
}

// lawRef is the Go law (internal/adapt) as Adapt runs it in Redis: made
// at the first report with its level set then, fed one Success per call of
// a batch.
type lawRef struct {
	l     adapt.Law
	valid bool
}

// apply feeds the report ev at now (µs) to the reference and returns n.
func (r *lawRef) apply(now, W, fl, ce, start int64, ev AdaptEvent) int64 {
	if !r.valid {
		r.l = adapt.New(adapt.Params{Floor: fl, Ceiling: ce, W: W}, start)
		r.l.S.LastChange = now
		r.valid = true
	}
	st := ev.Start.UnixMicro()
	switch {
	case ev.Throttled:
		r.l.Throttle(st, now)
	case ev.Count == 0:
		r.l.Tick(now)
	default:
		for range ev.Count {
			r.l.Success(st, now)
		}
	}
	return r.l.N()
}

// state is the reference's state as adaptScript keeps it.
func (r *lawRef) state(now int64) hlState {
	S := r.l.S
	return hlState{S.N, S.G, S.B, S.Inc, S.Clean, S.Cycled, S.LastChange, S.LastCut, S.Cur, S.Prev, S.CurStart, S.Lat, now}
}

// adaptStateOf reads the law's state of c's limiter from Redis.
func adaptStateOf(t *testing.T, s *Store, rdb goredis.UniversalClient, scope string, c Charge) (hlState, bool) {
	t.Helper()
	m, err := rdb.HGetAll(context.Background(), s.adaptKey(scope, c)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(m) == 0 {
		return hlState{}, false
	}
	f := func(k string) int64 {
		v, err := strconv.ParseInt(m[k], 10, 64)
		if err != nil {
			t.Fatalf("field %s = %q: %v", k, m[k], err)
		}
		return v
	}
	return hlState{f("n"), f("G"), f("B"), f("inc"), f("clean"), f("cyc"), f("chg"), f("cut"),
		f("cur"), f("prev"), f("cst"), f("lat"), f("m")}, true
}

func storedSpec(t *testing.T, s *Store, rdb goredis.UniversalClient, scope string, c Charge) (string, string) {
	t.Helper()
	v, err := rdb.HMGet(context.Background(), s.Keys(scope, c)[0], "s", "S").Result()
	if err != nil {
		t.Fatal(err)
	}
	a, _ := v[0].(string)
	b, _ := v[1].(string)
	return a, b
}

// TestAdaptDifferential: random reports (successes alone and batched,
// throttles of calls started before and after the last cut, idle
// spells, ticks alone) applied to the Lua law and to the Go reference
// give the same n and the same state, field for field, after every event;
// the limit stored for the fleet is n's. Over completion windows of 100 ms
// and 1 s, floors 1 and 10, a ceiling of 200 and none.
func TestAdaptDifferential(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s, rdb := newStore(t, clk, time.Minute)
	type cfg struct {
		per           time.Duration
		fl, ce, start int64
	}
	cfgs := []cfg{{100 * time.Millisecond, 1, 200, 0}, {time.Second, 10, 0, 50}, {100 * time.Millisecond, 3, 40, 41}}
	changes, cuts := 0, 0
	for ci, cf := range cfgs {
		for seed := range uint64(4) {
			rng := rand.New(rand.NewPCG(seed, uint64(ci)+21))
			c := Charge{Rule: "adapt", Key: fmt.Sprint("k", ci, "-", seed), Spec: spec(Completion, 1, cf.per)}
			W := cf.per.Microseconds()
			ce := cf.ce
			if ce == 0 {
				ce = MaxN
			}
			var ref lawRef
			var starts []int64 // recent admissions, for reports
			prevN := int64(-1)
			for step := range 1500 {
				// time moves on by 0 to W/4, now and then by several Ws
				d := rng.Int64N(W/4 + 1)
				if rng.IntN(200) == 0 {
					d = W * (1 + rng.Int64N(3))
				}
				clk.add(time.Duration(d) * time.Microsecond)
				now := clk.t.UnixMicro()
				starts = append(starts, now)
				if len(starts) > 64 {
					starts = starts[1:]
				}
				st := starts[rng.IntN(len(starts))]
				ev := AdaptEvent{Start: time.UnixMicro(st)}
				switch op := rng.IntN(100); {
				case op < 4:
					ev = AdaptEvent{Throttled: true, Start: time.UnixMicro(st)}
				case op < 6:
					ev.Count = 0 // the tick alone
				case op < 70:
					ev.Count = 1
				default:
					ev.Count = 1 + rng.Int64N(max(ref.l.N()/2, 2))
				}
				// now and then several reports in one call (AdaptAll):
				// successes of older calls, then newer ones, a throttle
				evs := []AdaptEvent{ev}
				if !ev.Throttled && rng.IntN(6) == 0 {
					evs = append(evs, AdaptEvent{Start: time.UnixMicro(now - rng.Int64N(W/8+1)), Count: rng.Int64N(8)})
					if rng.IntN(3) == 0 {
						evs = append(evs, AdaptEvent{Throttled: true, Start: time.UnixMicro(starts[rng.IntN(len(starts))])})
					}
				}
				var want int64
				for _, e := range evs {
					want = ref.apply(now, W, cf.fl, ce, cf.start, e)
				}
				lv, err := s.AdaptAll(ctx, "diff", c, AdaptBounds{Floor: cf.fl, Ceiling: cf.ce, Start: cf.start}, evs...)
				if err != nil {
					t.Fatal(err)
				}
				got := lv.N
				if lv.Changed.UnixMicro() != ref.l.S.LastChange || lv.Cycled != ref.l.S.Cycled {
					t.Fatalf("step %d: Changed %v, want %d", step, lv.Changed, ref.l.S.LastChange)
				}
				gs, ok := adaptStateOf(t, s, rdb, "diff", c)
				if got != want || !ok || gs != ref.state(now) {
					t.Fatalf("cfg %d seed %d step %d %+v: Lua n=%d state %+v, Go n=%d state %+v", ci, seed, step, ev, got, gs, want, ref.state(now))
				}
				if got != prevN {
					changes++
					sp, S := storedSpec(t, s, rdb, "diff", c)
					if wantSp := fmt.Sprintf("1/%d/%d/0/0", got, W); sp != wantSp || S != "1" {
						t.Fatalf("step %d: stored %q %q, want %q \"1\"", step, sp, S, wantSp)
					}
					if got < prevN {
						cuts++
					}
					prevN = got
				}
			}
		}
	}
	// the schedule must reach every branch that changes n
	if changes < 100 || cuts < 20 {
		t.Fatalf("only %d level changes, %d cuts: the schedule does not exercise the law", changes, cuts)
	}
	t.Logf("%d level changes, %d of them down", changes, cuts)
}

// TestAdaptDifferentialClimb: the schedule of a limit that dropped and
// rose far (rare in TestAdaptDifferential's random one): a deep cut, the
// climb back halving the gap to the bad level, the edge, the probe that
// passes (the bad level is forgotten) and the climb after it, whose steps
// quadruple below their cap; the Lua law and the Go reference stay equal
// field for field after every report.
func TestAdaptDifferentialClimb(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s, rdb := newStore(t, clk, time.Minute)
	const per = time.Second
	W := per.Microseconds()
	c := Charge{Rule: "adapt", Key: "climb", Spec: spec(Completion, 1, per)}
	b := AdaptBounds{Floor: 10, Start: 60}
	var ref lawRef
	report := func(ev AdaptEvent) {
		t.Helper()
		now := clk.t.UnixMicro()
		want := ref.apply(now, W, b.Floor, MaxN, b.Start, ev)
		lv, err := s.AdaptAll(ctx, "climb", c, b, ev)
		if err != nil {
			t.Fatal(err)
		}
		gs, ok := adaptStateOf(t, s, rdb, "climb", c)
		if lv.N != want || !ok || gs != ref.state(now) {
			t.Fatalf("%+v: Lua n=%d state %+v, Go n=%d state %+v", ev, lv.N, gs, want, ref.state(now))
		}
	}
	report(AdaptEvent{Start: clk.t, Count: 1})
	clk.add(time.Millisecond)
	report(AdaptEvent{Throttled: true, Start: clk.t}) // at G: a deep cut to the floor
	var levels []int64
	for range 12 {
		clk.add(per + time.Millisecond)
		report(AdaptEvent{Start: clk.t.Add(-time.Microsecond), Count: ref.l.N()})
		levels = append(levels, ref.l.N())
	}
	// halving the gap to 60, the edge (2 cycles), the probe at 60, then
	// +60/16 and steps ×4 (3 to 12), capped at 35% (26, 35, 47)
	if want := []int64{35, 47, 53, 56, 58, 59, 59, 60, 63, 75, 101, 136}; !slices.Equal(levels, want) {
		t.Fatalf("levels %v, want %v", levels, want)
	}
}

// TestAdaptReplicasOneCut: three processes report the same overload (each
// a throttle of a call it started before the first report's cut): one
// cut, whatever the order; a throttle of a call started after the cut cuts
// again.
func TestAdaptReplicasOneCut(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s1, rdb := newStore(t, clk, time.Minute)
	s2, _ := New(rdb, s1.prefix, Options{Now: clk.now})
	s3, _ := New(rdb, s1.prefix, Options{Now: clk.now})
	c := Charge{Rule: "r", Key: "k", Spec: spec(Completion, 1, 100*time.Millisecond)}
	b := AdaptBounds{Floor: 10, Ceiling: 1000}
	// climb: report n successes a window until n is 40 or more
	n := int64(10)
	for range 50 {
		clk.add(100 * time.Millisecond)
		var err error
		if n, err = s1.Adapt(ctx, "sc", c, b, AdaptEvent{Start: clk.t.Add(-time.Millisecond), Count: 1}); err != nil {
			t.Fatal(err)
		}
		if n, err = s2.Adapt(ctx, "sc", c, b, AdaptEvent{Start: clk.t.Add(-time.Millisecond), Count: n}); err != nil {
			t.Fatal(err)
		}
		if n >= 40 {
			break
		}
	}
	if n < 40 {
		t.Fatalf("no climb: n=%d", n)
	}
	st0, _ := adaptStateOf(t, s1, rdb, "sc", c)
	calls := []time.Time{clk.t.Add(-30 * time.Millisecond), clk.t.Add(-20 * time.Millisecond), clk.t.Add(-10 * time.Millisecond)}
	clk.add(time.Millisecond)
	var got []int64
	for i, st := range []*Store{s3, s1, s2} {
		clk.add(time.Duration(i) * time.Millisecond)
		m, err := st.Adapt(ctx, "sc", c, b, AdaptEvent{Throttled: true, Start: calls[i]})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m)
	}
	if got[0] >= n || got[1] != got[0] || got[2] != got[0] {
		t.Fatalf("three reports of one overload from n=%d: levels %v, want one cut", n, got)
	}
	st1, _ := adaptStateOf(t, s1, rdb, "sc", c)
	if st1.B != n || st1.cut == st0.cut {
		t.Fatalf("state after the cut %+v (before %+v)", st1, st0)
	}
	// a call admitted after the cut and throttled: a second cut
	clk.add(5 * time.Millisecond)
	after := clk.t
	clk.add(5 * time.Millisecond)
	m, err := s2.Adapt(ctx, "sc", c, b, AdaptEvent{Throttled: true, Start: after})
	if err != nil || m >= got[0] && got[0] > b.Floor {
		t.Fatalf("a throttle after the cut: n=%d (after first cut %d), %v", m, got[0], err)
	}
}

// TestAdaptStoredLimit: a cut is the limit of every process's next
// admission through Admit (adopted from Redis), and a raise as well.
func TestAdaptStoredLimit(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s1, rdb := newStore(t, clk, time.Minute)
	s2, _ := New(rdb, s1.prefix, Options{Now: clk.now, Lease: time.Minute})
	per := 100 * time.Millisecond
	// the other process admits under its own (stale) idea of the limit
	admit := spec(Completion, 50, per)
	c := Charge{Rule: "r", Key: "k", Spec: spec(Completion, 1, per), Weight: 1}
	b := AdaptBounds{Floor: 4, Ceiling: 64}
	n, err := s1.Adapt(ctx, "sc", c, b, AdaptEvent{})
	if err != nil || n != 4 {
		t.Fatalf("new state: n=%d %v, want the floor 4", n, err)
	}
	fill := func(want int64) {
		t.Helper()
		var toks []string
		for i := range want + 1 {
			d, err := s2.Admit(ctx, "sc", []Charge{{Rule: "r", Key: "k", Spec: admit, Weight: 1}})
			if err != nil {
				t.Fatal(err)
			}
			if d.OK != (i < want) {
				t.Fatalf("admission %d under a learned level of %d: %+v", i+1, want, d)
			}
			if d.OK {
				if len(d.Adopted) != 1 || d.AdoptedSpecs[0].Limit.N != want {
					t.Fatalf("admission %d: adopted %v %v, want the learned N %d", i+1, d.Adopted, d.AdoptedSpecs, want)
				}
				toks = append(toks, d.Token)
			}
		}
		for _, tok := range toks {
			if err := s2.Release(ctx, "sc", []Charge{{Rule: "r", Key: "k", Spec: admit, Weight: 1}}, tok); err != nil {
				t.Fatal(err)
			}
		}
		clk.add(per + time.Millisecond) // the ends leave the window
	}
	fill(4)
	// climb: every window n successes started at the level
	for n < 20 {
		clk.add(per)
		if n, err = s1.Adapt(ctx, "sc", c, b, AdaptEvent{Start: clk.t.Add(-per / 2), Count: n}); err != nil {
			t.Fatal(err)
		}
	}
	fill(n)
	start := clk.t
	clk.add(10 * time.Millisecond)
	m, err := s1.Adapt(ctx, "sc", c, b, AdaptEvent{Throttled: true, Start: start})
	if err != nil || m >= n {
		t.Fatalf("throttle at n=%d: n=%d %v", n, m, err)
	}
	fill(m)
}

// TestAdaptStateLoss: FLUSHALL loses the learned level; the next report
// starts again from the floor (the safe side) and stores it for the fleet.
func TestAdaptStateLoss(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s, rdb := newStore(t, clk, time.Minute)
	c := Charge{Rule: "r", Key: "k", Spec: spec(FixedWindow, 1, time.Second)}
	b := AdaptBounds{Floor: 5}
	n := int64(5)
	for range 6 {
		clk.add(time.Second)
		var err error
		if n, err = s.Adapt(ctx, "sc", c, b, AdaptEvent{Start: clk.t.Add(-time.Millisecond), Count: n}); err != nil {
			t.Fatal(err)
		}
	}
	if n <= 5 {
		t.Fatalf("no climb: %d", n)
	}
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	clk.add(time.Second)
	// a success of a call started before the loss proves nothing
	m, err := s.Adapt(ctx, "sc", c, b, AdaptEvent{Start: clk.t.Add(-2 * time.Second), Count: 1000})
	if err != nil || m != 5 {
		t.Fatalf("after FLUSHALL (was %d): n=%d %v, want the floor 5", n, m, err)
	}
	if sp, S := storedSpec(t, s, rdb, "sc", c); sp != "4/5/1000000/0/0" || S != "1" {
		t.Fatalf("stored %q %q after the loss", sp, S)
	}
	// the hash expires with the limiter's keys
	ttl, _ := rdb.PTTL(ctx, s.adaptKey("sc", c)).Result()
	if ttl <= 0 || ttl > 2*time.Second+time.Millisecond {
		t.Fatalf("state's TTL %v", ttl)
	}
}

// TestAdaptHostile: absurd reports never take n outside [floor, ceiling],
// never throw an error from Lua, and the calls refused before a round
// trip leave Redis unchanged.
func TestAdaptHostile(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s, rdb := newStore(t, clk, time.Minute)
	c := Charge{Rule: "r", Key: "k", Spec: spec(Completion, 1, 100*time.Millisecond)}
	b := AdaptBounds{Floor: 2, Ceiling: 30}
	for _, bad := range []struct {
		name string
		c    Charge
		b    AdaptBounds
		ev   AdaptEvent
	}{
		{"negative count", c, b, AdaptEvent{Count: -1}},
		{"floor 0", c, AdaptBounds{}, AdaptEvent{}},
		{"ceiling below floor", c, AdaptBounds{Floor: 5, Ceiling: 4}, AdaptEvent{}},
		{"ceiling above MaxN", c, AdaptBounds{Floor: 5, Ceiling: MaxN + 1}, AdaptEvent{}},
		{"no spec", Charge{Rule: "r", Key: "k"}, b, AdaptEvent{}},
		{"a quota", Charge{Rule: "r", Key: "k", Spec: &Spec{Kind: Quota, Limit: c.Spec.Limit}}, b, AdaptEvent{}},
		{"a GCRA too coarse at the floor", Charge{Rule: "r", Key: "k", Spec: &Spec{Kind: GCRA, Limit: window.Limit{N: 1, Per: MaxPer}, Burst: MaxN}}, AdaptBounds{Floor: 1, Ceiling: MaxN}, AdaptEvent{}},
		{"Per 0", Charge{Rule: "r", Key: "k", Spec: spec(Completion, 1, 0)}, b, AdaptEvent{}},
	} {
		if _, err := s.Adapt(ctx, "sc", bad.c, bad.b, bad.ev); err == nil {
			t.Errorf("%s: no error", bad.name)
		}
	}
	if _, err := s.AdaptAll(ctx, "sc", c, b); err == nil {
		t.Error("no event: no error")
	}
	if _, err := s.AdaptAll(ctx, "sc", c, b, make([]AdaptEvent, MaxAdaptEvents+1)...); err == nil {
		t.Error("too many events: no error")
	}
	if _, err := s.AdaptAll(ctx, "sc", c, b, AdaptEvent{Count: 1}, AdaptEvent{Count: -1}); err == nil {
		t.Error("a negative count in the second event: no error")
	}
	if k, _ := rdb.Keys(ctx, "*").Result(); len(k) != 0 {
		t.Fatalf("refused reports wrote %v", k)
	}
	W := int64(100_000)
	rng := rand.New(rand.NewPCG(7, 21))
	starts := []time.Time{{}, time.UnixMicro(-5), time.UnixMicro(1 << 62), time.Unix(1<<40, 0), clk.t.Add(time.Hour)}
	for i := range 400 {
		clk.add(time.Duration(rng.Int64N(2*W)) * time.Microsecond)
		if i%50 == 0 {
			clk.add(-time.Second) // the clock goes back: the state re-anchors to it
		}
		ev := AdaptEvent{Start: clk.t.Add(-time.Millisecond), Count: 1}
		switch rng.IntN(6) {
		case 0:
			ev.Count = MaxN * 4 // clamped to MaxN
		case 1:
			ev.Count = 1 << 62
		case 2:
			ev = AdaptEvent{Throttled: true, Start: starts[rng.IntN(len(starts))]}
		case 3:
			ev.Start = starts[rng.IntN(len(starts))]
			ev.Latency = time.Duration(1 << 62)
		case 4:
			ev.Latency = -time.Hour
		}
		n, err := s.Adapt(ctx, "sc", c, b, ev)
		if err != nil {
			t.Fatalf("event %d %+v: %v", i, ev, err)
		}
		if n < b.Floor || n > b.Ceiling {
			t.Fatalf("event %d %+v: n=%d outside [%d, %d]", i, ev, n, b.Floor, b.Ceiling)
		}
		gs, _ := adaptStateOf(t, s, rdb, "sc", c)
		if gs.chg > gs.m || gs.cut > gs.m || gs.cst > gs.m || gs.n != n || gs.lat < 0 || gs.lat > int64(MaxPer/time.Microsecond) || gs.cyc > MaxN || gs.cur > MaxN || gs.B < 0 || gs.inc < 1 {
			t.Fatalf("event %d %+v: state %+v", i, ev, gs)
		}
	}
	// a level at the ceiling stays there (a bad level learned above must
	// first be forgotten: edge probes); a lower ceiling takes it down at once
	clk.add(2 * time.Second) // past the state's latest instant
	for range 300 {
		clk.add(200 * time.Millisecond)
		if _, err := s.Adapt(ctx, "sc", c, b, AdaptEvent{Start: clk.t.Add(-time.Millisecond), Count: 100}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.Adapt(ctx, "sc", c, b, AdaptEvent{}); err != nil || n != 30 {
		t.Fatalf("at the ceiling: %d %v", n, err)
	}
	if n, err := s.Adapt(ctx, "sc", c, AdaptBounds{Floor: 2, Ceiling: 12}, AdaptEvent{}); err != nil || n != 12 {
		t.Fatalf("ceiling lowered to 12: %d %v", n, err)
	}
	// cuts at the floor stay at the floor
	for range 10 {
		clk.add(time.Millisecond)
		if n, err := s.Adapt(ctx, "sc", c, AdaptBounds{Floor: 2, Ceiling: 12}, AdaptEvent{Throttled: true, Start: clk.t}); err != nil || n < 2 {
			t.Fatalf("cut to %d %v", n, err)
		}
	}
	if n, _ := s.Adapt(ctx, "sc", c, AdaptBounds{Floor: 2, Ceiling: 12}, AdaptEvent{}); n != 2 {
		t.Fatalf("after 10 cuts: %d, want the floor", n)
	}
	// a limiter that stores a limit of another kind: a mismatch, nothing written
	other := Charge{Rule: "r", Key: "o", Spec: spec(FixedWindow, 5, time.Second), Weight: 1}
	if _, err := s.Admit(ctx, "sc", []Charge{other}); err != nil {
		t.Fatal(err)
	}
	other.Spec = spec(Completion, 5, time.Second)
	if _, err := s.Adapt(ctx, "sc", other, b, AdaptEvent{}); !errors.Is(err, ErrLimitMismatch) {
		t.Fatalf("another kind stored: %v", err)
	}
	if n, _ := rdb.Exists(ctx, s.adaptKey("sc", other)).Result(); n != 0 {
		t.Fatal("a mismatch wrote the state")
	}
}

// TestAdaptLatency: a batch's Latency moves the average as that many
// successes of that duration would (adapt.Law.Success), and proves as the
// batch's Start says.
func TestAdaptLatency(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s, rdb := newStore(t, clk, time.Minute)
	c := Charge{Rule: "r", Key: "k", Spec: spec(SlidingLog, 1, time.Second)}
	b := AdaptBounds{Floor: 3, Ceiling: 100}
	ref := adapt.New(adapt.Params{Floor: 3, Ceiling: 100, W: 1_000_000}, 0)
	for i, ev := range []struct {
		count int64
		lat   time.Duration
	}{{5, 20 * time.Millisecond}, {200, 84 * time.Millisecond}, {1, time.Millisecond}, {3000, 3 * time.Millisecond}, {7, 2 * time.Second}} {
		clk.add(10 * time.Millisecond)
		if _, err := s.Adapt(ctx, "sc", c, b, AdaptEvent{Start: clk.t.Add(-time.Millisecond), Count: ev.count, Latency: ev.lat}); err != nil {
			t.Fatal(err)
		}
		now := clk.t.UnixMicro()
		for range ev.count {
			ref.Success(now-ev.lat.Microseconds(), now)
		}
		if gs, _ := adaptStateOf(t, s, rdb, "sc", c); gs.lat != ref.S.Lat || gs.cur != ref.S.Cur {
			t.Fatalf("batch %d: lat %d cur %d, want %d %d", i, gs.lat, gs.cur, ref.S.Lat, ref.S.Cur)
		}
	}
}

// TestAdaptCluster: on a cluster, Adapt's keys (the limiter's hash, its
// state, the scope's epoch) hash to the scope's slot, for hostile scopes
// too, and the level it stores is the one the next admission adopts.
func TestAdaptCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	rdb := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cl.Addrs()})
	defer rdb.Close()
	s, err := New(rdb, "cl", Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, scope := range []string{"", "{", "}", "{}", "%", "a}b{c", "acct:7"} {
		c := Charge{Rule: "r", Key: "k", Spec: spec(Completion, 1, time.Second)}
		slots := map[int64]bool{}
		for _, k := range []string{s.Keys(scope, c)[0], s.adaptKey(scope, c), s.EpochKey(scope)} {
			slots[rdb.ClusterKeySlot(ctx, k).Val()] = true
		}
		if len(slots) != 1 {
			t.Fatalf("scope %q: keys on slots %v", scope, slots)
		}
		n, err := s.Adapt(ctx, scope, c, AdaptBounds{Floor: 3, Start: 7}, AdaptEvent{Throttled: true, Start: time.Now()})
		if err != nil || n != 3 {
			t.Fatalf("scope %q: a throttle at the start level 7 with no success in the last Per: %d %v, want the floor 3", scope, n, err)
		}
		c.Spec, c.Weight = spec(Completion, 50, time.Second), 1
		d, err := s.Admit(ctx, scope, []Charge{c})
		if err != nil || !d.OK || len(d.AdoptedSpecs) != 1 || d.AdoptedSpecs[0].Limit.N != 3 {
			t.Fatalf("scope %q: admission after the cut: %+v %v", scope, d, err)
		}
	}
}

// TestAdaptClockBack: Redis's clock goes back an hour (a failover to a
// replica whose TIME is behind): the level is still proven and cut on the
// new clock, as adapt.Law does, not frozen for the hour until the clock
// catches up with the instants the state recorded.
func TestAdaptClockBack(t *testing.T) {
	clk := newClock()
	s, rdb := newStore(t, clk, time.Minute)
	ctx := context.Background()
	c := Charge{Rule: "r", Key: "k", Spec: spec(Completion, 10, 100*time.Millisecond), Weight: 1}
	b := AdaptBounds{Floor: 10, Ceiling: 1000}
	var ref lawRef
	W := int64(100_000)
	feed := func(ev AdaptEvent) int64 {
		t.Helper()
		n, err := s.Adapt(ctx, "sc", c, b, ev)
		if err != nil {
			t.Fatal(err)
		}
		if want := ref.apply(clk.t.UnixMicro(), W, b.Floor, b.Ceiling, 0, ev); n != want {
			t.Fatalf("at %v: n = %d, the Go law %d", clk.t, n, want)
		}
		return n
	}
	for range 5 { // climb a little
		clk.add(150 * time.Millisecond)
		feed(AdaptEvent{Start: clk.t.Add(-time.Millisecond), Count: 1000})
	}
	clk.add(-time.Hour)
	n0 := feed(AdaptEvent{Throttled: true, Start: clk.t.Add(-time.Millisecond)})
	if n0 >= ref.l.S.B {
		t.Fatalf("a throttle after the clock went back did not cut: %d (bad level %d)", n0, ref.l.S.B)
	}
	for range 5 {
		clk.add(150 * time.Millisecond)
		feed(AdaptEvent{Start: clk.t.Add(-time.Millisecond), Count: 1000})
	}
	if n := feed(AdaptEvent{}); n <= n0 {
		t.Fatalf("no level proven within 750 ms of the clock going back an hour: %d", n)
	}
	gs, _ := adaptStateOf(t, s, rdb, "sc", c)
	if want := ref.state(clk.t.UnixMicro()); gs != want {
		t.Fatalf("state %+v, the Go law's %+v", gs, want)
	}
}
