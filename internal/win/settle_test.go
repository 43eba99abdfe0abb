package win_test

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratesem/ratesem/internal/win"
	"github.com/ratesem/ratesem/window"
)

// settler is what the settle tests drive: a window that settles.
type settler interface {
	win.Policy
	window.Settler
}

// Each window, by hand: a refund makes room at once where the window still
// counts the call, a debit takes room from now on.
func TestSettleRefundAndDebit(t *testing.T) {
	l := win.Limit{N: 10, Per: time.Second}
	type step struct {
		now    time.Duration
		admit  int64 // units to try (0: settle instead)
		ok     bool
		at     time.Duration // settle: the call's start
		n, act int64         // settle: estimate and actual
	}
	admit := func(now time.Duration, n int64, ok bool) step { return step{now: now, admit: n, ok: ok} }
	settle := func(now, at time.Duration, n, act int64) step { return step{now: now, at: at, n: n, act: act} }
	cases := []struct {
		name  string
		p     settler
		steps []step
	}{
		{"completion refund", win.NewCompletion(l), []step{
			admit(0, 10, true), settle(0, 0, 10, 4), admit(0, 6, true), admit(0, 1, false),
			admit(time.Second, 5, false), admit(time.Second, 4, true), // the 4 units logged at 0 leave at 1s; 6 still in flight
		}},
		{"completion debit", win.NewCompletion(l), []step{
			admit(0, 5, true), settle(0, 0, 5, 12), admit(0, 1, false),
			admit(time.Second-1, 1, false), admit(time.Second, 10, true),
		}},
		{"sliding log refund", win.NewSlidingLog(l, 0), []step{
			admit(0, 10, true), settle(500*time.Millisecond, 0, 10, 3), admit(500*time.Millisecond, 7, true),
			admit(500*time.Millisecond, 1, false), admit(time.Second, 3, true), admit(time.Second, 1, false),
		}},
		{"sliding log debit", win.NewSlidingLog(l, 0), []step{
			admit(0, 4, true), settle(300*time.Millisecond, 0, 4, 9), admit(300*time.Millisecond, 1, true),
			admit(300*time.Millisecond, 1, false), admit(time.Second, 5, false), // the 5 debited at 300 ms stay
			admit(1300*time.Millisecond, 10, true),
		}},
		{"fixed refund same window", win.NewFixedWindow(l), []step{
			admit(0, 10, true), settle(900*time.Millisecond, 0, 10, 2), admit(900*time.Millisecond, 8, true),
			admit(900*time.Millisecond, 1, false),
		}},
		{"fixed refund next window is no refund", win.NewFixedWindow(l), []step{
			admit(900*time.Millisecond, 10, true), admit(time.Second, 10, true),
			settle(time.Second, 900*time.Millisecond, 10, 0), admit(time.Second, 1, false),
		}},
		{"fixed debit", win.NewFixedWindow(l), []step{
			admit(0, 2, true), settle(100*time.Millisecond, 0, 2, 30), admit(100*time.Millisecond, 1, false),
			admit(time.Second, 10, true),
		}},
		{"fixed completion refund across boundary", win.NewFixedCompletion(l), []step{
			admit(900*time.Millisecond, 10, true), settle(1100*time.Millisecond, 900*time.Millisecond, 10, 4),
			admit(1100*time.Millisecond, 7, false), admit(1100*time.Millisecond, 6, true), // carried in as 10, it counts 4 here
		}},
		{"sliding counter refund", win.NewSlidingWindowCounter(l), []step{
			admit(0, 10, true), settle(0, 0, 10, 1), admit(0, 9, true), admit(0, 1, false),
		}},
		{"sliding counter debit", win.NewSlidingWindowCounter(l), []step{
			admit(0, 1, true), settle(0, 0, 1, math.MaxInt64), admit(0, 1, false), admit(1999*time.Millisecond, 1, false),
			admit(3*time.Second, 10, true), // the debit saturates: gone after two windows
		}},
		{"sub-window refund and debit", win.NewSubWindowCounter(l, 10), []step{
			admit(0, 10, true), settle(50*time.Millisecond, 0, 10, 5), admit(50*time.Millisecond, 5, true),
			settle(60*time.Millisecond, 50*time.Millisecond, 5, 7), admit(60*time.Millisecond, 1, false),
		}},
		{"token bucket refund never beyond full", win.NewTokenBucket(l, 10), []step{
			admit(0, 3, true), settle(0, 0, 3, 0), admit(0, 10, true), admit(0, 1, false),
			settle(0, 0, 1, 0), admit(0, 1, true), admit(0, 1, false),
		}},
		{"token bucket debit is debt", win.NewTokenBucket(l, 10), []step{
			admit(0, 10, true), settle(0, 0, 10, 18), admit(899*time.Millisecond, 1, false), // 8 of debt: 0.9 s to one token
			admit(900*time.Millisecond, 1, true),
		}},
		{"token bucket debit saturates at one window's worth", win.NewTokenBucket(l, 10), []step{
			admit(0, 10, true), settle(0, 0, 10, 45), admit(1099*time.Millisecond, 1, false), // 35 of debt, kept at 10
			admit(1100*time.Millisecond, 1, true),
		}},
		{"gcra refund never before now", win.NewGCRA(l, 10), []step{
			admit(0, 10, true), settle(0, 0, 10, 0), admit(0, 10, true), admit(0, 1, false),
			settle(0, 0, 1000, 0), admit(0, 10, true), admit(0, 1, false), // a refund of 1000 fills, no more
		}},
		{"gcra debit", win.NewGCRA(l, 10), []step{
			admit(0, 10, true), settle(0, 0, 10, 18), admit(899*time.Millisecond, 1, false), admit(900*time.Millisecond, 1, true),
		}},
		{"gcra debit saturates at one window's worth", win.NewGCRA(l, 10), []step{
			admit(0, 10, true), settle(0, 0, 10, 45), admit(1099*time.Millisecond, 1, false), admit(1100*time.Millisecond, 1, true),
		}},
		{"pacer debit saturates at one window's worth", win.NewPacer(l), []step{
			admit(0, 1, true), settle(0, 0, 1, 45), admit(999*time.Millisecond, 1, false), admit(time.Second, 1, true),
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for i, s := range c.steps {
				if s.admit == 0 {
					c.p.Settle(at(s.now), at(s.at), s.n, s.act)
					continue
				}
				if _, ok := c.p.Admit(at(s.now), s.admit); ok != s.ok {
					t.Fatalf("step %d: Admit(t0+%v, %d) = %v, want %v", i, s.now, s.admit, ok, s.ok)
				}
			}
		})
	}
}

