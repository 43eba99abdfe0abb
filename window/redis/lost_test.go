package redis

import (
	"errors"
	"testing"
	"time"
)

// TestLostStateIsDetected: whatever part of a window's state Redis loses
// (a sorted set, the hash, all of it: eviction, DEL, FLUSHALL, a restart),
// the next admission detects it, refuses with StateLost and a wait of one
// Per (never 0: on the old code a lost sorted set beside its hash gave
// refusals with no wait, and a caller asking again at once span), every
// admission until then is refused too, and the calls in flight still in
// the keys that are left still count afterwards.
func TestLostStateIsDetected(t *testing.T) {
	addr := sharedAddr(t)
	c := newClient(t, addr)
	ctx := ctxT(t)
	per := time.Second
	for _, tc := range []struct {
		name     string
		kind     kind
		lose     func(w *Window) []string // keys to delete
		inLeft   bool                     // the calls in flight are still known
		relFirst bool                     // a Release comes before the next admission
	}{
		{"completion/zset, then a release", kindCompletion, func(w *Window) []string { return w.keys[:1] }, true, true},
		{"completion/zset", kindCompletion, func(w *Window) []string { return w.keys[:1] }, true, false},
		{"completion/leases", kindCompletion, func(w *Window) []string { return w.keys[1:2] }, true, false},
		{"completion/hash", kindCompletion, func(w *Window) []string { return w.keys[2:] }, true, false},
		{"completion/all", kindCompletion, func(w *Window) []string { return w.keys }, false, false},
		{"log/zset", kindSlidingLog, func(w *Window) []string { return w.keys[:1] }, false, false},
		{"log/hash", kindSlidingLog, func(w *Window) []string { return w.keys[1:] }, true, false},
		{"log/all", kindSlidingLog, func(w *Window) []string { return w.keys }, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &manual{t: time.Unix(1_700_000_000, 0)}
			var w *Window
			var err error
			l := Limit{N: 3, Per: per}
			if tc.kind == kindCompletion {
				w, err = NewCompletion(c, uniqueName(t), l, WithClock(clk.now), WithLease(10*time.Second))
			} else {
				w, err = NewSlidingLog(c, uniqueName(t), l, 0, WithClock(clk.now))
			}
			if err != nil {
				t.Fatal(err)
			}
			var tokens []string
			for range 3 {
				d, err := w.Admit(ctx, 1)
				if err != nil || !d.OK {
					t.Fatalf("Admit: %+v, %v", d, err)
				}
				tokens = append(tokens, d.Token)
				clk.t = clk.t.Add(time.Millisecond)
			}
			if err := w.Release(ctx, tokens[0]); err != nil {
				t.Fatal(err)
			}
			if err := c.Del(ctx, tc.lose(w)...).Err(); err != nil {
				t.Fatal(err)
			}
			clk.t = clk.t.Add(time.Millisecond)
			if tc.relFirst {
				if err := w.Release(ctx, tokens[1]); err != nil {
					t.Fatalf("Release after the loss: %v", err)
				}
			}
			d, err := w.Admit(ctx, 1)
			if err != nil || d.OK || !d.StateLost || d.Wait != per {
				t.Fatalf("first Admit after the loss: %+v, %v; want a refusal with StateLost and a wait of %v", d, err, per)
			}
			// Another process (a Window that never admitted) is held too.
			var other *Window
			if tc.kind == kindCompletion {
				other, _ = NewCompletion(c, w.name, l, WithClock(clk.now), WithLease(10*time.Second))
			} else {
				other, _ = NewSlidingLog(c, w.name, l, 0, WithClock(clk.now))
			}
			clk.t = clk.t.Add(per / 2)
			for _, x := range []*Window{w, other} {
				d, err = x.Admit(ctx, 1)
				if err != nil || d.OK || d.StateLost || d.Wait != per/2 {
					t.Fatalf("Admit half a Per after the loss: %+v, %v; want a refusal for %v, StateLost once only", d, err, per/2)
				}
			}
			clk.t = clk.t.Add(per / 2)
			// The block is over. Calls in flight the keys still hold count:
			// in the completion window tokens[1] and [2] (lease 10 s) when
			// their lease survived.
			room := int64(3)
			if tc.kind == kindCompletion && tc.inLeft {
				room = 1 // tokens[1] and [2] in flight
				if tc.relFirst {
					room = 2 // tokens[1] ended at the loss: it counted until then + Per
				}
			}
			for i := range room {
				if d, err := w.Admit(ctx, 1); err != nil || !d.OK {
					t.Fatalf("Admit %d after the block: %+v, %v", i, d, err)
				}
			}
			if d, err := w.Admit(ctx, 1); err != nil || d.OK || d.Wait <= 0 {
				t.Fatalf("Admit beyond the limit: %+v, %v", d, err)
			}
		})
	}
}

