package clientpool_test

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/window"
)

// The skew an epoch reset is read with grows with a reply's latency (and
// the Date's truncation), so two replies of one server window read its end
// more than a second apart when the earlier one in the server's order
// comes back slowly. That is not a new window: the slow reply's higher
// remaining must not set the budget anew. An honest server, 10 per window:
// X (9 left), then A (8) and B (7) counted in that order; B's reply comes
// back at once, A's 1.5 s later. The server has 7 left: a crawl may start
// 7 more, not 8 (on the base commit the slow reply started a "new window"
// of 8 − 0 unreported: 8 started and the server rejected one).
func TestReview4SlowReplyIsNotANewWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{epochRule()})
		c := clientpool.Charge{Rule: "core", Weight: 1}
		t0 := time.Now() // a whole second: Date truncates nothing
		end := t0.Add(10 * time.Second)
		x := acquire(t, p, c)
		x.ObserveHeaders(epochHeader(10, 9, end, t0))
		x.Release()
		a, b := acquire(t, p, c), acquire(t, p, c)
		time.Sleep(300 * time.Millisecond)
		b.ObserveHeaders(epochHeader(10, 7, end, t0))
		b.Release()
		time.Sleep(1200 * time.Millisecond)
		a.ObserveHeaders(epochHeader(10, 8, end, t0))
		a.Release()
		startsAtOnce(t, p, c, 7, 10)
	})
}

// quotaServer is an honest server counting in windows of per aligned to
// its clock, which is the host's plus offset: it rejects a call that
// arrives with nothing left, and answers with X-Limit, X-Remaining, the
// window's end as epoch seconds (X-Reset-At) and a Date truncated to the
// second.
type quotaServer struct {
	mu       sync.Mutex
	n        int64
	per      time.Duration
	offset   time.Duration
	win      int64
	count    int64
	rejected int
	served   int
	raise    func() bool // the limit grows by 1 before this reply (a quota raised mid-window)
	// rolling: a window starts at the first call after the last one ended
	// (GitHub's), instead of being aligned to the clock; end is its end
	rolling bool
	end     time.Time
	// delay: the reset is sent as whole seconds to wait, rounded down
	// (X-RateLimit-Reset read by LearnRateLimit), not an epoch instant
	delay bool
}

func (s *quotaServer) serve() http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	at := time.Now().Add(s.offset)
	idx := at.UnixNano() / int64(s.per)
	end := time.Unix(0, (idx+1)*int64(s.per))
	if s.rolling {
		if !at.Before(s.end) {
			s.end, s.count = at.Add(s.per), 0
		}
		end = s.end
	} else if idx != s.win {
		s.win, s.count = idx, 0
	}
	if s.raise != nil && s.raise() {
		s.n++
	}
	if s.count >= s.n {
		s.rejected++
	} else {
		s.count++
		s.served++
	}
	if s.delay {
		h := rlHeader(s.n, s.n-s.count, time.Time{})
		h.Set("X-RateLimit-Reset", strconv.FormatInt(int64(max(end.Sub(at), 0)/time.Second), 10))
		return h
	}
	// epoch seconds, rounded down (epochHeader): ResetMargin's case
	return epochHeader(s.n, s.n-s.count, end, at)
}

