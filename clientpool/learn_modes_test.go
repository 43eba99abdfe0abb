package clientpool_test

import (
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// The tests of this file run one scenario of a rule with Learn in process
// and over Redis (a real redis-server) and compare what each admits: one
// process and a fleet are one product.

// quotaLearnRule is a rule with Learn and no Adapt, whose limit is
// unknown until a reply says it (X-Limit), with what remains
// (X-Remaining) and the ms until the server's window ends (X-Reset-Ms).
func quotaLearnRule(per time.Duration) clientpool.Rule {
	r := quotaAdaptRule(per)
	r.Adapt, r.Limit.N = nil, 0
	return r
}

// learnReply returns the headers of a reply naming limit n, r remaining,
// and a window ending resetMs ms from now.
func learnReply(n, r, resetMs int64) http.Header {
	return http.Header{"X-Limit": {strconv.FormatInt(n, 10)}, "X-Remaining": {strconv.FormatInt(r, 10)},
		"X-Reset-Ms": {strconv.FormatInt(resetMs, 10)}}
}

// inBothModes runs scenario on a Pool of table in process and on one over
// Redis (each on pools it makes with mk: one process, or a fleet over one
// Redis) and checks that both return want.
func inBothModes(t *testing.T, table clientpool.Table, want []int64, scenario func(t *testing.T, mk func() *clientpool.Pool) []int64) {
	t.Helper()
	local, err := clientpool.New(table)
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	inProc := scenario(t, func() *clientpool.Pool { return local })
	c := newClient(t, redistest.Start(t).Addr())
	overRedis := scenario(t, func() *clientpool.Pool { return newRedisPool(t, table, c, "modes") })
	if !slices.Equal(inProc, want) {
		t.Errorf("in process: %v, want %v", inProc, want)
	}
	if !slices.Equal(overRedis, want) {
		t.Errorf("over Redis: %v, want %v", overRedis, want)
	}
}

// newServerWindow makes the next reply of p's key ch a report of a new
// server window in both modes: a first reply teaches the limit (5) and
// a window of 300 ms, which ends (and the key's own window of per); a
// call admitted after it starts a window of the key's own, which the
// reply of a call half a Per later (what returns) replaces.
func newServerWindow(t *testing.T, p *clientpool.Pool, ch clientpool.Charge, per time.Duration) *clientpool.Ticket {
	t.Helper()
	tk := acquire(t, p, ch)
	tk.ObserveHeaders(learnReply(5, 4, 300))
	tk.Release()
	time.Sleep(max(per, 300*time.Millisecond+clientpool.ResetMargin) + 200*time.Millisecond)
	tk = acquire(t, p, ch)
	time.Sleep(per / 2)
	return tk
}

// TestLearnRemainingCappedBothModes: a reply that says more remains than
// its own limit (a hostile or broken header: limit 5, 50 remaining) is
// taken as the limit, in both modes: 5 calls in the server's window, not
// 50.
func TestLearnRemainingCappedBothModes(t *testing.T) {
	per := time.Second
	table := clientpool.Table{Rules: []clientpool.Rule{quotaLearnRule(per)}}
	inBothModes(t, table, []int64{5}, func(t *testing.T, mk func() *clientpool.Pool) []int64 {
		p := mk()
		ch := clientpool.Charge{Rule: "api", Key: "k", Weight: 1}
		tk := newServerWindow(t, p, ch, per)
		tk.ObserveHeaders(learnReply(5, 50, 60_000))
		tk.Release()
		time.Sleep(100 * time.Millisecond) // over Redis the report lands in the background
		return []int64{int64(holdN(t, p, ch, 60))}
	})
}

// TestLearnResetCappedBothModes: a reply whose window ends far away (a
// year) holds a spent budget for the rule's Per, a second (resets rounded
// up to whole seconds) and ResetMargin, in both modes: the wait told is
// that (within the test's slack), not less.
func TestLearnResetCappedBothModes(t *testing.T) {
	per := time.Second
	table := clientpool.Table{Rules: []clientpool.Rule{quotaLearnRule(per)}}
	cap := per + time.Second + clientpool.ResetMargin
	inBothModes(t, table, []int64{1}, func(t *testing.T, mk func() *clientpool.Pool) []int64 {
		p := mk()
		ch := clientpool.Charge{Rule: "api", Key: "k", Weight: 1}
		tk := newServerWindow(t, p, ch, per)
		tk.ObserveHeaders(learnReply(5, 0, int64(365*24*time.Hour/time.Millisecond)))
		tk.Release()
		time.Sleep(100 * time.Millisecond) // over Redis the report lands in the background
		tk, d, err := p.TryAcquire(ch)
		if err != nil || tk != nil {
			t.Fatalf("TryAcquire on a spent budget: %v, %v", tk, err)
		}
		if d < cap-300*time.Millisecond || d > cap {
			t.Logf("wait %v, want about %v", d, cap)
			return []int64{0}
		}
		return []int64{1}
	})
}

// TestLearnWindowRollCountsInFlightBothModes: a server's window that ends
// without a reply in the next one allows the learned N less every call
// still in flight (it may arrive in the new window), in both modes: with
// 2 calls in flight, 3 of a limit of 5.
func TestLearnWindowRollCountsInFlightBothModes(t *testing.T) {
	per := time.Second
	table := clientpool.Table{Rules: []clientpool.Rule{quotaLearnRule(per)}}
	inBothModes(t, table, []int64{3}, func(t *testing.T, mk func() *clientpool.Pool) []int64 {
		p := mk()
		ch := clientpool.Charge{Rule: "api", Key: "k", Weight: 1}
		tk := acquire(t, p, ch)
		tk.ObserveHeaders(learnReply(5, 4, 300))
		tk.Release()
		time.Sleep(100 * time.Millisecond) // the release reaches Redis
		a, b := acquire(t, p, ch), acquire(t, p, ch)
		defer a.Release()
		defer b.Release()
		time.Sleep(max(per, 300*time.Millisecond+clientpool.ResetMargin) + 200*time.Millisecond)
		return []int64{int64(holdN(t, p, ch, 40))}
	})
}

// TestAdaptiveLearnQuotaKeepsOthersLimit: under an adaptive rule with
// Learn, the reply that makes the rule count in the server's windows in
// one process does not store over the limit another process learned for
// a key it also holds. Process B learns key "b"'s limit, 3, from a reply
// naming its window; process A, which met "b" before at the level (5),
// then reads a reply naming a window for key "a": in the next window the
// fleet admits 3 calls on "b", as one process does (which learned both),
// not A's 5.
func TestAdaptiveLearnQuotaKeepsOthersLimit(t *testing.T) {
	per := time.Second
	table := clientpool.Table{Rules: []clientpool.Rule{quotaAdaptRule(per)}}
	inBothModes(t, table, []int64{3, 3}, func(t *testing.T, mk func() *clientpool.Pool) []int64 {
		pa, pb := mk(), mk()
		a := clientpool.Charge{Rule: "api", Key: "a", Weight: 1}
		b := clientpool.Charge{Rule: "api", Key: "b", Weight: 1}
		acquire(t, pa, b).Release() // A holds "b" at the level
		tk := acquire(t, pb, b)
		tk.ObserveHeaders(learnReply(3, 2, 300))
		tk.Release()
		tk = acquire(t, pa, a)
		tk.ObserveHeaders(learnReply(20, 19, 300))
		tk.Release()
		time.Sleep(max(per, 300*time.Millisecond+clientpool.ResetMargin) + 200*time.Millisecond)
		n := holdN(t, pa, b, 40) + holdN(t, pb, b, 40)
		var lim int64
		for _, k := range pa.Snapshot() {
			if k.Key == "b" {
				lim = k.Limit.N
			}
		}
		return []int64{int64(n), lim}
	})
}

// TestLearnWindowFollowsReportsBothModes: the end of the server's window
// a key keeps follows the replies of that window, in both modes: a reply
// that names an end later than the one the key kept (the key's first
// window, guessed at a Per from when it learned its limit, ends before the
// server's) moves it there, so that the key's window does not end (and
// refill to N) while the server's still holds what that reply said
// remains. Per 4 s: the first reply names a window ending in 300 ms; the
// next, 1.5 s later, 1 left until 2.5 s from then; 2.7 s later (past the
// window the key guessed, before the server's ends) 1 call is admitted,
// not 5.
func TestLearnWindowFollowsReportsBothModes(t *testing.T) {
	per := 4 * time.Second
	table := clientpool.Table{Rules: []clientpool.Rule{quotaLearnRule(per)}}
	inBothModes(t, table, []int64{1}, func(t *testing.T, mk func() *clientpool.Pool) []int64 {
		p := mk()
		ch := clientpool.Charge{Rule: "api", Key: "k", Weight: 1}
		firstWindowEnded(t, p, ch)
		tk := acquire(t, p, ch)
		tk.ObserveHeaders(learnReply(5, 1, 2500))
		tk.Release()
		time.Sleep(2700 * time.Millisecond)
		return []int64{int64(holdN(t, p, ch, 40))}
	})
}

// TestLearnFirstReplyNamesWindowBothModes: the first reply that names the
// server's window sets the key's window to it, in both modes, even when it
// ends sooner than a Per from then (over Redis the window the quota was
// stored with is a guess until a reply names one): once it has ended (and
// ResetMargin) a new window allows the learned N. Per 4 s, the first
// reply's window ends in 300 ms: 1.5 s later 5 calls are admitted.
func TestLearnFirstReplyNamesWindowBothModes(t *testing.T) {
	per := 4 * time.Second
	table := clientpool.Table{Rules: []clientpool.Rule{quotaLearnRule(per)}}
	inBothModes(t, table, []int64{5}, func(t *testing.T, mk func() *clientpool.Pool) []int64 {
		p := mk()
		ch := clientpool.Charge{Rule: "api", Key: "k", Weight: 1}
		firstWindowEnded(t, p, ch)
		return []int64{int64(holdN(t, p, ch, 40))}
	})
}

// TestLearnResetFarAwayBothModes: a reply naming a reset too far away for
// a time.Duration (epoch second 2^40, some 34,000 years on) and nothing
// remaining holds the key's window spent, in both modes. Over Redis the
// time to the reset plus ResetMargin wrapped below zero, the report was
// dropped and the fleet admitted 19 more where the server said 0 remain.
func TestLearnResetFarAwayBothModes(t *testing.T) {
	rule := quotaLearnRule(2 * time.Second)
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
	inBothModes(t, table, []int64{0}, func(t *testing.T, mk func() *clientpool.Pool) []int64 {
		p := mk()
		a := clientpool.Charge{Rule: "api", Key: "a", Weight: 1}
		tk := acquire(t, p, a)
		tk.ObserveHeaders(http.Header{"X-Limit": {"20"}, "X-Remaining": {"0"}, "X-Reset": {strconv.FormatInt(1<<40, 10)}})
		tk.Release()
		time.Sleep(50 * time.Millisecond) // over Redis the release lands in the background
		return []int64{int64(holdN(t, p, a, 40))}
	})
}

// firstWindowEnded has a call of ch on p learn the key's limit from a
// reply naming a server window of 300 ms (limit 5, 4 left), and waits
// until that window (and ResetMargin) has ended.
func firstWindowEnded(t *testing.T, p *clientpool.Pool, ch clientpool.Charge) {
	t.Helper()
	tk := acquire(t, p, ch)
	tk.ObserveHeaders(learnReply(5, 4, 300))
	tk.Release()
	time.Sleep(300*time.Millisecond + clientpool.ResetMargin + 200*time.Millisecond)
}
