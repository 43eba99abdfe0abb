package rstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratesem/ratesem/window"
)

// TestDifferentialSettle: TestDifferential with half the releases settled
// to a random actual weight (refunds and debits of 0 to 7 units against
// estimates of 0 to 3): Redis decides every later admission exactly as
// the in-process window told window.Settler.Settle (admitted or not, the
// wait to the µs, "only an end can help").
func TestDifferentialSettle(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) { runDifferential(t, k.spec, k.make, time.Hour, true) })
	}
}

// TestDifferentialSettleLeases: as TestDifferentialSettle with a lease of
// 40 ms and calls abandoned: a Settle after the lease ran out fails with
// ErrNotInFlight for the completion windows, whose call already ended at
// its lease's end with its estimate, and applies only the debit there
// (the twin: Settle(now, at, 0, debit)).
func TestDifferentialSettleLeases(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) { runDifferential(t, k.spec, k.make, 40*time.Millisecond, true) })
	}
}

// settleEvent is one step of a settled schedule, in the order Redis saw
// it: an admission (est units at at) or a settlement (the debit counted at
// at; the refund moves the call's start part to its settled weight).
type settleEvent struct {
	admit bool
	at    int64 // µs
	call  int   // index into the calls
}

type settleCall struct {
	at      int64 // admission instant, µs
	n       int64 // estimate
	actual  int64 // settled weight; n while unsettled
	settled bool
}

// TestSettleInvariant is the property test: random estimates (0 to 4
// units) and actual weights (0 to 9) on virtual time, decided by Redis,
// then replayed against the server each window promises to be safe for,
// counting every call at its SETTLED weight: the part up to the estimate at
// the admission (a refund is as if the call had cost less at its start),
// the debit at the settlement. At every admission of a positive weight
// (a weight of 0 fits even a window a debit made overfull):
//   - sliding log (margin 0): the settled units in (t − Per, t] ≤ N;
//   - fixed window: the settled units in t's window ≤ N;
//   - token bucket: a server bucket (same refill, same burst) charged the
//     settled weights still holds at least the estimate;
//   - GCRA: a server GCRA charged the settled weights admits the estimate.
func TestSettleInvariant(t *testing.T) {
	per := int64(100_000)
	specs := []Spec{
		{Kind: SlidingLog, Limit: window.Limit{N: 5, Per: 100 * time.Millisecond}},
		{Kind: FixedWindow, Limit: window.Limit{N: 5, Per: 100 * time.Millisecond}},
		{Kind: TokenBucket, Limit: window.Limit{N: 5, Per: 100 * time.Millisecond}, Burst: 4},
		{Kind: GCRA, Limit: window.Limit{N: 5, Per: 100 * time.Millisecond}, Burst: 4},
	}
	ctx := context.Background()
	for _, sp := range specs {
		t.Run(sp.Kind.String(), func(t *testing.T) {
			clk := newClock()
			s, _ := newStore(t, clk, time.Hour)
			for seed := range uint64(4) {
				rng := rand.New(rand.NewPCG(seed, 12))
				key := fmt.Sprint("k", seed)
				var calls []settleCall
				var ev []settleEvent
				var live []int
				toks := map[int]string{}
				debits := 0
				for range 500 {
					switch op := rng.IntN(10); {
					case op < 5:
						n := rng.Int64N(5)
						c := []Charge{{Rule: "r", Key: key, Spec: &sp, Weight: n}}
						d, err := s.Admit(ctx, "inv", c)
						if err != nil {
							t.Fatal(err)
						}
						if d.OK {
							calls = append(calls, settleCall{at: clk.t.UnixMicro(), n: n, actual: n})
							i := len(calls) - 1
							toks[i] = d.Token
							live = append(live, i)
							ev = append(ev, settleEvent{admit: true, at: clk.t.UnixMicro(), call: i})
						}
					case op < 8 && len(live) > 0:
						j := rng.IntN(len(live))
						i := live[j]
						live = append(live[:j], live[j+1:]...)
						a := rng.Int64N(10)
						c := []Charge{{Rule: "r", Key: key, Spec: &sp, Weight: calls[i].n}}
						if err := s.Settle(ctx, "inv", c, toks[i], []int64{a}); err != nil {
							t.Fatal(err)
						}
						calls[i].actual, calls[i].settled = a, true
						if a > calls[i].n {
							debits++
						}
						ev = append(ev, settleEvent{at: clk.t.UnixMicro(), call: i})
					default:
						clk.add(time.Duration(rng.Int64N(40_000)) * time.Microsecond)
					}
				}
				if debits == 0 || len(calls) < 50 {
					t.Fatalf("seed %d: a weak schedule: %d calls, %d debits", seed, len(calls), debits)
				}
				checkSettled(t, sp, per, calls, ev)
			}
		})
	}
}

// checkSettled replays ev against the server model of sp (see
// TestSettleInvariant).
func checkSettled(t *testing.T, sp Spec, per int64, calls []settleCall, ev []settleEvent) {
	t.Helper()
	N, B := sp.Limit.N, sp.Burst
	start := func(c settleCall) int64 { return min(c.n, c.actual) }
	debit := func(c settleCall) int64 { return max(c.actual-c.n, 0) }
	switch sp.Kind {
	case SlidingLog, FixedWindow:
		for k, e := range ev {
			if !e.admit || calls[e.call].n == 0 { // a weight of 0 fits even an overfull window
				continue
			}
			lo := e.at - per + 1
			if sp.Kind == FixedWindow {
				lo = e.at / per * per
			}
			var sum int64
			for _, f := range ev[:k+1] {
				if f.at < lo {
					continue
				}
				if f.admit {
					sum += start(calls[f.call])
				} else {
					sum += debit(calls[f.call])
				}
			}
			if sum > N {
				t.Fatalf("%s: %d settled units in the window of the admission at %d µs, limit %d", sp.Kind, sum, e.at, N)
			}
		}
	case TokenBucket:
		var tokens, frac, last int64
		first := true
		for _, e := range ev {
			if first {
				tokens, last, first = B, e.at, false
			}
			if el := e.at - last; el > 0 {
				last = e.at
				x := el*N + frac
				tokens, frac = tokens+x/per, x%per
				if tokens >= B {
					tokens, frac = B, 0
				}
			}
			c := calls[e.call]
			if e.admit {
				if c.n > 0 && tokens < c.n {
					t.Fatalf("token bucket: the server holds %d tokens at the admission of %d at %d µs", tokens, c.n, e.at)
				}
				tokens -= start(c)
			} else {
				tokens -= debit(c)
			}
		}
	case GCRA:
		em := (per + N - 1) / N
		var tat int64
		first := true
		for _, e := range ev {
			if first {
				tat, first = e.at, false
			}
			c := calls[e.call]
			if e.admit {
				if c.n > 0 && tat-e.at > (B-c.n)*em {
					t.Fatalf("gcra: the server's TAT is %d µs ahead at the admission of %d at %d µs", tat-e.at, c.n, e.at)
				}
				tat = max(tat, e.at) + start(c)*em
			} else if d := debit(c); d > 0 {
				tat = max(tat, e.at) + d*em
			}
		}
	}
}
