package clientpool_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/internal/rstore"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// quotaAdaptRule is an adaptive rule (start level 5, floor 2) that also
// learns its server's limit from X-Limit, and its window from
// X-Remaining and X-Reset-Ms (the ms until the server's window ends).
func quotaAdaptRule(per time.Duration) clientpool.Rule {
	return clientpool.Rule{Name: "api", Limit: window.Limit{N: 5, Per: per},
		Adapt: &clientpool.Adaptive{Floor: 2}, Window: window.NewCompletion,
		Learn: func(h http.Header, _ time.Time) (clientpool.Learned, bool) {
			n, err := strconv.ParseInt(h.Get("X-Limit"), 10, 64)
			if err != nil {
				return clientpool.Learned{}, false
			}
			in := clientpool.Learned{Limit: window.Limit{N: n}, Remaining: -1}
			if v := h.Get("X-Remaining"); v != "" {
				in.Remaining, _ = strconv.ParseInt(v, 10, 64)
			}
			if v := h.Get("X-Reset-Ms"); v != "" {
				ms, _ := strconv.ParseInt(v, 10, 64)
				in.Reset = time.Now().Add(time.Duration(ms) * time.Millisecond)
			}
			return in, true
		}}
}

// quotaAdaptScenario runs one scenario on p (a Pool of quotaAdaptRule(per))
// and returns how many calls each step admitted at once (holdN: tickets
// held until the step ends, none reporting), then the limit each of the
// keys a, b and c is held to (Snapshot):
//
//  1. key "a" before any reply: the adaptive level, 5;
//  2. key "b", met before any reply names a window: the level, 5;
//  3. key "a" after a reply naming the server's window (limit 20, 19
//     remaining until 1 s from now): the server's budget, 19, not the
//     level;
//  4. key "b", never reported, counted in windows of its own from then
//     on: one of the rule's 5;
//  5. key "a" again within the server's window: 0 (the budget is spent);
//  6. key "a" once the server's window has ended (and ResetMargin): a
//     new window of the learned 20, before any reply in it;
//  7. key "c", met only after the rule counts in the server's windows:
//     a window of the rule's 5;
//  8. key "a" after a reply without its window (20 remaining): 0, such a
//     reply is ignored under a rule counted in windows (it gives nothing
//     back);
//  9. key "d": a call of 30 admitted (as the window's 5), then none of 1.
func quotaAdaptScenario(t *testing.T, p *clientpool.Pool, per time.Duration) []int64 {
	t.Helper()
	a := clientpool.Charge{Rule: "api", Key: "a", Weight: 1}
	b := clientpool.Charge{Rule: "api", Key: "b", Weight: 1}
	c := clientpool.Charge{Rule: "api", Key: "c", Weight: 1}
	var got []int64
	hold := func(ch clientpool.Charge) { got = append(got, int64(holdN(t, p, ch, 40))) }
	hold(a)
	hold(b)
	time.Sleep(per + 100*time.Millisecond) // those calls leave the windows
	tk := acquire(t, p, a)
	tk.ObserveHeaders(http.Header{"X-Limit": {"20"}, "X-Remaining": {"19"}, "X-Reset-Ms": {"1000"}})
	tk.Release()
	hold(a)
	hold(b)
	hold(a)
	time.Sleep(time.Second + clientpool.ResetMargin + 200*time.Millisecond)
	hold(a)
	hold(c)
	if tk, _, err := p.TryAcquire(c); err == nil && tk != nil {
		tk.Release()
	}
	tk, _, err := p.TryAcquire(a)
	if err != nil {
		t.Fatal(err)
	}
	if tk != nil {
		tk.ObserveHeaders(http.Header{"X-Limit": {"20"}, "X-Remaining": {"20"}})
		tk.Release()
		got = append(got, -1) // admitted beyond the budget
	}
	hold(a)
	// key "d": a call heavier than its windows' 5 is admitted alone, as
	// a charge of 5 (a learned limit never refuses a call), which spends
	// the window
	d := clientpool.Charge{Rule: "api", Key: "d", Weight: 30}
	for _, w := range []int64{30, 1} {
		d.Weight = w
		tk, _, err := p.TryAcquire(d)
		if err != nil {
			t.Fatalf("TryAcquire(%d) on d: %v", w, err)
		}
		if tk == nil {
			got = append(got, 0)
			continue
		}
		got = append(got, 1)
		defer tk.Release()
	}
	lims := map[string]int64{}
	for _, k := range p.Snapshot() {
		lims[k.Key] = k.Limit.N
	}
	return append(got, lims["a"], lims["b"], lims["c"])
}

