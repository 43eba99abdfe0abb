package rstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/window"
)

// scriptHook records the scripts of each pipeline a client sends: per
// script, whether it is the batch script and its KEYS.
type scriptHook struct {
	mu    sync.Mutex
	trips [][]sent
}

type sent struct {
	batch bool
	keys  []string
}

func (h *scriptHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *scriptHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.record([]goredis.Cmder{cmd})
		return next(ctx, cmd)
	}
}
func (h *scriptHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.record(cmds)
		return next(ctx, cmds)
	}
}

func (h *scriptHook) record(cmds []goredis.Cmder) {
	var t []sent
	for _, c := range cmds {
		a := c.Args()
		if len(a) < 3 {
			continue
		}
		name := strings.ToLower(fmt.Sprint(a[0]))
		if name != "evalsha" && name != "eval" {
			continue
		}
		n, _ := a[2].(int)
		var keys []string
		for _, k := range a[3 : 3+n] {
			keys = append(keys, fmt.Sprint(k))
		}
		body := fmt.Sprint(a[1])
		t = append(t, sent{batch: body == batchScript.Hash() || body == batchSource, keys: keys})
	}
	h.mu.Lock()
	h.trips = append(h.trips, t)
	h.mu.Unlock()
}

func (h *scriptHook) reset() []([]sent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.trips
	h.trips = nil
	return t
}

// tagOf returns the hash tag of a key ("{...}").
func tagOf(k string) string {
	i := strings.IndexByte(k, '{')
	j := strings.IndexByte(k, '}')
	if i < 0 || j < i {
		return k
	}
	return k[i : j+1]
}

func batchOne(sp *Spec, key string, w int64) []Charge {
	return []Charge{{Rule: "r", Key: key, Spec: sp, Weight: w}}
}

// In one batch script, admissions keep their queue order per limiter: a
// heavy admission refused blocks a lighter later one on the same limiter
// (which would fit), not one on another limiter; a call naming the
// blocked limiter and another is refused whole (neither charged), and
// blocks the calls behind it on the other (b) in turn. Sent as
// a pipeline of scripts, the lighter one is admitted ahead of its turn.
func TestBatchStrictFIFOPerLimiter(t *testing.T) {
	for _, batch := range []bool{true, false} {
		t.Run(fmt.Sprint("batch=", batch), func(t *testing.T) {
			clk := newClock()
			s, c := newStore(t, clk, time.Minute)
			s.noBatch = !batch
			h := &scriptHook{}
			c.AddHook(h)
			ctx := context.Background()
			comp := spec(Completion, 4, time.Second)
			if d, err := s.Admit(ctx, "sc", batchOne(comp, "a", 2)); err != nil || !d.OK {
				t.Fatal(d, err)
			}
			h.reset()
			calls := [][]Charge{
				batchOne(comp, "a", 3), // refused: 2 left
				batchOne(comp, "a", 1), // fits, but behind the refused one
				batchOne(comp, "b", 1), // another limiter: admitted
				append(batchOne(comp, "b", 1), batchOne(comp, "a", 1)...), // names a: refused whole
				batchOne(comp, "b", 1), // behind the refused one on b: refused
				batchOne(comp, "c", 1), // admitted
			}
			ds, errs, err := s.AdmitAll(ctx, "sc", calls)
			if err != nil {
				t.Fatal(err)
			}
			for i, e := range errs {
				if e != nil {
					t.Fatalf("call %d: %v", i, e)
				}
			}
			trips := h.reset()
			if len(trips) != 1 {
				t.Fatalf("%d round trips, want 1", len(trips))
			}
			if !batch {
				if !ds[1].OK {
					t.Fatalf("pipeline: the light call was refused: %+v", ds[1])
				}
				return
			}
			if len(trips[0]) != 1 || !trips[0][0].batch {
				t.Fatalf("scripts sent: %+v, want one batch script", trips[0])
			}
			want := []bool{false, false, true, false, false, true}
			for i, d := range ds {
				if d.OK != want[i] {
					t.Fatalf("call %d: ok %v, want %v (%+v)", i, d.OK, want[i], d)
				}
			}
			if ds[1].Wait < ds[0].Wait || ds[1].Refused != 0 || ds[3].Refused != 1 {
				t.Fatalf("blocked calls: %+v %+v; want the wait of the one ahead and the blocked charge", ds[1], ds[3])
			}
			if !ds[0].Release || !ds[1].Release {
				t.Fatalf("only a release helps the refused call and the one behind it: %+v %+v", ds[0], ds[1])
			}
			// Nothing of the refused calls was charged: a has 2 left, b 3.
			if d, _ := s.Admit(ctx, "sc", batchOne(comp, "a", 2)); !d.OK {
				t.Fatalf("a after the batch: %+v, want room for 2", d)
			}
			if d, _ := s.Admit(ctx, "sc", batchOne(comp, "b", 3)); !d.OK {
				t.Fatalf("b after the batch: %+v, want room for 3", d)
			}
			if d, _ := s.Admit(ctx, "sc", batchOne(comp, "b", 1)); d.OK {
				t.Fatalf("b admitted a fifth unit: %+v", d)
			}
		})
	}
}