// An honest server model, many seeds: windows of 10 s, 3 to 30 calls per
// window, host clocks from 2 s behind to 2 s ahead of the server's, 1 to
// 8 workers, latencies up to 2 s each way drawn per call (replies come
// back in any order), a limit raised now and then mid-window (remaining
// then grows) on every other seed, windows aligned to the clock or
// starting at the first call after the last one ended (GitHub's, its end
// rounded down to the second) on every other pair, resets sent as epoch
// instants or as seconds to wait (rounded down) on every other four: the
// server never rejects a call.
func TestReview4QuotaHonestServerModel(t *testing.T) {
	seeds := 120
	if testing.Short() {
		seeds = 20
	}
	total := 0
	for seed := range seeds {
		r := rand.New(rand.NewPCG(uint64(seed), 4))
		s := &quotaServer{
			n:      3 + r.Int64N(28),
			per:    10 * time.Second,
			offset: time.Duration(r.Int64N(int64(4*time.Second))) - 2*time.Second,
		}
		if seed%2 == 1 {
			s.raise = func() bool { return r.IntN(20) == 0 }
		}
		s.rolling = seed%4 >= 2
		s.delay = seed%8 >= 4
		rule := epochRule()
		if s.delay {
			rule.Learn = clientpool.LearnRateLimit("X-RateLimit-", "", true)
		}
		workers := 1 + r.IntN(8)
		maxLat := time.Duration(r.Int64N(int64(2 * time.Second)))
		lats := make([]time.Duration, 4096)
		for i := range lats {
			lats[i] = time.Duration(r.Int64N(int64(maxLat) + 1))
		}
		synctest.Test(t, func(t *testing.T) {
			p := newPool(t, []clientpool.Rule{rule})
			c := clientpool.Charge{Rule: "core", Weight: 1}
			var wg sync.WaitGroup
			var next atomic.Int64
			stop := time.Now().Add(2 * time.Minute)
			for range workers {
				wg.Go(func() {
					for time.Now().Before(stop) {
						tk, err := p.Acquire(context.Background(), c)
						if err != nil {
							t.Error(err)
							return
						}
						i := next.Add(2)
						time.Sleep(lats[i%int64(len(lats))])
						h := s.serve()
						time.Sleep(lats[(i+1)%int64(len(lats))])
						tk.ObserveHeaders(h)
						tk.Release()
					}
				})
			}
			wg.Wait()
		})
		if s.rejected > 0 {
			t.Fatalf("seed %d: N=%d offset %v workers %d latency ≤ %v: the server rejected %d of %d", seed, s.n, s.offset, workers, maxLat, s.rejected, s.rejected+s.served)
		}
		total += s.served
	}
	t.Logf("%d calls served, none rejected", total)
}

// A report that contradicts the key's window (it ends more than the
// margins earlier) and leaves the budget where it is still says the
// lowest remaining the server counted: a later reply with more left (an
// earlier one in the server's order) must not read as the latest and give
// budget back. Here the skew a slow reply measured (3.5 s) is replaced, a
// Per later, by a fast reply's (0.7 s): C's reply of 0 left reads the
// window ending 2.8 s earlier than the key keeps (contradicting), then B's
// slow reply of 1 left (counted before C) arrives. The server has nothing
// left until its window ends at 20 s; on the base commit B's reply gave
// its unit back: one more call started and was rejected.
func TestReview4ContradictingReportKeepsItsLow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{epochRule()})
		c := clientpool.Charge{Rule: "core", Weight: 1}
		t0 := time.Now() // the server's clock too; its windows end at 10 s, 20 s
		at := func(d time.Duration) { time.Sleep(time.Until(t0.Add(d))) }
		sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
		at(sec(6))
		w := acquire(t, p, c)
		at(sec(9.5)) // served at 6 s, back at 9.5 s: skew 3.5 s
		w.ObserveHeaders(epochHeader(3, 2, t0.Add(sec(10)), t0.Add(sec(6))))
		w.Release()
		at(sec(14.5)) // the key's window (10 s + 3.5 s + the margin) has ended
		a := acquire(t, p, c)
		at(sec(15.2))
		a.ObserveHeaders(epochHeader(3, 2, t0.Add(sec(20)), t0.Add(sec(15))))
		a.Release()
		b, cc := acquire(t, p, c), acquire(t, p, c) // B served at 15.3 s (1 left), C at 19.6 s (0)
		at(sec(19.7))
		cc.ObserveHeaders(epochHeader(3, 0, t0.Add(sec(20)), t0.Add(sec(19))))
		cc.Release()
		at(sec(19.8))
		b.ObserveHeaders(epochHeader(3, 1, t0.Add(sec(20)), t0.Add(sec(15))))
		b.Release()
		var held []*clientpool.Ticket
		if tryAcquire(p, c, &held) {
			t.Fatal("a call started at 19.8 s with nothing left at the server until 20 s")
		}
	})
}