// settleEvent is one step of a settled schedule: an admission (start) or a
// settlement of an earlier admission.
type settleEvent struct {
	t      int64 // ns since t0
	call   int   // index of the admission
	settle bool
}

// settledCall is one admitted call of a schedule.
type settledCall struct {
	start, end int64 // ns since t0
	est, act   int64
	settled    bool
}

// runSettled drives p with a random schedule on virtual time: calls of
// random estimates start whenever p admits them, end after a random latency
// and settle at a random actual weight (a refund, a debit, or exact). It
// returns the calls and the events in the order p saw them.
func runSettled(p settler, l win.Limit, rng *rand.Rand, steps int) ([]settledCall, []settleEvent) {
	var calls []settledCall
	var evs []settleEvent
	var inflight []int
	var now int64
	per := int64(l.Per)
	for range steps {
		switch rng.IntN(4) {
		case 0:
		case 1:
			now += rng.Int64N(per / 50)
		default:
			now += rng.Int64N(per / 5)
		}
		// End the calls due, in random order.
		rng.Shuffle(len(inflight), func(i, j int) { inflight[i], inflight[j] = inflight[j], inflight[i] })
		kept := inflight[:0]
		for _, i := range inflight {
			c := &calls[i]
			if c.end > now {
				kept = append(kept, i)
				continue
			}
			switch rng.IntN(4) {
			case 0:
				c.act = c.est
			case 1:
				c.act = rng.Int64N(c.est + 1)
			default:
				c.act = rng.Int64N(2*c.est + 1)
			}
			c.end, c.settled = now, true
			p.Settle(at(time.Duration(now)), at(time.Duration(c.start)), c.est, c.act)
			evs = append(evs, settleEvent{t: now, call: i, settle: true})
		}
		inflight = kept
		est := 1 + rng.Int64N(min(p.Capacity(), l.N/3))
		if _, ok := p.Admit(at(time.Duration(now)), est); ok {
			calls = append(calls, settledCall{start: now, end: now + rng.Int64N(per/3), est: est})
			inflight = append(inflight, len(calls)-1)
			evs = append(evs, settleEvent{t: now, call: len(calls) - 1})
		}
	}
	return calls, evs
}

