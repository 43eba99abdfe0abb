package rstore

import (
	"context"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/internal/rspec"
	"github.com/ratesem/ratesem/window"
)

// twoStores returns two Stores (two processes) over one server, on clk.
func twoStores(t *testing.T, clk *vclock) (*Store, *Store) {
	t.Helper()
	s1, c := newStore(t, clk, time.Minute)
	c2 := goredis.NewClient(&goredis.Options{Addr: c.Options().Addr})
	t.Cleanup(func() { c2.Close() })
	s2, err := New(c2, s1.prefix, Options{Lease: time.Minute, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	return s1, s2
}

// A key whose limit nobody learned (rspec.Unknown) admits one call at a
// time across the fleet; the limit one process learns (sent with its next
// call) replaces it for every process, which adopts it at its next
// decision and learns it there (Decision.AdoptedSpecs); a call admitted
// while unknown and settled with its real weight counts it whole.
func TestLearnedLimitFleet(t *testing.T) {
	if w := rspec.Unknown().Wire(); w != "1/1/0/0/1" {
		t.Fatalf("Unknown's wire %q: the scripts know it as 1/1/0/0/1", w)
	}
	clk := newClock()
	s1, s2 := twoStores(t, clk)
	ctx := context.Background()
	unk := []Charge{{Rule: "r", Key: "k", Spec: rspec.Unknown(), Weight: 1}}
	d1, err := s1.Admit(ctx, "sc", unk)
	if err != nil || !d1.OK {
		t.Fatalf("first unknown call: %+v %v", d1, err)
	}
	d2, err := s2.Admit(ctx, "sc", unk)
	if err != nil || d2.OK || !d2.Release {
		t.Fatalf("a second unknown call elsewhere: %+v %v; want refused until the first ends", d2, err)
	}
	if err := s1.Release(ctx, "sc", unk, d1.Token); err != nil {
		t.Fatal(err)
	}
	d3, err := s2.Admit(ctx, "sc", unk)
	if err != nil || !d3.OK {
		t.Fatalf("after the release: %+v %v", d3, err)
	}
	// s1 learned the limit from a response: 3 per minute (fixed window).
	learned := &Spec{Kind: FixedWindow, Limit: window.Limit{N: 3, Per: time.Minute}}
	d4, err := s1.Admit(ctx, "sc", []Charge{{Rule: "r", Key: "k", Spec: learned, Weight: 2}})
	if err != nil || !d4.OK {
		t.Fatalf("the learned limit sent over the unknown one: %+v %v", d4, err)
	}
	d5, err := s2.Admit(ctx, "sc", unk)
	if err != nil || !d5.OK || len(d5.Adopted) != 1 || len(d5.AdoptedSpecs) != 1 || d5.AdoptedSpecs[0] != *learned {
		t.Fatalf("the other process: %+v %v; want the learned limit adopted and named", d5, err)
	}
	d6, err := s2.Admit(ctx, "sc", []Charge{{Rule: "r", Key: "k", Spec: learned, Weight: 1}})
	if err != nil || d6.OK || d6.Release || d6.Wait <= 0 {
		t.Fatalf("the learned window full (2 + 1 units): %+v %v; want a wait", d6, err)
	}
	// The call admitted while unknown cost 2 units: settled, it debits 1.
	if err := s2.Settle(ctx, "sc", unk, d3.Token, []int64{2}); err != nil {
		t.Fatal(err)
	}
	clk.add(time.Minute)
	d7, err := s1.Admit(ctx, "sc", []Charge{{Rule: "r", Key: "k", Spec: learned, Weight: 3}})
	if err != nil || !d7.OK {
		t.Fatalf("next window: %+v %v", d7, err)
	}
	// A limit that disagrees with a learned one is adopted only when
	// stored by SetLimit: a learned limit is stored as by SetLimit.
	other := &Spec{Kind: FixedWindow, Limit: window.Limit{N: 5, Per: time.Minute}}
	d8, err := s2.Admit(ctx, "sc", []Charge{{Rule: "r", Key: "k", Spec: other, Weight: 1}})
	if err != nil || len(d8.Adopted) != 1 {
		t.Fatalf("another limit over the learned one: %+v %v; want the stored one adopted", d8, err)
	}
}

// A Quota (a learned budget) is shared by the fleet: admissions take from
// it in every process, a report only lowers it within its window and
// starts a new window when it names a later one, the window rolls to N
// when it ends without a report, and Budget says the units taken in.
func TestQuotaBudgetFleet(t *testing.T) {
	clk := newClock()
	s1, s2 := twoStores(t, clk)
	ctx := context.Background()
	q := &Spec{Kind: Quota, Limit: window.Limit{N: 10, Per: time.Minute}}
	ch := func(w int64) []Charge { return []Charge{{Rule: "q", Key: "k", Spec: q, Weight: w}} }
	// a quota's calls are leased (in flight for the fleet): ended ends
	// an admitted one at once, as a call the server has counted
	ended := func(s *Store, w int64) (Decision, error) {
		d, err := s.Admit(ctx, "sc", ch(w))
		if err == nil && d.OK {
			if err := s.Release(ctx, "sc", ch(w), d.Token); err != nil {
				t.Fatal(err)
			}
		}
		return d, err
	}
	if d, err := ended(s1, 4); err != nil || !d.OK {
		t.Fatalf("%+v %v", d, err)
	}
	// The server says 3 remain, its window ending in 60 s (the first
	// report of the window the limiter rolled to: it names its end): it
	// lowers the budget from 6 to 3.
	if taken, err := s2.Budget(ctx, "sc", ch(0)[0], 3, time.Minute, 0, ""); err != nil || taken != 3 {
		t.Fatalf("Budget: %d %v; want 3 taken in", taken, err)
	}
	if d, err := ended(s2, 4); err != nil || d.OK || d.Release || d.Wait != time.Minute {
		t.Fatalf("over the budget: %+v %v; want the window's end (60 s)", d, err)
	}
	if d, err := ended(s1, 3); err != nil || !d.OK {
		t.Fatalf("the budget's 3 units: %+v %v", d, err)
	}
	// A higher report in the same window never raises it (nor moves its
	// end earlier).
	if taken, err := s1.Budget(ctx, "sc", ch(0)[0], 8, 40*time.Second, 0, ""); err != nil || taken != 0 {
		t.Fatalf("a looser report: %d %v", taken, err)
	}
	if d, _ := ended(s2, 1); d.OK {
		t.Fatal("admitted over a spent budget")
	}
	// A report naming a later window (ends 50 s + 60 s from the start,
	// more than Per/2 after the one kept) starts it: 9 units.
	clk.add(50 * time.Second)
	if taken, err := s2.Budget(ctx, "sc", ch(0)[0], 9, time.Minute, 0, ""); err != nil || taken != -9 {
		t.Fatalf("a new window: %d %v; want -9 (room made)", taken, err)
	}
	if d, err := ended(s1, 9); err != nil || !d.OK {
		t.Fatalf("the new window's 9: %+v %v", d, err)
	}
	if d, _ := ended(s2, 1); d.OK || d.Wait != time.Minute {
		t.Fatalf("over the new budget: %+v; want its end, 60 s", d)
	}
	// No report: the window ends and rolls to N.
	clk.add(time.Minute)
	if d, err := ended(s2, 10); err != nil || !d.OK {
		t.Fatalf("rolled: %+v %v", d, err)
	}
	// A usage count (Reconcile) lowers a quota's budget as well.
	clk.add(time.Minute)
	// (rolled at the reconcile: 10, less 7 used: 3 left, 7 taken in)
	if extra, err := s1.Reconcile(ctx, "sc", ch(0)[0], 7); err != nil || extra != 7 {
		t.Fatalf("Reconcile: %d %v; want 7 taken in", extra, err)
	}
	if d, _ := ended(s1, 4); d.OK {
		t.Fatal("admitted 4 with 3 left")
	}
	// Budget on a limiter that is not a quota.
	g := Charge{Rule: "g", Key: "k", Spec: &Spec{Kind: GCRA, Limit: window.Limit{N: 1, Per: time.Second}, Burst: 1}}
	if _, err := s1.Admit(ctx, "sc", []Charge{{Rule: g.Rule, Key: g.Key, Spec: g.Spec, Weight: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Budget(ctx, "sc", g, 1, time.Second, 0, ""); !errors.Is(err, ErrSpec) {
		t.Fatalf("Budget on a GCRA: %v", err)
	}
}

// AdmitAll decides several calls in one round trip, in order, each seeing
// the ones before it, as Admit would one by one; a caller's mistake fails
// its call alone; a Redis that lost its scripts costs a second round trip.
func TestAdmitAllOneRoundTrip(t *testing.T) {
	clk := newClock()
	s, c := newStore(t, clk, time.Minute)
	ctx := context.Background()
	var trips int
	c.AddHook(countHook{&trips})
	comp := &Spec{Kind: Completion, Limit: window.Limit{N: 2, Per: time.Second}}
	g := &Spec{Kind: GCRA, Limit: window.Limit{N: 1, Per: time.Second}, Burst: 1}
	one := func(sp *Spec, key string) []Charge { return []Charge{{Rule: "r", Key: key, Spec: sp, Weight: 1}} }
	calls := [][]Charge{one(comp, "a"), one(comp, "a"), one(comp, "a"), one(g, "b"),
		{{Rule: "r", Key: "b", Spec: g, Weight: 5}}, // too heavy: fails alone, before the round trip
		append(one(comp, "c"), one(g, "b")[0])}
	// warm up: a connection dialled, the script loaded
	if _, err := s.Admit(ctx, "sc", one(comp, "warm")); err != nil {
		t.Fatal(err)
	}
	trips = 0
	ds, errs, err := s.AdmitAll(ctx, "sc", calls)
	if err != nil {
		t.Fatal(err)
	}
	if trips != 1 {
		t.Fatalf("%d round trips, want 1", trips)
	}
	want := []bool{true, true, false, true, false, false}
	for i, d := range ds {
		if i == 4 {
			if errs[i] == nil {
				t.Errorf("call 4: too heavy, admitted")
			}
			continue
		}
		if errs[i] != nil || d.OK != want[i] {
			t.Errorf("call %d: %+v %v; want OK %v", i, d, errs[i], want[i])
		}
	}
	if !ds[2].Release || ds[5].Refused != 1 || ds[5].Wait != time.Second {
		t.Errorf("refusals: %+v, %+v", ds[2], ds[5])
	}
	// The admitted calls are Admit's: Release takes their tokens.
	if err := s.Release(ctx, "sc", calls[0], ds[0].Token); err != nil {
		t.Fatal(err)
	}
	// Scripts flushed: the calls that found them gone are sent again.
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	clk.add(2 * time.Second)
	trips = 0
	ds, errs, err = s.AdmitAll(ctx, "sc", [][]Charge{one(g, "b"), one(g, "b")})
	if err != nil || errs[0] != nil || errs[1] != nil || !ds[0].OK || ds[1].OK || trips != 2 {
		t.Fatalf("after SCRIPT FLUSH: %+v %v %v, %d round trips; want 2", ds, errs, err, trips)
	}
}

// countHook counts the round trips of a client (a pipeline counts one).
type countHook struct{ n *int }

func (h countHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h countHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error { *h.n++; return next(ctx, cmd) }
}
func (h countHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error { *h.n++; return next(ctx, cmds) }
}

// A quota's calls in flight are leased, for the fleet: a window that ends
// without a report allows N less them (they may arrive in it, as in
// process); a report counts the reporting call as the server counted it
// only while its lease is held (its release may reach Redis first); a
// reset far away is cut at Per + rspec.MaxResetOver from now.
func TestQuotaCountsCallsInFlight(t *testing.T) {
	clk := newClock()
	s1, s2 := twoStores(t, clk)
	ctx := context.Background()
	q := &Spec{Kind: Quota, Limit: window.Limit{N: 10, Per: 10 * time.Second}}
	ch := func(w int64) []Charge { return []Charge{{Rule: "q", Key: "k", Spec: q, Weight: w}} }
	held, err := s1.Admit(ctx, "sc", ch(3))
	if err != nil || !held.OK || !held.Leased {
		t.Fatalf("a quota's call: %+v %v; want admitted and leased", held, err)
	}
	clk.add(10 * time.Second) // the window ends without a report
	if d, err := s2.Admit(ctx, "sc", ch(8)); err != nil || d.OK {
		t.Fatalf("8 of a new window with 3 units in flight: %+v %v; want refused", d, err)
	}
	rep, err := s2.Admit(ctx, "sc", ch(7))
	if err != nil || !rep.OK {
		t.Fatalf("7 of a new window with 3 units in flight: %+v %v", rep, err)
	}
	// A report of a new window (4 left, the reporting call of 7 counted):
	// the budget is 4 less the other call in flight (3), while the
	// reporting call is leased; once it is released, 4 less 3 as well.
	clk.add(6 * time.Second)
	if _, err := s2.Budget(ctx, "sc", ch(0)[0], 4, time.Hour, 7, rep.Token); err != nil {
		t.Fatal(err)
	}
	if d, _ := s1.Admit(ctx, "sc", ch(2)); d.OK {
		t.Fatal("admitted 2 of a budget of 1")
	}
	if err := s2.Release(ctx, "sc", ch(7), rep.Token); err != nil {
		t.Fatal(err)
	}
	clk.add(11 * time.Second) // the reset, cut at Per + 2 s: not ended yet
	if d, _ := s1.Admit(ctx, "sc", ch(2)); d.OK || d.Wait != time.Second {
		t.Fatalf("a reset an hour away: %+v; want its end cut at Per + %v (1 s left)", d, rspec.MaxResetOver)
	}
	clk.add(time.Second)
	// A report whose call was released before it reached Redis: its
	// units are not in flight, the others are.
	if _, err := s2.Budget(ctx, "sc", ch(0)[0], 9, time.Hour, 7, rep.Token); err != nil {
		t.Fatal(err)
	}
	if d, _ := s1.Admit(ctx, "sc", ch(7)); d.OK {
		t.Fatal("admitted 7 of a budget of 9 less 3 in flight")
	}
	if d, _ := s1.Admit(ctx, "sc", ch(6)); !d.OK {
		t.Fatal("refused 6 of a budget of 9 less 3 in flight")
	}
}

// A report of the window a quota keeps (not a new one) that names a later
// end moves the end there (the window the limiter rolled to on its own
// may end before the server's), and one naming an earlier end does not:
// the budget holds until the latest end a report named; but the first
// report of a window the limiter rolled to on its own (a guess) names its
// end, sooner or later.
func TestQuotaReportMovesEndLater(t *testing.T) {
	clk := newClock()
	s1, s2 := twoStores(t, clk)
	ctx := context.Background()
	q := &Spec{Kind: Quota, Limit: window.Limit{N: 10, Per: 10 * time.Second}}
	ch := func(w int64) []Charge { return []Charge{{Rule: "q", Key: "k", Spec: q, Weight: w}} }
	d, err := s1.Admit(ctx, "sc", ch(1)) // rolls a window ending in 10 s
	if err != nil || !d.OK {
		t.Fatalf("%+v %v", d, err)
	}
	if err := s1.Release(ctx, "sc", ch(1), d.Token); err != nil {
		t.Fatal(err)
	}
	clk.add(2 * time.Second)
	// ends in 12 s: 4 s after the kept end, less than max(1 s, Per/2) = 5 s
	if _, err := s2.Budget(ctx, "sc", ch(0)[0], 0, 12*time.Second, 0, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Budget(ctx, "sc", ch(0)[0], 0, 3*time.Second, 0, ""); err != nil {
		t.Fatal(err)
	}
	clk.add(9 * time.Second) // past the end rolled to (10 s), before the server's (14 s)
	if d, _ := s1.Admit(ctx, "sc", ch(1)); d.OK || d.Wait != 3*time.Second {
		t.Fatalf("after the end rolled to, before the server's: %+v; want refused until the server's (3 s)", d)
	}
	// a later report of the same window (a slower reply) moves it later
	if _, err := s2.Budget(ctx, "sc", ch(0)[0], 0, 5*time.Second, 0, ""); err != nil {
		t.Fatal(err)
	}
	clk.add(4 * time.Second)
	if d, _ := s1.Admit(ctx, "sc", ch(1)); d.OK || d.Wait != time.Second {
		t.Fatalf("after a later end named: %+v; want refused until it (1 s)", d)
	}
	// The window ends; the first report of the one rolled to names its
	// end, sooner than a Per.
	clk.add(time.Second)
	if d, err := s1.Admit(ctx, "sc", ch(1)); err != nil || !d.OK {
		t.Fatalf("a new window: %+v %v", d, err)
	}
	if _, err := s2.Budget(ctx, "sc", ch(0)[0], 5, 2*time.Second, 0, ""); err != nil {
		t.Fatal(err)
	}
	if d, _ := s1.Admit(ctx, "sc", ch(9)); d.OK || d.Wait != 2*time.Second {
		t.Fatalf("after the first report of a rolled window: %+v; want refused until its end (2 s)", d)
	}
}