// Hostile replies, many seeds: limits changing every reply (0, 1,
// math.MaxInt64), remaining growing within a window, resets jumping back
// and forth (past, now, far future, epoch and delay forms), Dates far in
// the future and the past, malformed or absent. Every wait a reply causes
// is capped: a call alone on the key starts within the rule's Per, a
// second and ResetMargin of the last reply.
func TestReview4HostileQuotaRepliesCapWaits(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 30
	}
	const per = 10 * time.Second
	limit := per + time.Second + clientpool.ResetMargin
	for seed := range seeds {
		r := rand.New(rand.NewPCG(uint64(seed), 44))
		synctest.Test(t, func(t *testing.T) {
			rule := epochRule()
			if seed%3 == 0 {
				rule.Learn = clientpool.LearnRateLimit("X-RateLimit-", "", true)
			}
			p := newPool(t, []clientpool.Rule{rule})
			c := clientpool.Charge{Rule: "core", Weight: 1}
			nums := []string{"0", "1", "2", "9", "10", "1000", "9223372036854775807", "99999999999999999999", "-1", "x", ""}
			pick := func() string {
				if r.IntN(2) == 0 {
					return strconv.FormatInt(r.Int64N(20), 10)
				}
				return nums[r.IntN(len(nums))]
			}
			for i := range 60 {
				start := time.Now()
				tk, err := p.Acquire(context.Background(), c)
				if err != nil {
					t.Fatal(err)
				}
				if w := time.Since(start); w > limit {
					t.Fatalf("seed %d call %d waited %v, more than %v", seed, i, w, limit)
				}
				time.Sleep(time.Duration(r.Int64N(int64(3 * time.Second))))
				now := time.Now()
				h := http.Header{}
				for _, k := range []string{"X-Limit", "X-RateLimit-Limit"} {
					h.Set(k, pick())
				}
				for _, k := range []string{"X-Remaining", "X-RateLimit-Remaining"} {
					h.Set(k, pick())
				}
				var reset string
				switch r.IntN(6) {
				case 0:
					reset = strconv.FormatInt(now.Add(time.Duration(r.Int64N(int64(time.Hour)))-30*time.Minute).Unix(), 10)
				case 1:
					reset = strconv.FormatInt(now.Add(time.Duration(r.Int64N(int64(per)))).Unix(), 10)
				case 2:
					reset = pick()
				case 3:
					reset = strconv.FormatInt(r.Int64N(1<<40), 10)
				default:
					reset = strconv.FormatInt(r.Int64N(30), 10)
				}
				h.Set("X-Reset-At", reset)
				h.Set("X-RateLimit-Reset", reset)
				switch r.IntN(5) {
				case 0:
					h.Set("Date", now.Add(time.Duration(r.Int64N(1<<62))).UTC().Format(http.TimeFormat))
				case 1:
					h.Set("Date", now.Add(-time.Duration(r.Int64N(1<<62))).UTC().Format(http.TimeFormat))
				case 2:
					h.Set("Date", "garbage")
				case 3:
					h.Set("Date", now.Add(time.Duration(r.Int64N(int64(20*time.Second)))-10*time.Second).UTC().Format(http.TimeFormat))
				}
				tk.ObserveHeaders(h)
				tk.Release()
			}
		})
	}
}

// The in-process form of TestReview4RedisReportAfterRelease: a report read
// after Release is its call's; 20 own and 50 from elsewhere of 100.
func TestReview4ReportAfterRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{fixedUsageRule(100)})
		a := acquire(t, p, clientpool.Charge{Rule: "ip", Weight: 10})
		b := acquire(t, p, clientpool.Charge{Rule: "ip", Weight: 10})
		a.Release()
		a.ObserveHeaders(used(60))
		if got := p.Snapshot()[0].Used; got != 70 {
			t.Fatalf("Used = %d, want 70 (20 own, 50 from elsewhere)", got)
		}
		b.Release()
	})
}

// An epoch reset names the server's window itself: a reply with the same
// reset as the key's window is of that window however late it comes back
// (here 6 s, more than half the rule's 10 s Per, so that the skew it
// measures moves the window's end on the host's clock past
// newWindowGap). N = 5: X (4 left), then A (3) and B (2) counted in that
// order; B's reply comes back at once, A's 6 s after it was served. The
// server has 2 left, and B's and A's units are counted: 2 more start,
// not 3 (on the base commit, and with newWindowGap alone, A's reply read
// as a new window of 3 less nothing unreported).
func TestReview4SlowReplySameEpochReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{epochRule()})
		c := clientpool.Charge{Rule: "core", Weight: 1}
		t0 := time.Now()
		end := t0.Add(9 * time.Second)
		x := acquire(t, p, c)
		x.ObserveHeaders(epochHeader(5, 4, end, t0))
		x.Release()
		a, b := acquire(t, p, c), acquire(t, p, c) // served at 0 s (A) and 0.1 s (B)
		time.Sleep(100 * time.Millisecond)
		b.ObserveHeaders(epochHeader(5, 2, end, t0))
		b.Release()
		time.Sleep(5900 * time.Millisecond)
		a.ObserveHeaders(epochHeader(5, 3, end, t0))
		a.Release()
		startsAtOnce(t, p, c, 2, 5)
	})
}