// The server-side invariant for settled weights. A server that counts each
// call at its arrival — its estimate until the call is settled, then its
// actual weight — in any window (t−Per, t] (sliding log, completion window)
// or in fixed windows aligned to the clock (fixed windows) never holds more
// than N at an arrival; a server that keeps a token bucket, charging the
// estimate at arrival and refunding (never beyond full) or debiting (into
// debt) the difference when the call is settled, always has the tokens an
// arrival needs. Checked on every admission of random schedules.
func TestSettledWeightsHoldAtServer(t *testing.T) {
	l := win.Limit{N: 100, Per: time.Second}
	windows := []struct {
		name   string
		make   func() settler
		fixed  bool // the server counts in windows aligned to the clock
		bucket int64
	}{
		{"completion", func() settler { return win.NewCompletion(l) }, false, 0},
		{"sliding log", func() settler { return win.NewSlidingLog(l, 0) }, false, 0},
		{"fixed window", func() settler { return win.NewFixedWindow(l) }, true, 0},
		{"fixed completion", func() settler { return win.NewFixedCompletion(l) }, true, 0},
		{"token bucket", func() settler { return win.NewTokenBucket(l, 60) }, false, 60},
		{"leaky bucket", func() settler { return win.NewLeakyBucket(l, 60) }, false, 60},
		{"gcra", func() settler { return win.NewGCRA(l, 60) }, false, 60},
	}
	for _, w := range windows {
		t.Run(w.name, func(t *testing.T) {
			var admitted, refunded, debited int64
			for seed := range uint64(40) {
				rng := rand.New(rand.NewPCG(seed, 12))
				calls, evs := runSettled(w.make(), l, rng, 600)
				var err error
				if w.bucket > 0 {
					err = checkBucket(calls, evs, l, w.bucket)
				} else {
					err = checkWindows(calls, evs, l, w.fixed)
				}
				if err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				for _, c := range calls {
					admitted += c.est
					if c.settled && c.act < c.est {
						refunded++
					} else if c.settled && c.act > c.est {
						debited++
					}
				}
			}
			if refunded == 0 || debited == 0 || admitted < 40*int64(l.N) {
				t.Fatalf("schedules too thin to test anything: %d units admitted, %d refunds, %d debits", admitted, refunded, debited)
			}
		})
	}
}

// checkWindows replays the counting server: at each admission j, the calls
// that arrived in j's window count their actual weight if settled by then,
// else their estimate.
func checkWindows(calls []settledCall, evs []settleEvent, l win.Limit, fixed bool) error {
	per := int64(l.Per)
	settledBy := make([]bool, len(calls))
	t0 := at(0).UnixNano()
	for _, e := range evs {
		if e.settle {
			settledBy[e.call] = true
			continue
		}
		j := calls[e.call]
		sum := j.est
		for i := range e.call {
			c := calls[i]
			in := c.start > j.start-per
			if fixed {
				in = floor(t0+c.start, per) == floor(t0+j.start, per)
			}
			if !in {
				continue
			}
			if settledBy[i] {
				sum += c.act
			} else {
				sum += c.est
			}
		}
		if sum > l.N {
			return fmt.Errorf("arrival at %v of %d units: the server counts %d > %d in its window", time.Duration(j.start), j.est, sum, l.N)
		}
	}
	return nil
}

// checkBucket replays a token bucket server in exact rational arithmetic.
func checkBucket(calls []settledCall, evs []settleEvent, l win.Limit, burst int64) error {
	tokens := big.NewRat(burst, 1)
	full := big.NewRat(burst, 1)
	var last int64
	for _, e := range evs {
		// refill (e.t − last)·N/Per, capped at the burst
		tokens.Add(tokens, big.NewRat((e.t-last)*l.N, int64(l.Per)))
		if tokens.Cmp(full) > 0 {
			tokens.Set(full)
		}
		last = e.t
		c := calls[e.call]
		if e.settle {
			tokens.Add(tokens, big.NewRat(c.est-c.act, 1))
			if tokens.Cmp(full) > 0 {
				tokens.Set(full)
			}
			continue
		}
		if tokens.Cmp(big.NewRat(c.est, 1)) < 0 {
			return fmt.Errorf("arrival at %v of %d units: the server's bucket holds %s", time.Duration(c.start), c.est, tokens.FloatString(3))
		}
		tokens.Sub(tokens, big.NewRat(c.est, 1))
	}
	return nil
}

