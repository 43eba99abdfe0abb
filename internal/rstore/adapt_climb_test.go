package rstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// bulk feeds cnt successes of calls started at st, reported at now, to
// the reference as one SuccessUnits: the same state as cnt Success calls
// one by one (as apply feeds them) when st < now (the calls after the one
// that proves the level do not count toward the next) and the latency
// average does not move (0 before, or already now−st): so that levels near
// MaxN can be proven without 2^40 calls of Success.
func (r *lawRef) bulk(t *testing.T, now, W, fl, ce, start, st, cnt int64) int64 {
	t.Helper()
	if !r.valid {
		r.apply(now, W, fl, ce, start, AdaptEvent{}) // made, with its tick
	}
	if st >= now || (r.l.S.Lat != 0 && r.l.S.Lat != now-st) {
		t.Fatalf("bulk: st %d now %d lat %d: not one by one", st, now, r.l.S.Lat)
	}
	r.l.SuccessUnits(st, now, cnt)
	return r.l.N()
}

// TestAdaptDifferentialClimbExtremes: the climb after a forgotten bad
// level (steps ×4), with levels near 1 and near MaxN (2^40, where the
// Lua law's doubles and the ×4 step are at their largest), Floor ==
// Ceiling, and throttles during the climb: the Lua law and the Go
// reference stay equal field for field after every report, and the level
// never leaves [Floor, Ceiling].
func TestAdaptDifferentialClimbExtremes(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s, rdb := newStore(t, clk, time.Minute)
	const per = time.Second
	W := per.Microseconds()
	const lat = 1000 // µs: every call's latency
	type cfg struct{ fl, ce, start int64 }
	cfgs := []cfg{
		{1, 0, 1}, {1, 1, 1}, {1, 3, 2}, {7, 7, 7},
		{MaxN - 1<<36, 0, 0}, {MaxN, 0, 0}, {1 << 34, 0, 1 << 36}, {1, 0, MaxN - 5}, {MaxN - 1, MaxN - 1, 0},
	}
	for ci, cf := range cfgs {
		rng := rand.New(rand.NewPCG(uint64(ci), 40))
		c := Charge{Rule: "adapt", Key: fmt.Sprint("x", ci), Spec: spec(Completion, 1, per)}
		b := AdaptBounds{Floor: cf.fl, Ceiling: cf.ce, Start: cf.start}
		ce := cf.ce
		if ce == 0 {
			ce = MaxN
		}
		var ref lawRef
		check := func(step int, what string, lvN, want int64) {
			t.Helper()
			now := clk.t.UnixMicro()
			gs, ok := adaptStateOf(t, s, rdb, "x", c)
			if lvN != want || !ok || gs != ref.state(now) {
				t.Fatalf("cfg %+v step %d %s: Lua n=%d state %+v, Go n=%d state %+v", cf, step, what, lvN, gs, want, ref.state(now))
			}
			if want < cf.fl || want > ce {
				t.Fatalf("cfg %+v step %d: level %d outside [%d, %d]", cf, step, want, cf.fl, ce)
			}
		}
		// made: a tick alone
		lv, err := s.AdaptAll(ctx, "x", c, b, AdaptEvent{})
		if err != nil {
			t.Fatal(err)
		}
		check(-1, "made", lv.N, ref.apply(clk.t.UnixMicro(), W, cf.fl, ce, cf.start, AdaptEvent{}))
		forgot := 0
		for step := range 80 {
			clk.add(per + 2*lat*time.Microsecond)
			now := clk.t.UnixMicro()
			if rng.IntN(8) == 0 || step == 0 {
				// a throttle of a call started after the latest cut:
				// the probe above G fails, or G itself (a deep cut)
				ev := AdaptEvent{Throttled: true, Start: time.UnixMicro(now - lat)}
				want := ref.apply(now, W, cf.fl, ce, cf.start, ev)
				lv, err := s.AdaptAll(ctx, "x", c, b, ev)
				if err != nil {
					t.Fatal(err)
				}
				check(step, "throttle", lv.N, want)
				continue
			}
			// a clean cycle: as many successes as the level, all in one
			// report, of calls started a latency ago (after the change)
			n := ref.l.N()
			hadB := ref.l.S.B > 0 && n >= ref.l.S.B
			want := ref.bulk(t, now, W, cf.fl, ce, cf.start, now-lat, n)
			lv, err := s.AdaptAll(ctx, "x", c, b, AdaptEvent{Start: time.UnixMicro(now - lat), Count: n, Latency: lat * time.Microsecond})
			if err != nil {
				t.Fatal(err)
			}
			check(step, fmt.Sprint("proof at ", n), lv.N, want)
			if hadB && ref.l.S.B == 0 {
				forgot++
			}
		}
		t.Logf("cfg %+v: %d bad levels forgotten, level %d at the end", cf, forgot, ref.l.N())
		if forgot == 0 {
			t.Fatalf("cfg %+v: no bad level forgotten: the fast climb not reached", cf)
		}
	}
}