// TestAdaptiveLearnQuotaConformance: an adaptive rule whose Learn reports
// the server's windows (Learned.Reset) counts its calls against the
// server's budget, which then governs, not the level, in process and over
// Redis alike (one product): the same scenario admits the same calls in
// both modes, and holds its keys to the same limits.
func TestAdaptiveLearnQuotaConformance(t *testing.T) {
	per := 2 * time.Second
	table := clientpool.Table{Rules: []clientpool.Rule{quotaAdaptRule(per)}}
	want := []int64{5, 5, 19, 5, 0, 20, 5, 0, 1, 0, 20, 5, 5}
	local, err := clientpool.New(table)
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	inProc := quotaAdaptScenario(t, local, per)
	c := newClient(t, redistest.Start(t).Addr())
	overRedis := quotaAdaptScenario(t, newRedisPool(t, table, c, "conf"), per)
	if !slices.Equal(inProc, want) {
		t.Errorf("in process: admitted %v, want %v", inProc, want)
	}
	if !slices.Equal(overRedis, want) {
		t.Errorf("over Redis: admitted %v, want %v", overRedis, want)
	}
}

// quotaAdaptFleet runs a scenario on a fleet of two Pools of
// quotaAdaptRule(per) (the same Pool twice for one process) and returns
// how many calls each step admitted at once:
//
//  1. b, key "a", before any reply: the level, 5;
//  2. b, key "a", after a reply to a naming the server's window (limit
//     20, 19 remaining): the server's budget, 19, shared by the fleet;
//  3. a, key "a": 0, the budget is spent;
//  4. b, key "c", met after the rule counts in the server's windows: a
//     window of the rule's 5;
//  5. a, key "c", after SetLimit(3) in b and once c's window ended: a
//     window of 3 (SetLimit set the N of the windows of the keys that
//     learned no limit, for the fleet).
func quotaAdaptFleet(t *testing.T, a, b *clientpool.Pool, per time.Duration) []int64 {
	t.Helper()
	ka := clientpool.Charge{Rule: "api", Key: "a", Weight: 1}
	kc := clientpool.Charge{Rule: "api", Key: "c", Weight: 1}
	var got []int64
	hold := func(p *clientpool.Pool, ch clientpool.Charge) { got = append(got, int64(holdN(t, p, ch, 40))) }
	hold(b, ka)
	time.Sleep(per + 100*time.Millisecond)
	tk := acquire(t, a, ka)
	tk.ObserveHeaders(http.Header{"X-Limit": {"20"}, "X-Remaining": {"19"}, "X-Reset-Ms": {"1000"}})
	tk.Release()
	hold(b, ka)
	hold(a, ka)
	hold(b, kc)
	if err := b.SetLimit("api", window.Limit{N: 3, Per: per}); err != nil {
		t.Fatalf("SetLimit on an adaptive rule counted in the server's windows: %v", err)
	}
	time.Sleep(per + 100*time.Millisecond)
	hold(a, kc)
	return got
}

// TestAdaptiveLearnQuotaFleet: two processes over Redis share the budget
// a reply to either named (the fleet learns together: the other adopts
// the quota at its next admission) and SetLimit's limit, as one process
// does.
func TestAdaptiveLearnQuotaFleet(t *testing.T) {
	per := 2 * time.Second
	table := clientpool.Table{Rules: []clientpool.Rule{quotaAdaptRule(per)}}
	want := []int64{5, 19, 0, 5, 3}
	local, err := clientpool.New(table)
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	inProc := quotaAdaptFleet(t, local, local, per)
	c := newClient(t, redistest.Start(t).Addr())
	fleet := quotaAdaptFleet(t, newRedisPool(t, table, c, "fleet"), newRedisPool(t, table, c, "fleet"), per)
	if !slices.Equal(inProc, want) {
		t.Errorf("one process: admitted %v, want %v", inProc, want)
	}
	if !slices.Equal(fleet, want) {
		t.Errorf("a fleet of two over Redis: admitted %v, want %v", fleet, want)
	}
}

