package win

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

// TestFixedCompletionReportHonestModel drives a fixed completion window
// against a model of an honest server that counts arrivals in the same
// aligned windows, with traffic from elsewhere, random latencies, replies
// taken in late and in any order (some after the call's end, some in a
// later window, where they are dropped), some read again without their
// mark, and counts with no call at hand (Reconcile). For every window W it checks the
// guarantee the give-back must keep: the server's count of W is at most N
// plus the units from elsewhere the pool could not know of when it last
// admitted a call in W (those that reached the server after the call of
// the highest count the pool had taken in).
func TestFixedCompletionReportHonestModel(t *testing.T) {
	seeds := 400
	if testing.Short() {
		seeds = 50
	}
	for seed := range seeds {
		honestModelRun(t, uint64(seed))
	}
}

type modelCall struct {
	n, win, ended  int64 // weight, admission window and ended units at admission (mark)
	arrive, done   int64 // server arrival, Done
	reply          int64 // when the pool takes the report in
	count, foreign int64 // the server's count replied, and units from elsewhere then
	arrived        bool
	srvWin         int64
}

func honestModelRun(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 7))
	const per = int64(100 * time.Millisecond)
	n := int64(5 + r.IntN(30))
	w := NewFixedCompletion(Limit{N: n, Per: time.Duration(per)})
	base := int64(1_700_000_000) * int64(time.Second) // a multiple of per
	lat := int64(1+r.IntN(60)) * int64(time.Millisecond)
	foreignRate := r.Float64() * 0.3
	admitRate := 0.2 + r.Float64()*0.8

	server := map[int64]int64{}  // window → count
	foreign := map[int64]int64{} // window → units from elsewhere
	lastKnown := map[int64]int64{}
	// The pool's knowledge: in each window, the foreign units at the
	// highest count it took in.
	topCount := map[int64]int64{}
	topForeign := map[int64]int64{}
	var calls, dups []*modelCall
	const steps = 3000
	step := int64(time.Millisecond)
	for i := range int64(steps) {
		now := base + i*step
		win := floorDiv(now, per)
		// Events due now, in random order.
		type ev struct {
			c    *modelCall
			kind int
		}
		var evs []ev
		for _, c := range calls {
			if !c.arrived && c.arrive <= now {
				evs = append(evs, ev{c, 0})
			}
			if c.done == now {
				evs = append(evs, ev{c, 1})
			}
			if c.reply == now {
				evs = append(evs, ev{c, 2})
			}
		}
		r.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
		sort.SliceStable(evs, func(i, j int) bool { return evs[i].kind == 0 && evs[j].kind != 0 }) // arrivals first
		if r.Float64() < foreignRate {
			k := int64(1 + r.IntN(3))
			server[win] += k
			foreign[win] += k
		}
		for _, e := range evs {
			c := e.c
			switch e.kind {
			case 0:
				c.arrived = true
				c.srvWin = win
				server[win] += c.n
				c.count, c.foreign = server[win], foreign[win]
			case 1:
				w.done(now, c.n)
			case 2:
				if !c.arrived {
					t.Fatalf("seed %d: reply before arrival", seed)
				}
				w.roll(now)
				if w.win != c.win { // clientpool drops it
					continue
				}
				w.report(now, c.win, c.count, c.ended, c.n, true)
				if c.srvWin == c.win && c.count > topCount[c.win] {
					topCount[c.win], topForeign[c.win] = c.count, c.foreign
				}
				if r.IntN(4) == 0 {
					dups = append(dups, c)
				}
			}
		}
		// A call's report again (read without its mark), or the server's
		// count now with no call at hand (Reconcile).
		if len(dups) > 0 && r.IntN(20) == 0 {
			c := dups[r.IntN(len(dups))]
			if w.roll(now); w.win == c.win {
				w.report(now, c.win, c.count, 0, 0, false)
			}
		}
		if r.IntN(50) == 0 {
			w.report(now, win, server[win], 0, 0, false)
		}
		if r.Float64() < admitRate {
			k := int64(1 + r.IntN(int(min(n, 6))))
			wv, ended, _, _ := w.mark(now)
			if _, ok := w.admit(now, k); ok {
				c := &modelCall{n: k, win: wv, ended: ended}
				c.arrive = now + r.Int64N(lat+1)
				c.done = c.arrive + r.Int64N(lat+1) + step
				c.reply = c.arrive + r.Int64N(3*lat+1)
				if c.reply <= c.arrive {
					c.reply = c.arrive + step
				}
				c.reply = base + ((c.reply-base+step-1)/step)*step
				c.done = base + ((c.done-base+step-1)/step)*step
				if c.arrive == now {
					c.arrive += step
					c.reply = max(c.reply, c.arrive)
					c.done = max(c.done, c.arrive+step)
				}
				calls = append(calls, c)
				lastKnown[wv] = topForeign[wv]
			}
		}
	}
	lastWin := floorDiv(base+(steps-1)*step, per)
	for win, cnt := range server {
		if win >= lastWin {
			continue
		}
		if bound := n + foreign[win] - lastKnown[win]; cnt > bound {
			t.Fatalf("seed %d: N=%d: the server counted %d in window %d, more than N + %d from elsewhere − %d known at the last admission",
				seed, n, cnt, win-floorDiv(base, per), foreign[win], lastKnown[win])
		}
	}
}