// TestReleaseAfterALossStillCounts: a call in flight when the whole state
// was lost is unknown to the window; its Release (within lease + Per of the
// loss) still records its end, so it counts for a Per after it, and
// Release says ErrNotInFlight.
func TestReleaseAfterALossStillCounts(t *testing.T) {
	c := newClient(t, sharedAddr(t))
	ctx := ctxT(t)
	clk := &manual{t: time.Unix(1_700_000_000, 0)}
	per := time.Second
	w, err := NewCompletion(c, uniqueName(t), Limit{N: 2, Per: per}, WithClock(clk.now), WithLease(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := w.Admit(ctx, 2)
	if !a.OK {
		t.Fatalf("%+v", a)
	}
	_ = c.Del(ctx, w.keys...).Err()
	clk.t = clk.t.Add(time.Millisecond)
	if d, _ := w.Admit(ctx, 1); !d.StateLost {
		t.Fatalf("%+v: want StateLost", d)
	}
	clk.t = clk.t.Add(per / 2)
	if err := w.Release(ctx, a.Token); !errors.Is(err, ErrNotInFlight) {
		t.Fatalf("Release of a call the window lost: %v, want ErrNotInFlight", err)
	}
	// The block ends at loss + Per, the released call counts until
	// release + Per, half a Per later.
	clk.t = clk.t.Add(per/2 + time.Millisecond)
	if d, err := w.Admit(ctx, 1); err != nil || d.OK || d.Wait != per/2-time.Millisecond {
		t.Fatalf("Admit once the block is over: %+v, %v; want a refusal until the released call's end + Per", d, err)
	}
	clk.t = clk.t.Add(per / 2)
	if d, err := w.Admit(ctx, 2); err != nil || !d.OK {
		t.Fatalf("Admit after the released call's end + Per: %+v, %v", d, err)
	}
}

// TestLimitMismatch: two processes built with different N for one name
// are both served under the smaller, and told so.
func TestLimitMismatch(t *testing.T) {
	c := newClient(t, sharedAddr(t))
	ctx := ctxT(t)
	name := uniqueName(t)
	clk := &manual{t: time.Unix(1_700_000_000, 0)}
	big, _ := NewCompletion(c, name, Limit{N: 5, Per: time.Second}, WithClock(clk.now))
	small, _ := NewCompletion(c, name, Limit{N: 2, Per: time.Second}, WithClock(clk.now))
	if d, _ := big.Admit(ctx, 1); !d.OK || d.LimitMismatch {
		t.Fatalf("%+v", d)
	}
	if d, _ := small.Admit(ctx, 1); !d.OK || !d.LimitMismatch {
		t.Fatalf("%+v: want admitted, LimitMismatch", d)
	}
	if d, _ := big.Admit(ctx, 1); d.OK || !d.LimitMismatch {
		t.Fatalf("%+v: want refused under N = 2, LimitMismatch", d)
	}
}

// TestReleaseDetectsALoss: when the whole state is lost while a call of
// this Window is in flight, and the Release comes before any admission,
// the release script detects the loss itself (the Window knows its call
// is in flight), records the call's end and holds the window full for one
// Per: an admission right after is refused.
func TestReleaseDetectsALoss(t *testing.T) {
	c := newClient(t, sharedAddr(t))
	ctx := ctxT(t)
	clk := &manual{t: time.Unix(1_700_000_000, 0)}
	per := time.Second
	w, err := NewCompletion(c, uniqueName(t), Limit{N: 2, Per: per}, WithClock(clk.now), WithLease(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := w.Admit(ctx, 2)
	if !a.OK {
		t.Fatalf("%+v", a)
	}
	clk.t = clk.t.Add(3 * per) // longer than a Per: only the call in flight tells
	_ = c.Del(ctx, w.keys...).Err()
	if err := w.Release(ctx, a.Token); !errors.Is(err, ErrNotInFlight) {
		t.Fatalf("Release: %v, want ErrNotInFlight", err)
	}
	clk.t = clk.t.Add(time.Millisecond)
	d, err := w.Admit(ctx, 1)
	if err != nil || d.OK || d.Wait != per-time.Millisecond {
		t.Fatalf("Admit after the release found the loss: %+v, %v; want a refusal for the rest of a Per", d, err)
	}
	clk.t = clk.t.Add(per)
	if d, err := w.Admit(ctx, 2); err != nil || !d.OK {
		t.Fatalf("Admit a Per later: %+v, %v", d, err)
	}
}

// TestOneHashWindowsDetectLosses: GCRA, the token bucket, the fixed window
// and the sliding window counter detect a hash left with some fields only
// (on the old code the token bucket's script failed on it, every call,
// until the key expired) and a whole hash lost while the Window knows the
// state still matters: refused with StateLost for one Per, then idle.
func TestOneHashWindowsDetectLosses(t *testing.T) {
	c := newClient(t, sharedAddr(t))
	ctx := ctxT(t)
	per := time.Second
	l := Limit{N: 4, Per: per}
	mk := map[string]func(name string, clk *manual) (*Window, error){
		"gcra":   func(n string, clk *manual) (*Window, error) { return NewGCRA(c, n, l, 0, WithClock(clk.now)) },
		"bucket": func(n string, clk *manual) (*Window, error) { return NewTokenBucket(c, n, l, 0, WithClock(clk.now)) },
		"fixed":  func(n string, clk *manual) (*Window, error) { return NewFixedWindow(c, n, l, WithClock(clk.now)) },
		"counter": func(n string, clk *manual) (*Window, error) {
			return NewSlidingWindowCounter(c, n, l, WithClock(clk.now))
		},
	}
	field := map[string]string{"gcra": "a", "bucket": "k", "fixed": "c", "counter": "p"}
	for kind, f := range mk {
		for _, how := range []string{"field", "hash"} {
			t.Run(kind+"/"+how, func(t *testing.T) {
				clk := &manual{t: time.Unix(1_700_000_000, 0)}
				w, err := f(uniqueName(t), clk)
				if err != nil {
					t.Fatal(err)
				}
				for range 4 {
					if d, err := w.Admit(ctx, 1); err != nil || !d.OK {
						t.Fatalf("%+v, %v", d, err)
					}
				}
				if how == "field" {
					err = c.HDel(ctx, w.keys[0], field[kind]).Err()
				} else {
					err = c.Del(ctx, w.keys[0]).Err()
				}
				if err != nil {
					t.Fatal(err)
				}
				clk.t = clk.t.Add(time.Millisecond)
				d, err := w.Admit(ctx, 1)
				if err != nil || d.OK || !d.StateLost || d.Wait != per {
					t.Fatalf("after the loss: %+v, %v; want a refusal with StateLost for %v", d, err, per)
				}
				clk.t = clk.t.Add(per / 2)
				if d, err := w.Admit(ctx, 1); err != nil || d.OK || d.StateLost || d.Wait != per/2 {
					t.Fatalf("half a Per later: %+v, %v", d, err)
				}
				clk.t = clk.t.Add(per / 2)
				if d, err := w.Admit(ctx, 1); err != nil || !d.OK {
					t.Fatalf("a Per later: %+v, %v", d, err)
				}
			})
		}
	}
}
