package remote

import (
	"context"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratesem/ratesem/internal/rspec"
)

// # Blocks (Config.Blocks)
//
// A block is one ordinary admission in Redis (its own token, through the
// batched path) of k calls' worth of a signature: a scope and the exact
// list of charges (rule, key, weight, spec) of a Decide, each charge
// admitted for k·Weight units. Decides of that signature then take calls
// from it locally (sub-calls: no round trip). A block stops handing out
// calls when its k are taken or its hold ends; it goes back to Redis when
// it stops AND every sub-call has ended: a settlement of the block to the
// units its sub-calls used (0 when none: the whole block refunded). Redis
// so counts the used units in flight from the block's admission to its
// return, and as ended at the return, after every sub-call's end: under a
// completion window (Completion, FixedCompletion) that is exact on the
// safe side (counted longer, never less). Other windows count starts, so
// their signatures bypass blocks.

// block is one block of calls taken from Redis for a signature.
type block struct {
	sig      *blockSig
	cs       []rspec.Charge // the signature's charges (one call's weights)
	call     *Call          // Redis's admission of the block (k·Weight per charge)
	k, used  int64          // calls in the block; calls handed out
	inflight int64          // sub-calls not yet ended
	sum      []int64        // units the ended sub-calls used, per charge
	end      time.Time      // the hold's end: no call handed out from then
	stopped  bool           // hands out no more calls
	returned bool           // its settlement is queued (or dropped)
	dropped  bool           // its settlement was dropped (Close)
	timer    *time.Timer
}

// blockSig is a signature's blocks: the one handing out calls, a fetch
// under way, a refusal's cool-down.
type blockSig struct {
	key      string
	cur      *block        // the block handing out calls, or nil
	fetching chan struct{} // closed when the fetch under way ends; nil when none
	cool     time.Time     // Redis refused a block: none asked before
}

// blockable returns how many calls a block of cs holds (Config.Blocks, fewer
// when a charge's capacity cannot take that many), or 0 when cs bypasses
// blocks: a window other than a completion window, a charge of
// rspec.Unknown's kind that would hold fewer than 2 calls.
func (e *Engine) blockable(cs []rspec.Charge) int64 {
	k := e.cfg.Blocks
	if k < 2 || len(cs) == 0 {
		return 0
	}
	for _, c := range cs {
		if c.Spec.Kind != rspec.Completion && c.Spec.Kind != rspec.FixedCompletion {
			return 0
		}
		if c.Weight > 0 {
			k = min(k, capacity(*c.Spec)/c.Weight)
		}
	}
	if k < 2 {
		return 0
	}
	return k
}

// sigKey names cs's signature: scope, and each charge's rule, key, weight
// and spec.
func sigKey(scope string, cs []rspec.Charge) string {
	var b strings.Builder
	b.WriteString(scope)
	for _, c := range cs {
		b.WriteByte(0)
		b.WriteString(c.Rule)
		b.WriteByte(0)
		b.WriteString(c.Key)
		b.WriteByte(0)
		b.WriteString(strconv.FormatInt(c.Weight, 10))
		s := c.Spec
		b.WriteByte(0)
		b.WriteString(strconv.Itoa(int(s.Kind)))
		b.WriteByte(',')
		b.WriteString(strconv.FormatInt(s.Limit.N, 10))
		b.WriteByte(',')
		b.WriteString(strconv.FormatInt(int64(s.Limit.Per), 10))
		b.WriteByte(',')
		b.WriteString(strconv.FormatInt(s.Concurrency, 10))
		b.WriteByte(',')
		b.WriteString(strconv.FormatInt(s.Burst, 10))
		b.WriteByte(',')
		b.WriteString(strconv.FormatInt(int64(s.Margin), 10))
		b.WriteByte(',')
		b.WriteString(strconv.Itoa(s.Blocks))
	}
	return b.String()
}