// TestFixedCompletionReportHostile feeds a fixed completion window reports
// of any count (0, beyond N, math.MaxInt64, going up and down), for any
// window, marked or not, with any ended and weight, repeated, between
// admissions, ends, cancels and window rolls, and checks it against a twin
// that takes no reports: the window never counts less than the twin, so it
// never admits a call the twin would refuse.
func TestFixedCompletionReportHostile(t *testing.T) {
	seeds := 2000
	if testing.Short() {
		seeds = 200
	}
	counts := []int64{0, 1, 2, 5, 17, 99, 100, 101, 1 << 40, 1<<63 - 1, -1}
	for seed := range seeds {
		r := rand.New(rand.NewPCG(uint64(seed), 11))
		const per = int64(time.Second)
		n := int64(1 + r.IntN(40))
		l := Limit{N: n, Per: time.Duration(per)}
		w, twin := NewFixedCompletion(l), NewFixedCompletion(l)
		now := int64(1_700_000_000) * per
		type call struct{ n, win, ended, at int64 }
		var flight []call
		pick := func() int64 {
			if r.IntN(3) == 0 {
				return r.Int64N(2*n + 2)
			}
			return counts[r.IntN(len(counts))]
		}
		for range 400 {
			now += r.Int64N(per / 5)
			switch r.IntN(6) {
			case 0, 1:
				k := int64(1 + r.IntN(int(n)))
				win, ended, _, _ := w.mark(now)
				_, ok := w.admit(now, k)
				_, tok := twin.admit(now, k)
				if ok && !tok {
					t.Fatalf("seed %d: admitted %d the twin refused (used %d, twin %d)", seed, k, w.used, twin.used)
				}
				if ok {
					flight = append(flight, call{k, win, ended, now})
				}
				if ok != tok {
					// Keep the twins' own calls alike: undo the twin's.
					if tok {
						twin.cancel(now, k)
					}
				}
			case 2:
				if len(flight) > 0 {
					i := r.IntN(len(flight))
					c := flight[i]
					if r.IntN(4) == 0 {
						w.cancel(c.at, c.n)
						twin.cancel(c.at, c.n)
					} else {
						w.done(now, c.n)
						twin.done(now, c.n)
					}
					flight = append(flight[:i], flight[i+1:]...)
				}
			default:
				win := floorDiv(now, per) - int64(r.IntN(2))
				ended, k := pick(), pick()
				if len(flight) > 0 && r.IntN(2) == 0 {
					c := flight[r.IntN(len(flight))]
					win, ended, k = c.win, c.ended, c.n
				}
				w.report(now, win, pick(), ended, k, r.IntN(4) != 0)
			}
			if w.Used(time.Unix(0, now)) < twin.Used(time.Unix(0, now)) {
				t.Fatalf("seed %d: the window counts %d, less than %d without reports", seed, w.used, twin.used)
			}
		}
	}
}

// SetLimit in a window the counter has not rolled to yet (no call since
// the boundary) counts in the new window what the window current at now
// holds — for a fixed completion window the calls still in flight, for a
// fixed window nothing — not the earlier window's count and reports (the
// Redis script rolls first: the two differed). On the base commit the
// earlier window's 5 ended units stayed counted and a call of 8 of 10 was
// refused until the window after.
func TestFixedSetLimitInAWindowNotRolledTo(t *testing.T) {
	for _, carry := range []bool{false, true} {
		l := Limit{N: 10, Per: time.Second}
		w := NewFixedWindow(l)
		if carry {
			w = NewFixedCompletion(l)
		}
		t0 := time.Unix(1_700_000_000, 0)
		if _, ok := w.Admit(t0, 5); !ok {
			t.Fatal("refused 5")
		}
		w.Done(t0, 5)
		if _, ok := w.Admit(t0, 2); !ok { // in flight across the boundary
			t.Fatal("refused 2")
		}
		now := t0.Add(1500 * time.Millisecond)
		w.SetLimit(now, Limit{N: 10, Per: time.Second})
		want := int64(0)
		if carry {
			want = 2
		}
		if got := w.Used(now); got != want {
			t.Fatalf("carry %v: Used = %d after SetLimit in the next window, want %d", carry, got, want)
		}
		if _, ok := w.Admit(now, 10-want); !ok {
			t.Fatalf("carry %v: refused %d of 10 with %d counted", carry, 10-want, want)
		}
	}
}
