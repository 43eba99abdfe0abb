package clientpool_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
	goredis "github.com/redis/go-redis/v9"
)

// TestAdaptiveLearnQuotaRemainingAboveLimit: a reply that says more
// remains in the server's window than the limit it names (remaining 100
// of 20) is taken at the limit, in process as over Redis: a report only
// tightens, and the budget of a window never exceeds its N (over Redis
// the first window of a key counts the reporting call too: 19).
func TestAdaptiveLearnQuotaRemainingAboveLimit(t *testing.T) {
	per := 2 * time.Second
	table := clientpool.Table{Rules: []clientpool.Rule{quotaAdaptRule(per)}}
	scenario := func(p *clientpool.Pool, remaining string) int64 {
		a := clientpool.Charge{Rule: "api", Key: "a", Weight: 1}
		tk := acquire(t, p, a)
		tk.ObserveHeaders(http.Header{"X-Limit": {"20"}, "X-Remaining": {remaining}, "X-Reset-Ms": {"1000"}})
		tk.Release()
		time.Sleep(50 * time.Millisecond) // over Redis the release lands in the background
		return int64(holdN(t, p, a, 200))
	}
	c := newClient(t, redistest.Start(t).Addr())
	for _, mode := range []string{"in process", "over Redis"} {
		var got []int64
		for _, remaining := range []string{"20", "100"} {
			var p *clientpool.Pool
			if mode == "in process" {
				local, err := clientpool.New(table)
				if err != nil {
					t.Fatal(err)
				}
				defer local.Close()
				p = local
			} else {
				p = newRedisPool(t, table, c, "above"+remaining)
			}
			got = append(got, scenario(p, remaining))
		}
		if got[1] != got[0] || got[0] > 20 || got[0] < 19 {
			t.Errorf("%s: admitted %d after 20 remaining of 20, %d after 100 remaining of 20: want the same, at most 20", mode, got[0], got[1])
		}
	}
}

// cmdCount counts the commands a go-redis client sends while on is set
// (from any goroutine: the pool's background ones too).
type cmdCount struct{ n, on *atomic.Int64 }

func (h cmdCount) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h cmdCount) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if h.on.Load() != 0 {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h cmdCount) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if h.on.Load() != 0 {
			h.n.Add(int64(len(cmds)))
		}
		return next(ctx, cmds)
	}
}

// TestAdaptiveLearnQuotaSwitchBounded: the reply that makes an adaptive
// rule a quota costs its caller a bounded number of round trips however
// many keys (attacker-chosen) the process holds: one key's cost never
// depends on how many keys exist elsewhere. The other keys follow at
// their next admission (a window of the rule's 5, as in process).
func TestAdaptiveLearnQuotaSwitchBounded(t *testing.T) {
	per := 2 * time.Second
	table := clientpool.Table{Rules: []clientpool.Rule{quotaAdaptRule(per)}}
	c := newClient(t, redistest.Start(t).Addr())
	p := newRedisPool(t, table, c, "many")
	const keys = 300
	for i := range keys {
		acquire(t, p, clientpool.Charge{Rule: "api", Key: "k" + strconv.Itoa(i), Weight: 1}).Release()
	}
	a := clientpool.Charge{Rule: "api", Key: "a", Weight: 1}
	tk := acquire(t, p, a)
	var n, on atomic.Int64
	c.AddHook(cmdCount{&n, &on})
	on.Store(1)
	start := time.Now()
	tk.ObserveHeaders(http.Header{"X-Limit": {"20"}, "X-Remaining": {"19"}, "X-Reset-Ms": {"1000"}})
	took := time.Since(start)
	on.Store(0)
	cmds := n.Load() // nothing else of the pool's is under way meanwhile
	tk.Release()
	if cmds > 10 {
		t.Errorf("the reply that made the rule a quota sent %d commands (took %v) with %d keys held: want a bounded number", cmds, took, keys)
	}
	time.Sleep(per + 100*time.Millisecond)
	if got := holdN(t, p, clientpool.Charge{Rule: "api", Key: "k7", Weight: 1}, 40); got != 5 {
		t.Errorf("a key held before the switch admitted %d in a new window, want the rule's 5", got)
	}
}

// TestAdaptiveLearnQuotaSwitchKeepsTheWindow: the calls a key's window
// counts under the level when its rule becomes a quota count in the
// key's first window under the quota too (the window invariant across
// the switch: no unit counted in neither): a key that made its 5 calls
// just before another key's reply named the server's window admits none
// until a Per has passed, then a window of the rule's 5, in process and
// over Redis alike.
func TestAdaptiveLearnQuotaSwitchKeepsTheWindow(t *testing.T) {
	per := 2 * time.Second
	table := clientpool.Table{Rules: []clientpool.Rule{quotaAdaptRule(per)}}
	scenario := func(p *clientpool.Pool) []int64 {
		a := clientpool.Charge{Rule: "api", Key: "a", Weight: 1}
		b := clientpool.Charge{Rule: "api", Key: "b", Weight: 1}
		var got []int64
		hold := func() { got = append(got, int64(holdN(t, p, b, 40))) }
		hold()
		tk := acquire(t, p, a)
		tk.ObserveHeaders(http.Header{"X-Limit": {"20"}, "X-Remaining": {"19"}, "X-Reset-Ms": {"1000"}})
		tk.Release()
		time.Sleep(50 * time.Millisecond) // over Redis the releases land in the background
		hold()
		hold()
		time.Sleep(per + 100*time.Millisecond)
		hold()
		return got
	}
	want := []int64{5, 0, 0, 5}
	inBothModes(t, table, want, func(_ *testing.T, mk func() *clientpool.Pool) []int64 { return scenario(mk()) })
}