// viaBlock decides w from a block of its signature when it can: a call
// taken from the live block (no round trip), or from a block fetched now
// (one round trip; callers of the signature arriving meanwhile wait for
// it, then take from it). ok is false when w goes the ordinary way: its
// signature bypasses blocks, Redis is taken as unreachable or the
// fallback's window drains, a pause or refusal is known, or Redis refused
// the block (then for a hold none is asked: near the limit, calls are
// decided one by one).
func (e *Engine) viaBlock(ctx context.Context, w *waiter) (o Outcome, ok bool, err error) {
	k := e.blockable(w.cs)
	if k == 0 {
		return Outcome{}, false, nil
	}
	key := sigKey(w.scope, w.cs)
	for {
		now := time.Now()
		e.mu.Lock()
		if e.closed || e.down || e.gatedLocked(now) {
			e.mu.Unlock()
			return Outcome{}, false, nil
		}
		if err := ctx.Err(); err != nil { // as decide: no call for a caller gone
			e.mu.Unlock()
			return Outcome{}, true, err
		}
		if until, _ := e.knownLocked(w, now); !until.IsZero() {
			e.mu.Unlock()
			return Outcome{}, false, nil
		}
		if e.blocks == nil {
			e.blocks = map[string]*blockSig{}
		}
		s := e.blocks[key]
		if s == nil {
			if len(e.blocks) >= e.blockSweepAt {
				// Forget the signatures that hold nothing.
				maps.DeleteFunc(e.blocks, func(_ string, s *blockSig) bool {
					return s.cur == nil && s.fetching == nil && !now.Before(s.cool)
				})
				e.blockSweepAt = max(2*len(e.blocks), 64)
			}
			s = &blockSig{key: key}
			e.blocks[key] = s
		}
		if c := e.takeLocked(s, now); c != nil {
			e.mu.Unlock()
			return Outcome{Call: c}, true, nil
		}
		// takeLocked may have stopped a block past its hold and so
		// forgotten s: keep it, for a fetch into s must be seen.
		e.blocks[key] = s
		if now.Before(s.cool) {
			e.mu.Unlock()
			return Outcome{}, false, nil
		}
		if ch := s.fetching; ch != nil { // wait for the fetch under way
			e.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return Outcome{}, true, ctx.Err()
			case <-e.closeCtx.Done():
				return Outcome{}, true, ErrClosed
			}
		}
		ch := make(chan struct{})
		s.fetching = ch
		e.mu.Unlock()
		o, err := e.fetchBlock(ctx, w, s, k)
		e.mu.Lock()
		s.fetching = nil
		close(ch)
		e.mu.Unlock()
		if err != nil || o.Call != nil {
			return o, true, err
		}
		return Outcome{}, false, nil
	}
}

// fetchBlock asks Redis for a block of k calls of w's signature s (an
// ordinary admission of charges of k·Weight, never decided by the
// fallback) and, when admitted, makes it s's live block and takes w's call
// from it. A refusal sets s's cool-down (a hold) and returns no Call and
// no error; an error is the caller's (ctx.Err(), ErrClosed, a caller's
// error of Redis's).
func (e *Engine) fetchBlock(ctx context.Context, w *waiter, s *blockSig, k int64) (Outcome, error) {
	bw := &waiter{scope: w.scope, cs: make([]rspec.Charge, len(w.cs)), block: true}
	for i, c := range w.cs {
		c.Weight *= k
		bw.cs[i] = c
	}
	o, err := e.decide(ctx, bw)
	if testAfterFetch != nil {
		testAfterFetch()
	}
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case err != nil && (ctx.Err() != nil || err == ErrClosed):
		return Outcome{}, err
	case err != nil || o.Call == nil:
		// Refused (or an error of the block's weights: the ordinary way
		// tells the caller its own): calls go one by one for a hold.
		s.cool = now.Add(e.cfg.BlockHold)
		return Outcome{}, nil
	}
	end := now.Add(e.cfg.BlockHold)
	if we := markEnd(o.Call, w.cs); !we.IsZero() && we.Before(end) {
		end = we
	}
	if e.closed { // Close came during the round trip: cancel it in Redis
		c := o.Call
		c.done.Store(true)
		// A round trip Close waits for (pending); the lease covers it
		// when too many are under way.
		e.spawnLocked(func() { e.cancel(c.scope, c.cs, c.token, true) })
		return Outcome{}, ErrClosed
	}
	b := &block{sig: s, cs: w.cs, call: o.Call, k: k, sum: make([]int64, len(w.cs)), end: end}
	if old := s.cur; old != nil {
		e.stopLocked(old)
	}
	s.cur = b
	b.timer = time.AfterFunc(end.Sub(now), func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.stopLocked(b)
	})
	if err := ctx.Err(); err != nil { // the caller left: the block is the others'
		return Outcome{}, err
	}
	return Outcome{Call: e.takeLocked(s, now)}, nil
}

// testAfterFetch, when set, runs after a block's admission came back
// (tests only).
var testAfterFetch func()

// takeLocked hands out a call of s's live block, or returns nil when it
// has none to hand out (then s has no live block). e.mu must be held.
func (e *Engine) takeLocked(s *blockSig, now time.Time) *Call {
	b := s.cur
	if b == nil {
		return nil
	}
	if b.stopped || b.used >= b.k || !now.Before(b.end) {
		e.stopLocked(b)
		return nil
	}
	b.used++
	b.inflight++
	if b.used == b.k {
		e.stopLocked(b)
	}
	e.stats.InFlight++
	e.stats.Admitted++
	bc := b.call
	return &Call{e: e, scope: bc.scope, cs: b.cs, d: bc.d, seen: bc.seen, blk: b}
}