func floor(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// Absurd settlements: an actual of math.MaxInt64 makes every window full
// without wrapping (the next admission is refused, none panics), a negative
// actual is a refund of the whole estimate and never more, and the
// completion window panics on more units than are in flight (a caller's
// bug, as in Done).
func TestSettleHostile(t *testing.T) {
	l := win.Limit{N: 10, Per: time.Second}
	makers := settlerMakers(l)
	delete(makers, "pacer")
	for name, mk := range makers {
		t.Run(name, func(t *testing.T) {
			p := mk()
			mustAdmit(t, p, 0, 1, true)
			p.Settle(at(0), at(0), 1, math.MaxInt64)
			for range 2 { // and calls of estimate 0 on the saturated window
				if _, ok := p.Admit(at(time.Millisecond), 1); ok {
					t.Fatal("admitted after a debit of math.MaxInt64")
				}
				mustAdmit(t, p, time.Millisecond, 0, true)
				p.Settle(at(time.Millisecond), at(time.Millisecond), 0, math.MaxInt64)
			}
			q := mk()
			mustAdmit(t, q, 0, 4, true)
			q.Settle(at(0), at(0), 4, -7)
			mustAdmit(t, q, 0, 10, true)
			mustAdmit(t, q, 0, 1, false)
		})
	}
	mustPanic(t, func() { win.NewCompletion(l).Settle(at(0), at(0), 1, 1) })
}

// Issue 18: one hostile reply must not brick a key. A debit of 2^62−1
// units (an LLM reply's usage.total_tokens) saturates at "full until the
// window moves": every window refuses at once, names a retry instant no
// later than about two Per from the debit, and admits a full window's
// worth by then; a lowered limit (SetLimit, a learned limit) leaves the
// buckets at most one Per of debt at the new rate. On the base commit the
// token bucket, leaky bucket and GCRA were 2^62 units in debt (the next
// call "in 2562047h").
func TestSettleHugeDebitWaitIsBounded(t *testing.T) {
	l := win.Limit{N: 10, Per: time.Second}
	makers := settlerMakers(l)
	const bound = 2*time.Second + 100*time.Millisecond // two Per (the sliding counter's previous window) and a unit's refill
	for name, mk := range makers {
		t.Run(name, func(t *testing.T) {
			for _, debit := range []int64{1<<62 - 1, math.MaxInt64, 1000 * l.N} {
				p := mk()
				mustAdmit(t, p, 0, 1, true)
				p.Settle(at(time.Millisecond), at(0), 1, debit)
				retry, ok := p.Admit(at(time.Millisecond), 1)
				if ok {
					t.Fatalf("debit %d: admitted at once", debit)
				}
				if retry.IsZero() || retry.Sub(t0) > bound {
					t.Fatalf("debit %d: next unit at %v, want within %v", debit, retry.Sub(t0), bound)
				}
				if _, ok := p.Admit(retry, 1); !ok {
					t.Fatalf("debit %d: refused at the retry instant %v it named", debit, retry.Sub(t0))
				}
				p.Done(retry, 1)
				mustAdmit(t, p, 3*time.Second+bound, p.Capacity(), true)
			}
			// A busy bucket whose limit is lowered a thousandfold (a
			// learned limit of 1 for a key that used 10 000 per second)
			// refuses for about one Per of the new rate, not 10 000.
			big := win.Limit{N: 10000, Per: time.Second}
			q := map[string]func() settler{
				"token bucket": func() settler { return win.NewTokenBucket(big, 0) },
				"leaky bucket": func() settler { return win.NewLeakyBucket(big, 0) },
				"gcra":         func() settler { return win.NewGCRA(big, 0) },
				"pacer":        func() settler { return win.NewPacer(big) },
			}[name]
			if q == nil {
				return
			}
			p := q()
			for p.Capacity() > 0 {
				if _, ok := p.Admit(at(0), p.Capacity()); ok {
					break
				}
			}
			if _, ok := p.Admit(at(0), 1); ok {
				t.Fatal("admitted past a full window")
			}
			p.SetLimit(at(0), win.Limit{N: 1, Per: time.Second})
			retry, ok := p.Admit(at(0), 1)
			if ok || retry.IsZero() || retry.Sub(t0) > 2*time.Second {
				t.Fatalf("limit lowered to 1 per second: next unit (%v, %v), want within 2s", retry.Sub(t0), ok)
			}
		})
	}
}

// settlerMakers returns a maker of each window of limit l (buckets and
// GCRA with a burst of 10), by name.
func settlerMakers(l win.Limit) map[string]func() settler {
	return map[string]func() settler{
		"completion":       func() settler { return win.NewCompletion(l) },
		"sliding log":      func() settler { return win.NewSlidingLog(l, 0) },
		"fixed":            func() settler { return win.NewFixedWindow(l) },
		"fixed completion": func() settler { return win.NewFixedCompletion(l) },
		"sliding counter":  func() settler { return win.NewSlidingWindowCounter(l) },
		"sub-window":       func() settler { return win.NewSubWindowCounter(l, 4) },
		"token bucket":     func() settler { return win.NewTokenBucket(l, 10) },
		"leaky bucket":     func() settler { return win.NewLeakyBucket(l, 10) },
		"gcra":             func() settler { return win.NewGCRA(l, 10) },
		"pacer":            func() settler { return win.NewPacer(l) },
	}
}