// TestAdaptiveLearnQuotaHostile: hostile reports to an adaptive rule
// with Learn, in process and over Redis alike: a limit of 2^63−1 with a
// negative remaining count leaves the rule adaptive at its level; a
// reset already past makes the rule count in the server's windows but
// sets no budget (the next window allows the learned limit, capped, less
// the reporting call, which the key's window counted at the switch).
func TestAdaptiveLearnQuotaHostile(t *testing.T) {
	per := 2 * time.Second
	table := clientpool.Table{Rules: []clientpool.Rule{quotaAdaptRule(per)}}
	scenario := func(p *clientpool.Pool) []int64 {
		a := clientpool.Charge{Rule: "api", Key: "a", Weight: 1}
		var got []int64
		hold := func() { got = append(got, int64(holdN(t, p, a, 40))) }
		hold()
		time.Sleep(per + 100*time.Millisecond)
		tk := acquire(t, p, a)
		tk.ObserveHeaders(http.Header{"X-Limit": {"9223372036854775807"}, "X-Remaining": {"-5"}, "X-Reset-Ms": {"1000"}})
		tk.Release()
		for _, k := range p.Snapshot() {
			if k.Key == "a" {
				// still adaptive, at its level (5, or 6 once the law proved
				// it: its timing is not this test's), not the reported limit
				ok := int64(0)
				if k.Limit.N >= 5 && k.Limit.N <= 6 {
					ok = 1
				}
				got = append(got, ok)
			}
		}
		time.Sleep(per + 100*time.Millisecond)
		tk = acquire(t, p, a)
		tk.ObserveHeaders(http.Header{"X-Limit": {"20"}, "X-Remaining": {"3"}, "X-Reset-Ms": {"-5000"}})
		tk.Release()
		time.Sleep(100 * time.Millisecond) // over Redis the release lands in the background
		hold()
		return got
	}
	want := []int64{5, 1, 19}
	inBothModes(t, table, want, func(_ *testing.T, mk func() *clientpool.Pool) []int64 { return scenario(mk()) })
}

// TestAdaptiveLearnQuotaFleetFollows: a process that adopts the quota
// another stored counts its own keys in the server's windows too: a key
// whose level Redis keeps gets its quota stored at its next admission, a
// window of the rule's 5 then, as in one process.
func TestAdaptiveLearnQuotaFleetFollows(t *testing.T) {
	per := 2 * time.Second
	table := clientpool.Table{Rules: []clientpool.Rule{quotaAdaptRule(per)}}
	ka := clientpool.Charge{Rule: "api", Key: "a", Weight: 1}
	kx := clientpool.Charge{Rule: "api", Key: "x", Weight: 1}
	c := newClient(t, redistest.Start(t).Addr())
	st, err := rstore.New(c, "follow", rstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	spec := func() string {
		return c.HGet(context.Background(), st.Keys("follow", rstore.Charge{Rule: "api", Key: "x"})[0], "s").Val()
	}
	scenario := func(a, b *clientpool.Pool, redis bool) []int64 {
		var got []int64
		got = append(got, int64(holdN(t, b, kx, 40)))
		if redis {
			waitFor(t, func() bool { return strings.HasPrefix(spec(), "1/") }, "x's level stored in Redis")
		}
		time.Sleep(per + 100*time.Millisecond)
		tk := acquire(t, a, ka)
		tk.ObserveHeaders(http.Header{"X-Limit": {"20"}, "X-Remaining": {"19"}, "X-Reset-Ms": {"1000"}})
		tk.Release()
		acquire(t, b, ka).Release() // b adopts the quota
		acquire(t, b, kx).Release() // x's level adopted: its quota stored
		if redis {
			waitFor(t, func() bool { return strings.HasPrefix(spec(), "10/5/") }, "x's quota stored in Redis")
		}
		time.Sleep(per + 100*time.Millisecond)
		return append(got, int64(holdN(t, b, kx, 40)))
	}
	want := []int64{5, 5}
	local, err := clientpool.New(table)
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	if got := scenario(local, local, false); !slices.Equal(got, want) {
		t.Errorf("one process: admitted %v, want %v", got, want)
	}
	if got := scenario(newRedisPool(t, table, c, "follow"), newRedisPool(t, table, c, "follow"), true); !slices.Equal(got, want) {
		t.Errorf("a fleet of two over Redis: admitted %v, want %v", got, want)
	}
}