// The same after the key rolled to a window of its own: the first reply
// of the server's new window names it, and a slow reply of that window
// is of it too. N = 5, windows [0, 5 s) and [5 s, 15 s) at the server;
// the key rolls at 6.5 s and starts A and B; B's reply (3 left) comes
// back at once, A's (4 left) 6.5 s after it was served. The server has 3
// left: 3 start, not 4 (with the epoch kept only from a report of a new
// window, A's reply read as a new window).
func TestReview4SlowReplyAfterTheKeyRolled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{epochRule()})
		c := clientpool.Charge{Rule: "core", Weight: 1}
		t0 := time.Now()
		at := func(d time.Duration) { time.Sleep(time.Until(t0.Add(d))) }
		x := acquire(t, p, c)
		x.ObserveHeaders(epochHeader(5, 4, t0.Add(5*time.Second), t0))
		x.Release()
		at(6500 * time.Millisecond)
		a, b := acquire(t, p, c), acquire(t, p, c)
		end := t0.Add(15 * time.Second)
		at(6700 * time.Millisecond)
		b.ObserveHeaders(epochHeader(5, 3, end, t0.Add(6*time.Second)))
		b.Release()
		at(13 * time.Second)
		a.ObserveHeaders(epochHeader(5, 4, end, t0.Add(6*time.Second)))
		a.Release()
		startsAtOnce(t, p, c, 3, 5)
	})
}

// A reset of 0 seconds to wait (the window ends within the second, the
// delay rounded down) is a report of the window, not "no reset": its
// remaining counts. N = 10 per 10 s: X (9 left, 5 s to wait), then at
// 4.5 s A and B; B's reply says 7 left and 0 s, A's (served before B)
// 8 left and 1 s. The server has 7 left: 7 start, not 8 (on the base
// commit B's report was dropped as one without its window, and A's read
// as the latest).
func TestReview4ZeroDelayResetCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{{
			Name:  "core",
			Limit: window.Limit{Per: 10 * time.Second},
			Learn: clientpool.LearnRateLimit("X-RateLimit-", "", true),
		}})
		c := clientpool.Charge{Rule: "core", Weight: 1}
		delayHeader := func(limit, remaining, seconds int64) http.Header {
			h := rlHeader(limit, remaining, time.Time{})
			h.Set("X-RateLimit-Reset", strconv.FormatInt(seconds, 10))
			return h
		}
		x := acquire(t, p, c)
		x.ObserveHeaders(delayHeader(10, 9, 5))
		x.Release()
		time.Sleep(4500 * time.Millisecond)
		a, b := acquire(t, p, c), acquire(t, p, c)
		time.Sleep(100 * time.Millisecond)
		b.ObserveHeaders(delayHeader(10, 7, 0))
		b.Release()
		time.Sleep(100 * time.Millisecond)
		a.ObserveHeaders(delayHeader(10, 8, 1))
		a.Release()
		startsAtOnce(t, p, c, 7, 10)
	})
}

// A second report of one call (read as Reconcile reads a count: every
// call of the window counted, those still on their way too) must not
// loosen the bound the first reports set for the give-backs that follow.
// N = 100, 40 from elsewhere: B (10) counted at 50, A (10) at 60; A's
// report first (50 from elsewhere at most), C (10) starts, A's report
// again, then B's: the server counted A and B, so 40 from elsewhere, and
// the window counts 30 own + 40. On the base commit the repeated report
// took C as counted, and B's report gave back down to 30 from elsewhere:
// a call of 31 started where the server would see 101.
func TestReview4RepeatedReportKeepsTheBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{fixedUsageRule(100)})
		a := acquire(t, p, clientpool.Charge{Rule: "ip", Weight: 10})
		b := acquire(t, p, clientpool.Charge{Rule: "ip", Weight: 10})
		a.ObserveHeaders(used(60))
		c := acquire(t, p, clientpool.Charge{Rule: "ip", Weight: 10})
		a.ObserveHeaders(used(60))
		b.ObserveHeaders(used(50))
		if got := p.Snapshot()[0].Used; got < 70 {
			t.Fatalf("Used = %d, want at least 70 (30 own, 40 from elsewhere)", got)
		}
		a.Release()
		b.Release()
		c.Release()
	})
}