// TestAdaptiveLearnQuotaSwitchKeepsPartOfTheWindow: as
// TestAdaptiveLearnQuotaSwitchKeepsTheWindow for a key whose window held
// 3 of its 5 when the rule became a quota: it admits 2 more, not 5, in
// process and over Redis alike (over Redis the key's quota, stored at its
// next admission, carries what its level's window counted).
func TestAdaptiveLearnQuotaSwitchKeepsPartOfTheWindow(t *testing.T) {
	per := 2 * time.Second
	table := clientpool.Table{Rules: []clientpool.Rule{quotaAdaptRule(per)}}
	scenario := func(p *clientpool.Pool) []int64 {
		a := clientpool.Charge{Rule: "api", Key: "a", Weight: 1}
		b := clientpool.Charge{Rule: "api", Key: "b", Weight: 1}
		var got []int64
		got = append(got, int64(holdN(t, p, b, 3)))
		tk := acquire(t, p, a)
		tk.ObserveHeaders(http.Header{"X-Limit": {"20"}, "X-Remaining": {"19"}, "X-Reset-Ms": {"1000"}})
		tk.Release()
		time.Sleep(50 * time.Millisecond) // over Redis the releases land in the background
		got = append(got, int64(holdN(t, p, b, 40)))
		time.Sleep(50 * time.Millisecond)
		got = append(got, int64(holdN(t, p, b, 40)))
		time.Sleep(per + 100*time.Millisecond)
		got = append(got, int64(holdN(t, p, b, 40)))
		return got
	}
	want := []int64{3, 2, 0, 5}
	inBothModes(t, table, want, func(_ *testing.T, mk func() *clientpool.Pool) []int64 { return scenario(mk()) })
}

// TestAdaptiveLearnQuotaSetLimitInAnotherProcess: SetLimit in a process
// that has seen no reply naming the server's window, on a rule whose key
// another process made a quota, succeeds as it does in one process after
// the switch, and sets the N of the windows of the keys it holds that
// learned no limit, for the fleet.
func TestAdaptiveLearnQuotaSetLimitInAnotherProcess(t *testing.T) {
	per := 2 * time.Second
	table := clientpool.Table{Rules: []clientpool.Rule{quotaAdaptRule(per)}}
	scenario := func(a, b *clientpool.Pool) []int64 {
		ka := clientpool.Charge{Rule: "api", Key: "a", Weight: 1}
		kc := clientpool.Charge{Rule: "api", Key: "c", Weight: 1}
		acquire(t, b, ka).Release() // b holds keys a and c, at their levels
		acquire(t, b, kc).Release()
		time.Sleep(per + 100*time.Millisecond)
		tk := acquire(t, a, ka)
		tk.ObserveHeaders(http.Header{"X-Limit": {"20"}, "X-Remaining": {"19"}, "X-Reset-Ms": {"1000"}})
		tk.Release()
		time.Sleep(50 * time.Millisecond)
		ok := int64(1)
		if err := b.SetLimit("api", window.Limit{N: 3, Per: per}); err != nil {
			t.Logf("SetLimit: %v", err)
			ok = 0
		}
		return []int64{ok, int64(holdN(t, a, kc, 40))}
	}
	want := []int64{1, 3}
	local, err := clientpool.New(table)
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	if got := scenario(local, local); !slices.Equal(got, want) {
		t.Errorf("one process: %v, want %v", got, want)
	}
	c := newClient(t, redistest.Start(t).Addr())
	if got := scenario(newRedisPool(t, table, c, "setl"), newRedisPool(t, table, c, "setl")); !slices.Equal(got, want) {
		t.Errorf("a fleet of two over Redis: %v, want %v", got, want)
	}
}