// A batch runs its ends before its admissions: a release that frees the
// only slot of a concurrency cap lets an admission of the same script
// through; a settlement's refund is there for the admissions too.
func TestBatchEndsBeforeAdmissions(t *testing.T) {
	clk := newClock()
	s, c := newStore(t, clk, time.Minute)
	h := &scriptHook{}
	c.AddHook(h)
	ctx := context.Background()
	capped := &Spec{Kind: FixedWindow, Limit: window.Limit{N: 100, Per: time.Second}, Concurrency: 1}
	fw := spec(FixedWindow, 10, time.Second)
	a, err := s.Admit(ctx, "sc", batchOne(capped, "a", 1))
	if err != nil || !a.OK {
		t.Fatal(a, err)
	}
	b, err := s.Admit(ctx, "sc", batchOne(fw, "b", 10))
	if err != nil || !b.OK {
		t.Fatal(b, err)
	}
	h.reset()
	ends := []End{
		{Scope: "sc", Charges: batchOne(capped, "a", 1), Token: a.Token},
		{Scope: "sc", Charges: batchOne(fw, "b", 10), Token: b.Token, Actual: []int64{6}}, // a refund of 4
	}
	eerrs, ds, errs, err := s.Pipe(ctx, ends, "sc", [][]Charge{batchOne(capped, "a", 1), batchOne(fw, "b", 4), batchOne(fw, "b", 1)}, nil)
	if err != nil || eerrs[0] != nil || eerrs[1] != nil || errs[0] != nil || errs[1] != nil {
		t.Fatal(eerrs, errs, err)
	}
	if !ds[0].OK || !ds[1].OK || ds[2].OK {
		t.Fatalf("after the ends: %+v; want the first two admitted, the third refused", ds)
	}
	trips := h.reset()
	if len(trips) != 1 || len(trips[0]) != 1 || !trips[0][0].batch {
		t.Fatalf("sent %+v, want one batch script in one round trip", trips)
	}
	// Ending again in a batch: the lease is gone (ErrNotInFlight), alone.
	eerrs, _, _, err = s.Pipe(ctx, ends[:1], "sc", [][]Charge{batchOne(fw, "c", 1)}, nil)
	if err != nil || !isNotInFlight(eerrs[0]) {
		t.Fatalf("a second end in a batch: %v %v", eerrs, err)
	}
}

func isNotInFlight(err error) bool {
	return err != nil && strings.Contains(err.Error(), ErrNotInFlight.Error())
}

// A batch script carries one scope: the ends of another scope go as
// scripts of their own (another hash tag, maybe another Cluster slot), in
// the same round trip; every batch script's keys share one hash tag.
func TestBatchNeverMixesScopes(t *testing.T) {
	s, c := newStore(t, nil, time.Minute)
	h := &scriptHook{}
	c.AddHook(h)
	ctx := context.Background()
	comp := spec(Completion, 100, time.Second)
	// warm up: the release script loaded
	if d, err := s.Admit(ctx, "w", batchOne(comp, "k", 1)); err != nil || s.Release(ctx, "w", batchOne(comp, "k", 1), d.Token) != nil {
		t.Fatal(d, err)
	}
	var ends []End
	for _, sc := range []string{"x", "y", "y", "sc"} {
		d, err := s.Admit(ctx, sc, batchOne(comp, "k", 1))
		if err != nil || !d.OK {
			t.Fatal(d, err)
		}
		ends = append(ends, End{Scope: sc, Charges: batchOne(comp, "k", 1), Token: d.Token})
	}
	h.reset()
	eerrs, ds, errs, err := s.Pipe(ctx, ends, "sc", [][]Charge{batchOne(comp, "k", 1), batchOne(comp, "j", 1)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range eerrs {
		if eerrs[i] != nil {
			t.Fatalf("end %d: %v", i, eerrs[i])
		}
	}
	if errs[0] != nil || errs[1] != nil || !ds[0].OK || !ds[1].OK {
		t.Fatalf("%+v %v", ds, errs)
	}
	// One TIME for a batch: its admissions decide at the same instant.
	if !ds[0].Now.Equal(ds[1].Now) {
		t.Fatalf("the admissions of one batch decided at %v and %v", ds[0].Now, ds[1].Now)
	}
	trips := h.reset()
	if len(trips) != 1 {
		t.Fatalf("%d round trips, want 1", len(trips))
	}
	var batches, singles int
	for _, sc := range trips[0] {
		tag := tagOf(sc.keys[0])
		for _, k := range sc.keys {
			if tagOf(k) != tag {
				t.Fatalf("one script with keys of two hash tags: %v", sc.keys)
			}
		}
		if sc.batch {
			batches++
		} else {
			singles++
		}
	}
	// x alone: a release script; y's two ends: a batch; sc's end and two
	// admissions: a batch.
	if batches != 2 || singles != 1 {
		t.Fatalf("%d batch scripts and %d single scripts, want 2 and 1: %+v", batches, singles, trips[0])
	}
}

// An error raised by one script of a batch (a key of the wrong type) fails
// that call alone, as in a pipeline: the others are decided.
func TestBatchErrorFailsOneCall(t *testing.T) {
	clk := newClock()
	s, c := newStore(t, clk, time.Minute)
	ctx := context.Background()
	comp := spec(Completion, 10, time.Second)
	bad := batchOne(comp, "bad", 1)
	if err := c.Set(ctx, s.Keys("sc", bad[0])[0], "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	h := &scriptHook{}
	c.AddHook(h)
	ds, errs, err := s.AdmitAll(ctx, "sc", [][]Charge{batchOne(comp, "a", 1), bad, batchOne(comp, "a", 1)})
	if err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || errs[2] != nil || !ds[0].OK || !ds[2].OK {
		t.Fatalf("the good calls: %+v %v", ds, errs)
	}
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "WRONGTYPE") {
		t.Fatalf("the call on a key of the wrong type: %v, want WRONGTYPE", errs[1])
	}
	if trips := h.reset(); len(trips) != 1 || len(trips[0]) != 1 || !trips[0][0].batch {
		t.Fatalf("sent %+v, want one batch script", trips)
	}
}
