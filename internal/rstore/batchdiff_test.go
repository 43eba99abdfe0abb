package rstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// TestBatchDiff: a batch script (ends, then admissions) decides as the
// single scripts run one by one at the same instant, with strict FIFO per
// limiter applied: an admission that names a limiter an earlier admission
// of the batch was refused on is refused, changing nothing. Random
// batches over every kind of window (several charges per call, weights,
// concurrency caps, releases, settlements, cancels of nothing), on one
// virtual clock; the two stores must agree on every decision, wait and
// end.
func TestBatchDiff(t *testing.T) {
	srv := redistest.Start(t)
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { batchDiff(t, srv.Addr(), seed) })
	}
}

type limDef struct {
	rule, key string
	sp        *Spec
}

func batchDiff(t *testing.T, addr string, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	clk := newClock()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	mk := func(p string, batch bool) *Store {
		s, err := New(c, fmt.Sprintf("bd%d%s", seed, p), Options{Lease: 3 * time.Second, Now: clk.now})
		if err != nil {
			t.Fatal(err)
		}
		s.noBatch = !batch
		return s
	}
	sa, sb := mk("a", true), mk("b", false)
	lim := func(k Kind, n int64, per time.Duration) *Spec {
		return &Spec{Kind: k, Limit: window.Limit{N: n, Per: per}}
	}
	tb := lim(TokenBucket, 4, time.Second)
	tb.Burst = 5
	gc := lim(GCRA, 5, time.Second)
	gc.Burst = 4
	sl := lim(SlidingLog, 5, time.Second)
	sl.Margin = 50 * time.Millisecond
	sub := lim(SubWindowCounter, 6, time.Second)
	sub.Blocks = 4
	capped := lim(FixedWindow, 50, time.Second)
	capped.Concurrency = 4
	ccap := lim(Completion, 8, time.Second)
	ccap.Concurrency = 3
	lims := []limDef{
		{"c", "1", lim(Completion, 5, time.Second)},
		{"c", "2", ccap},
		{"fc", "1", lim(FixedCompletion, 6, time.Second)},
		{"sl", "1", sl},
		{"fw", "1", lim(FixedWindow, 6, 700*time.Millisecond)},
		{"sw", "1", lim(SlidingWindowCounter, 6, time.Second)},
		{"sub", "1", sub},
		{"tb", "1", tb},
		{"gc", "1", gc},
		{"cap", "1", capped},
	}
	for i := range lims {
		if err := lims[i].sp.Check(); err != nil {
			t.Fatal(lims[i].rule, err)
		}
	}
	type flying struct {
		cs     []Charge
		ta, tb string
	}
	var fl []flying
	var nOK, nNo, nBlocked int
	defer func() { t.Logf("%d admitted, %d refused, %d refused behind another", nOK, nNo, nBlocked) }()
	ctx := context.Background()
	for round := range 300 {
		clk.add(time.Duration(rng.IntN(250)) * time.Millisecond)
		// ends
		var ea, eb []End
		for range rng.IntN(4) {
			if len(fl) == 0 {
				break
			}
			j := rng.IntN(len(fl))
			f := fl[j]
			fl = append(fl[:j], fl[j+1:]...)
			var act []int64
			if rng.IntN(3) == 0 {
				act = make([]int64, len(f.cs))
				for i := range act {
					act[i] = int64(rng.IntN(3))
				}
			}
			ea = append(ea, End{Scope: "sc", Charges: f.cs, Token: f.ta, Actual: act})
			eb = append(eb, End{Scope: "sc", Charges: f.cs, Token: f.tb, Actual: act})
		}
		// admissions
		calls := make([][]Charge, 1+rng.IntN(6))
		for i := range calls {
			perm := rng.Perm(len(lims))[:1+rng.IntN(3)]
			for _, p := range perm {
				l := lims[p]
				calls[i] = append(calls[i], Charge{Rule: l.rule, Key: l.key, Spec: l.sp, Weight: int64(1 + rng.IntN(3))})
			}
		}
		eea, das, erra, err := sa.Pipe(ctx, ea, "sc", calls, nil)
		if err != nil {
			t.Fatal(err)
		}
		eeb, _, _, err := sb.Pipe(ctx, eb, "sc", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range eea {
			if (eea[i] == nil) != (eeb[i] == nil) || errors.Is(eea[i], ErrNotInFlight) != errors.Is(eeb[i], ErrNotInFlight) {
				t.Fatalf("round %d end %d: batch %v, single %v", round, i, eea[i], eeb[i])
			}
		}
		blocked := map[string]bool{}
		for i, cs := range calls {
			if erra[i] != nil {
				t.Fatalf("round %d call %d: %v", round, i, erra[i])
			}
			da := das[i]
			bl := false
			for _, ch := range cs {
				bl = bl || blocked[ch.Rule+":"+ch.Key]
			}
			if bl {
				nBlocked++
				if da.OK {
					t.Fatalf("round %d call %d: admitted behind a refused call on one of its limiters", round, i)
				}
			} else {
				db, err := sb.Admit(ctx, "sc", cs)
				if err != nil {
					t.Fatal(err)
				}
				if da.OK != db.OK || da.Wait != db.Wait || da.Refused != db.Refused || da.Release != db.Release || da.Leased != db.Leased || da.Lost != db.Lost || !da.Now.Equal(db.Now) {
					t.Fatalf("round %d call %d %v: batch %+v, single %+v", round, i, cs, da, db)
				}
				if da.OK {
					nOK++
					if da.Leased {
						fl = append(fl, flying{cs, da.Token, db.Token})
					}
					continue
				}
				nNo++
			}
			for _, ch := range cs {
				blocked[ch.Rule+":"+ch.Key] = true
			}
		}
	}
}
