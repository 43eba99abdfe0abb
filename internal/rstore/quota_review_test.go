package rstore

import (
	"context"
	"testing"
	"time"

	"github.com/ratesem/ratesem/window"
)

// A quota's admission taken back (Cancel: its caller left before the
// answer came, the call never reached the server) leaves no trace, as in
// process (Engine.undoLocked gives the budget back): its units go back to
// the budget, in the window it was admitted in or in the next one (which
// started with N less the calls in flight, the cancelled one among them),
// never above N.
func TestQuotaCancelLeavesNoTrace(t *testing.T) {
	clk := newClock()
	s1, s2 := twoStores(t, clk)
	ctx := context.Background()
	q := &Spec{Kind: Quota, Limit: window.Limit{N: 5, Per: 10 * time.Second}}
	ch := func(w int64) []Charge { return []Charge{{Rule: "q", Key: "k", Spec: q, Weight: w}} }
	d, err := s1.Admit(ctx, "sc", ch(3))
	if err != nil || !d.OK {
		t.Fatalf("%+v %v", d, err)
	}
	if err := s1.Cancel(ctx, "sc", ch(3), d.Token); err != nil {
		t.Fatal(err)
	}
	if d, err := s2.Admit(ctx, "sc", ch(5)); err != nil || !d.OK {
		t.Fatalf("5 of 5 after a cancelled admission of 3: %+v %v; want admitted (no trace)", d, err)
	} else if err := s2.Release(ctx, "sc", ch(5), d.Token); err != nil {
		t.Fatal(err)
	}
	// Across a window's end: the next window starts with N less the call
	// in flight (2 units); its cancel gives them back there.
	clk.add(10 * time.Second)
	d, err = s1.Admit(ctx, "sc", ch(2))
	if err != nil || !d.OK {
		t.Fatalf("%+v %v", d, err)
	}
	clk.add(10 * time.Second)
	if err := s1.Cancel(ctx, "sc", ch(2), d.Token); err != nil {
		t.Fatal(err)
	}
	if d, err := s2.Admit(ctx, "sc", ch(5)); err != nil || !d.OK {
		t.Fatalf("5 of a window that started with a call in flight, cancelled: %+v %v; want admitted", d, err)
	} else if err := s2.Release(ctx, "sc", ch(5), d.Token); err != nil {
		t.Fatal(err)
	}
	if d, _ := s2.Admit(ctx, "sc", ch(1)); d.OK {
		t.Fatal("a cancel gave back more than N")
	}
}

// A report lower than the budget is the latest the server counted: its
// window is the quota's, sooner or later (a slow reply of the window that
// ended, after a reply of the next one set the budget), as in process;
// one that does not lower it moves the end only later.
func TestQuotaLowerReportNamesEnd(t *testing.T) {
	clk := newClock()
	s1, s2 := twoStores(t, clk)
	ctx := context.Background()
	q := &Spec{Kind: Quota, Limit: window.Limit{N: 5, Per: 10 * time.Second}}
	ch := func(w int64) []Charge { return []Charge{{Rule: "q", Key: "k", Spec: q, Weight: w}} }
	if _, err := s1.Budget(ctx, "sc", ch(0)[0], 4, 10*time.Second, 0, ""); err != nil {
		t.Fatal(err)
	}
	// not lower (4): the end stays
	if _, err := s2.Budget(ctx, "sc", ch(0)[0], 4, time.Second, 0, ""); err != nil {
		t.Fatal(err)
	}
	if d, _ := s1.Admit(ctx, "sc", ch(5)); d.OK || d.Wait != 10*time.Second {
		t.Fatalf("%+v; want refused until the end kept (10 s)", d)
	}
	// lower (0), ending in 1 s: the window ends then
	if _, err := s2.Budget(ctx, "sc", ch(0)[0], 0, time.Second, 0, ""); err != nil {
		t.Fatal(err)
	}
	if d, _ := s1.Admit(ctx, "sc", ch(1)); d.OK || d.Wait != time.Second {
		t.Fatalf("%+v; want refused until the lower report's end (1 s)", d)
	}
	clk.add(time.Second)
	if d, err := s1.Admit(ctx, "sc", ch(5)); err != nil || !d.OK {
		t.Fatalf("a new window: %+v %v; want 5 admitted", d, err)
	}
}

// A limiter that becomes a quota with units counted (SetLimit carries
// them into its first window, a Per from now: a guess) takes the first
// report's end, sooner or later, as a window the quota rolled to on its
// own does (field Q 0).
func TestQuotaSetLimitFirstReportNamesEnd(t *testing.T) {
	clk := newClock()
	s1, s2 := twoStores(t, clk)
	ctx := context.Background()
	cw := &Spec{Kind: Completion, Limit: window.Limit{N: 1, Per: 10 * time.Second}}
	d, err := s1.Admit(ctx, "sc", []Charge{{Rule: "q", Key: "k", Spec: cw, Weight: 1}})
	if err != nil || !d.OK {
		t.Fatalf("%+v %v", d, err)
	}
	q := &Spec{Kind: Quota, Limit: window.Limit{N: 5, Per: 10 * time.Second}}
	c := Charge{Rule: "q", Key: "k", Spec: q}
	if err := s1.SetLimit(ctx, "sc", c); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Budget(ctx, "sc", c, 4, time.Second, 1, d.Token); err != nil {
		t.Fatal(err)
	}
	c.Weight = 5
	if d, _ := s2.Admit(ctx, "sc", []Charge{c}); d.OK || d.Wait != time.Second {
		t.Fatalf("%+v; want refused until the first report's end (1 s), not the guess (10 s)", d)
	}
}