// TestAdaptiveLearnQuotaResetFarAway: a reply whose window ends so far
// away that the time until it does not fit a time.Duration (a hostile
// or broken header: Reset at the Unix second 2^40) still sets the
// budget it names (0 remaining), in a window of at most Per and a second
// from now, in process as over Redis: no call is admitted in that window.
func TestAdaptiveLearnQuotaResetFarAway(t *testing.T) {
	per := 2 * time.Second
	rule := quotaAdaptRule(per)
	rule.Learn = func(h http.Header, _ time.Time) (clientpool.Learned, bool) {
		n, err := strconv.ParseInt(h.Get("X-Limit"), 10, 64)
		if err != nil {
			return clientpool.Learned{}, false
		}
		rem, _ := strconv.ParseInt(h.Get("X-Remaining"), 10, 64)
		sec, _ := strconv.ParseInt(h.Get("X-Reset"), 10, 64)
		return clientpool.Learned{Limit: window.Limit{N: n}, Remaining: rem, Reset: time.Unix(sec, 0), Epoch: true}, true
	}
	table := clientpool.Table{Rules: []clientpool.Rule{rule}}
	scenario := func(p *clientpool.Pool) []int64 {
		a := clientpool.Charge{Rule: "api", Key: "a", Weight: 1}
		tk := acquire(t, p, a)
		tk.ObserveHeaders(http.Header{"X-Limit": {"20"}, "X-Remaining": {"0"}, "X-Reset": {strconv.FormatInt(1<<40, 10)}})
		tk.Release()
		time.Sleep(50 * time.Millisecond) // over Redis the release lands in the background
		return []int64{int64(holdN(t, p, a, 40))}
	}
	want := []int64{0}
	inBothModes(t, table, want, func(_ *testing.T, mk func() *clientpool.Pool) []int64 { return scenario(mk()) })
}

// TestAdaptiveLearnQuotaSwitchKeepsFixedWindows: as
// TestAdaptiveLearnQuotaSwitchKeepsPartOfTheWindow for a rule counted in
// fixed windows (window.NewFixedWindow, window.NewFixedCompletion): a key
// whose window held 3 of its 5 at the switch admits 2 more, in process
// and over Redis alike.
func TestAdaptiveLearnQuotaSwitchKeepsFixedWindows(t *testing.T) {
	per := 2 * time.Second
	for _, w := range []struct {
		name string
		make func(window.Limit) window.Policy
	}{{"fixed window", window.NewFixedWindow}, {"fixed completion", window.NewFixedCompletion}} {
		rule := quotaAdaptRule(per)
		rule.Window = w.make
		table := clientpool.Table{Rules: []clientpool.Rule{rule}}
		scenario := func(t *testing.T, p *clientpool.Pool) []int64 {
			// start early in a fixed window (aligned to the epoch), so
			// that the scenario stays within it
			for time.Now().UnixNano()%int64(per) > int64(100*time.Millisecond) {
				time.Sleep(5 * time.Millisecond)
			}
			a := clientpool.Charge{Rule: "api", Key: "a", Weight: 1}
			b := clientpool.Charge{Rule: "api", Key: "b", Weight: 1}
			var got []int64
			got = append(got, int64(holdN(t, p, b, 3)))
			tk := acquire(t, p, a)
			tk.ObserveHeaders(http.Header{"X-Limit": {"20"}, "X-Remaining": {"19"}, "X-Reset-Ms": {"1000"}})
			tk.Release()
			time.Sleep(50 * time.Millisecond) // over Redis the releases land in the background
			got = append(got, int64(holdN(t, p, b, 40)))
			time.Sleep(50 * time.Millisecond)
			return append(got, int64(holdN(t, p, b, 40)))
		}
		want := []int64{3, 2, 0}
		t.Run(w.name, func(t *testing.T) {
			inBothModes(t, table, want, func(t *testing.T, mk func() *clientpool.Pool) []int64 { return scenario(t, mk()) })
		})
	}
}

// TestAdaptiveLearnQuotaSwitchKeepsBuckets: as
// TestAdaptiveLearnQuotaSwitchKeepsPartOfTheWindow for a rule counted by
// a token bucket or GCRA (burst 5): a key that took 3 of its burst just
// before the switch admits 2 more, in process and over Redis alike.
func TestAdaptiveLearnQuotaSwitchKeepsBuckets(t *testing.T) {
	per := 2 * time.Second
	for _, w := range []struct {
		name string
		make func(window.Limit) window.Policy
	}{
		{"token bucket", func(l window.Limit) window.Policy { return window.NewTokenBucket(l, 5) }},
		{"GCRA", func(l window.Limit) window.Policy { return window.NewGCRA(l, 5) }},
	} {
		rule := quotaAdaptRule(per)
		rule.Window = w.make
		table := clientpool.Table{Rules: []clientpool.Rule{rule}}
		scenario := func(t *testing.T, p *clientpool.Pool) []int64 {
			a := clientpool.Charge{Rule: "api", Key: "a", Weight: 1}
			b := clientpool.Charge{Rule: "api", Key: "b", Weight: 1}
			var got []int64
			got = append(got, int64(holdN(t, p, b, 3)))
			tk := acquire(t, p, a)
			tk.ObserveHeaders(http.Header{"X-Limit": {"20"}, "X-Remaining": {"19"}, "X-Reset-Ms": {"1000"}})
			tk.Release()
			time.Sleep(50 * time.Millisecond) // over Redis the releases land in the background (a unit refills in 400 ms)
			got = append(got, int64(holdN(t, p, b, 40)))
			time.Sleep(50 * time.Millisecond)
			return append(got, int64(holdN(t, p, b, 40)))
		}
		want := []int64{3, 2, 0}
		t.Run(w.name, func(t *testing.T) {
			inBothModes(t, table, want, func(t *testing.T, mk func() *clientpool.Pool) []int64 { return scenario(t, mk()) })
		})
	}
}
