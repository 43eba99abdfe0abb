package rstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestAdaptDifferentialBig: reports at random instants (proofs, throttles
// of the good level within a window of successes: deep cuts that read the
// successes of the last Per, weighted) at levels between 2^33 and 2^40,
// where a·(W+Lat) and prev·(W−elapsed) pass 2^53: the Lua law and the Go
// reference stay equal field for field.
func TestAdaptDifferentialBig(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s, rdb := newStore(t, clk, time.Minute)
	for _, per := range []time.Duration{time.Second, 10 * time.Minute} {
		W := per.Microseconds()
		for seed := range uint64(6) {
			rng := rand.New(rand.NewPCG(seed, 53))
			fl := int64(1) << (33 + seed%3)
			c := Charge{Rule: "adapt", Key: fmt.Sprint("big", seed, per), Spec: spec(Completion, 1, per)}
			b := AdaptBounds{Floor: fl, Start: fl << 4}
			var ref lawRef
			var lat int64 = 1 + rng.Int64N(5000)
			for step := range 300 {
				clk.add(time.Duration(1+rng.Int64N(W/3)) * time.Microsecond)
				now := clk.t.UnixMicro()
				var ev AdaptEvent
				var want int64
				if rng.IntN(4) == 0 {
					ev = AdaptEvent{Throttled: true, Start: time.UnixMicro(now - 1)}
					want = ref.apply(now, W, fl, MaxN, b.Start, ev)
				} else {
					cnt := 1 + rng.Int64N(max(ref.l.N(), 2))
					if !ref.valid {
						cnt = 1
					}
					ev = AdaptEvent{Start: time.UnixMicro(now - lat), Count: cnt, Latency: time.Duration(lat) * time.Microsecond}
					if !ref.valid {
						want = ref.apply(now, W, fl, MaxN, b.Start, ev)
					} else {
						want = ref.bulk(t, now, W, fl, MaxN, b.Start, now-lat, cnt)
					}
				}
				lv, err := s.AdaptAll(ctx, "big", c, b, ev)
				if err != nil {
					t.Fatal(err)
				}
				gs, ok := adaptStateOf(t, s, rdb, "big", c)
				// the Lua law's counts stop at MaxN (above any level,
				// so the proof and the cut read them alike)
				gw := ref.state(now)
				gw.cur, gw.prev, gw.cyc = min(gw.cur, MaxN), min(gw.prev, MaxN), min(gw.cyc, MaxN)
				if lv.N != want || !ok || gs != gw {
					t.Fatalf("per %v seed %d step %d %+v: Lua n=%d state %+v, Go n=%d state %+v", per, seed, step, ev, lv.N, gs, want, gw)
				}
			}
		}
	}
}

// TestAdaptDeepCutRounding: a deep cut whose slots term binds at a level
// near 2^40, where a·(W+Lat) passes 2^53 (865888301092 successes of 641 µs
// in a window of 1 s: 866443335492.6… slots, rounded up to …493 by
// a/W·(W+Lat) in doubles): the Lua law cuts to the unit of the Go law's.
func TestAdaptDeepCutRounding(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s, rdb := newStore(t, clk, time.Minute)
	const per = time.Second
	W := per.Microseconds()
	const a, lat = 865888301092, 641
	c := Charge{Rule: "adapt", Key: "round", Spec: spec(Completion, 1, per)}
	b := AdaptBounds{Floor: 1, Start: MaxN}
	var ref lawRef
	step := func(what string, ev AdaptEvent, want int64) {
		t.Helper()
		now := clk.t.UnixMicro()
		lv, err := s.AdaptAll(ctx, "round", c, b, ev)
		if err != nil {
			t.Fatal(err)
		}
		gs, ok := adaptStateOf(t, s, rdb, "round", c)
		if lv.N != want || !ok || gs != ref.state(now) {
			t.Fatalf("%s: Lua n=%d state %+v, Go n=%d state %+v", what, lv.N, gs, want, ref.state(now))
		}
	}
	step("made", AdaptEvent{}, ref.apply(clk.t.UnixMicro(), W, 1, MaxN, MaxN, AdaptEvent{}))
	clk.add(3 * per)
	now := clk.t.UnixMicro()
	step("successes", AdaptEvent{Start: time.UnixMicro(now - lat), Count: a, Latency: lat * time.Microsecond},
		ref.bulk(t, now, W, 1, MaxN, MaxN, now-lat, a))
	ev := AdaptEvent{Throttled: true, Start: clk.t}
	step("deep cut", ev, ref.apply(now, W, 1, MaxN, MaxN, ev))
}