// stopLocked makes b hand out no more calls, and gives it back to Redis
// once its sub-calls have ended. e.mu must be held.
func (e *Engine) stopLocked(b *block) {
	if !b.stopped {
		b.stopped = true
		if b.timer != nil {
			b.timer.Stop()
		}
		if b.sig.cur == b {
			b.sig.cur = nil
			if b.sig.fetching == nil && !time.Now().Before(b.sig.cool) {
				delete(e.blocks, b.sig.key)
			}
		}
	}
	if b.inflight == 0 {
		e.returnLocked(b)
	}
}

// returnLocked queues b's settlement: each charge settled to the units
// its sub-calls used (0 for a block none used). e.mu must be held.
func (e *Engine) returnLocked(b *block) {
	if b.returned {
		return
	}
	b.returned = true
	c := b.call
	c.done.Store(true)
	c.actual = b.sum
	for i, ch := range c.cs {
		if b.sum[i] != ch.Weight {
			break
		}
		if i == len(c.cs)-1 {
			c.actual = nil // every call used at its weight: a plain release
		}
	}
	b.dropped = !e.enqueueLocked(c) // dropped after Close: the lease covers it
}

// endSub ends c, a sub-call of a block: locally, its units (actual's,
// or its weights) added to what the block gives back; the block goes back
// to Redis when it has stopped and this was its last sub-call.
func (e *Engine) endSub(c *Call, actual []int64) {
	b := c.blk
	e.mu.Lock()
	e.stats.InFlight--
	for i, ch := range b.cs {
		u := ch.Weight
		if actual != nil {
			u = min(max(actual[i], 0), rspec.MaxN) // as Settle takes it
		}
		b.sum[i] = min(b.sum[i]+u, rspec.MaxN) // saturated: never wraps
	}
	b.inflight--
	sent := c.sent // at once, when this end changes nothing in Redis
	if b.stopped || b.used >= b.k || !time.Now().Before(b.end) {
		moved := b.inflight == 0 && !b.returned
		if moved { // this end gives the block back: sent once its return is
			b.call.sent, sent = sent, nil
		}
		e.stopLocked(b)
		if moved && b.dropped {
			sent, b.call.sent = b.call.sent, nil
		}
	}
	e.mu.Unlock()
	if sent != nil {
		sent()
	}
}

// stopBlocksOfLocked stops the blocks with a charge on c's limiter in
// scope (SetLimit: its calls are charged under the new limit, another
// signature; a block of the old one would hold its unused calls until its
// hold ends). e.mu must be held.
func (e *Engine) stopBlocksOfLocked(scope string, c rspec.Charge) {
	for _, s := range e.blocks {
		if b := s.cur; b != nil && b.call.scope == scope && slices.ContainsFunc(b.cs, func(x rspec.Charge) bool {
			return x.Rule == c.Rule && x.Key == c.Key
		}) {
			e.stopLocked(b)
		}
	}
}

// stopScopeBlocksLocked stops the blocks of scope: Redis reported a loss
// of its state there (rspec.Decision.Lost), the blocks' units with it.
// e.mu must be held.
func (e *Engine) stopScopeBlocksLocked(scope string) {
	for _, s := range e.blocks {
		if b := s.cur; b != nil && b.call.scope == scope {
			e.stopLocked(b)
		}
	}
}

// stopBlocksLocked stops every block (Close): those idle go back to Redis
// now, the others when their last sub-call ends (after Close: dropped,
// the lease covers them). e.mu must be held.
func (e *Engine) stopBlocksLocked() {
	for _, s := range e.blocks {
		if s.cur != nil {
			e.stopLocked(s.cur)
		}
	}
}

// markEnd returns when, on this process's clock, the earliest window of
// c's marks ends (rspec.Decision.Marks: a fixed completion window's
// window, "w:d", w its index on Redis's clock); zero when c has no mark.
// A block hands out no call after it: a call taken from it carries the
// block's mark, and a server's count reported with a mark of an earlier
// window than the current one is dropped (rspec.Store.ReconcileAt), so a
// call taken in a later window would lose its report.
func markEnd(c *Call, cs []rspec.Charge) time.Time {
	var end time.Time
	for i, m := range c.d.Marks {
		ws, _, ok := strings.Cut(m, ":")
		w, err := strconv.ParseInt(ws, 10, 64)
		if !ok || err != nil || i >= len(cs) || cs[i].Spec == nil {
			continue
		}
		per := cs[i].Spec.Limit.Per
		for j, a := range c.d.Adopted {
			if a == i && j < len(c.d.AdoptedSpecs) && c.d.AdoptedSpecs[j].Limit.Per > 0 {
				per = c.d.AdoptedSpecs[j].Limit.Per
			}
		}
		us := per.Microseconds()
		if us <= 0 || w < 0 || w >= math.MaxInt64/us-1 {
			continue
		}
		d := (w+1)*us - c.d.Now.UnixMicro() // µs to the window's end: at most per
		if d > us {
			continue
		}
		at := c.seen.Add(time.Duration(d) * time.Microsecond)
		if end.IsZero() || at.Before(end) {
			end = at
		}
	}
	return end
}
