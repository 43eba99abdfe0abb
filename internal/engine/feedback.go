package engine

import (
	"fmt"
	"net/http"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/sat"
	"github.com/ratesem/ratesem/internal/win"

	"github.com/ratesem/ratesem/window"
)

// Reconcile takes in the server's own count for (rule, key): used units in its
// current window. When the server counts more than the local window does
// (another process spends from the same limit), the local window counts the
// difference as spent now, so the local budget shrinks for the rest of that
// window; a server count at or below the local one changes nothing, so feedback
// never loosens the local accounting. The difference taken in is at most the
// rule's limit (N, or the window's capacity when larger): a count beyond it, up
// to math.MaxInt64, means "full until the window moves", never a wrap. A
// negative used is ignored. Windows that do not implement window.Reconciler
// ignore it. It never blocks; it returns an error matching
// ratesem.ErrUnknownRule for an unknown rule, and one matching
// ratesem.ErrTooManyKeys when the key is new and the pool is full
// (WithMaxKeys).
func (p *Engine) Reconcile(rule, key string, used int64) error {
	rs, ok := p.rules[rule]
	if !ok {
		return fmt.Errorf("%w %q", ratesem.ErrUnknownRule, rule)
	}
	if used < 0 {
		return nil
	}
	return p.book.reconcile(rs, key, used)
}

// reconcile is Reconcile in process, for used ≥ 0.
func (b *inProc) reconcile(rs *ruleState, key string, used int64) error {
	p := (*Engine)(b)
	extra, err := p.reconcile(rs, key, used)
	p.flushEvicted()
	p.emitReconciled(rs.Name, key, extra) // 0 on an error
	return err
}

// emitReconciled reports that the window of (rule, key) took in extra
// units on the server's word, when extra > 0.
func (p *Engine) emitReconciled(rule, key string, extra int64) {
	if extra > 0 {
		p.emit(ratesem.Event{Kind: ratesem.Reconciled, Rule: rule, Key: key, Weight: extra})
	}
}

func (p *Engine) reconcile(rs *ruleState, key string, used int64) (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock() // a window that panics must not leave the pool locked
	now := p.now()
	l, err := p.limiterLocked(rs, key, now)
	if err != nil {
		return 0, err
	}
	if delta, ok := win.Report(l.policy, now, 0, used, 0, 0, false); ok {
		return p.reportedLocked(l, delta, now), nil
	}
	r, ok := l.policy.(window.Reconciler)
	if !ok {
		return 0, nil
	}
	return p.consumeLocked(l, r, used-r.Used(now), now), nil // used ≥ 0, Used ≥ 0: no overflow
}

// reportedLocked finishes a usage report that changed l's window by delta
// units (win.Report): units taken in are counted as reconciled, and
// units given back (a report that bounds the units from elsewhere lower
// than an earlier one did) let l's waiters try again at once. It returns
// the units taken in (0 when none).
func (p *Engine) reportedLocked(l *limiter, delta int64, now time.Time) int64 {
	if delta == 0 {
		return 0
	}
	p.touchLocked(l, now)
	if delta < 0 {
		if l.q != nil {
			p.markPending(l.q)
			p.settleLocked(now)
		}
		return 0
	}
	fb := l.feedback()
	fb.reconciled = sat.Add(fb.reconciled, delta)
	return delta
}

// consumeLocked makes l's window count extra more units at now, clamped to
// the rule's limit; it returns the units counted (0 when extra ≤ 0).
func (p *Engine) consumeLocked(l *limiter, r window.Reconciler, extra int64, now time.Time) int64 {
	if extra <= 0 {
		return 0
	}
	extra = min(extra, max(l.rule.limit.N, l.rule.capacity))
	r.Consume(now, extra)
	fb := l.feedback()
	fb.reconciled = sat.Add(fb.reconciled, extra)
	p.touchLocked(l, now)
	return extra
}

// ObserveHeaders reads, for each charge of the ticket whose rule has a Usage
// function, the server's count from the headers of the call's response, and
// makes the local window count what it did not know of (units spent by
// another process on the same IP or account). For each charge whose rule has
// a Learn function it takes in the limit, what remains and the window's end
// (Learned), reading an epoch reset against the response's Date header (see
// ResetMargin); a report whose window contradicts the key's is counted and
// reported as a ratesem.Distrusted event, and taken in on the safe side only.
//
// For a fixed completion window (the Binance preset's) each report bounds
// the units the server counted from elsewhere: its count includes this
// call, this pool's calls that had ended by this call's admission, and
// every call of this pool whose report was taken in before at a count no
// higher (the server's count only grows within a window). Spending from
// elsewhere only grows within a window too, so the bound read at the
// highest count seen holds for every earlier count: the window counts its
// own calls plus that bound, and a later report that tightens it gives back
// what an earlier, looser one took (waiting calls are then tried again at
// once). Calls still on their way are never taken for room. The bound: the
// window counts more than the server's units from elsewhere by at most the
// units of this pool's calls that the server counted before the highest
// count but whose own reports were not taken in yet (and had not ended
// when the reporting call was admitted); it shrinks as their reports come
// in. A response to a call admitted in an earlier window is ignored: its
// count may be that window's. A second report of one call is read as
// Reconcile reads a count. For the other windows the count is compared
// with the window's count when the call was admitted (this call and the
// ones admitted before it), less what was taken in since.
//
// Feedback never makes the local accounting count less than the server's
// reports show, and the arithmetic saturates: a count of up to
// math.MaxInt64 makes the window take in at most the rule's limit ("full
// until the window moves"); a negative count is ignored. (Comparing with
// the window's count now instead, as Reconcile does, would take the units
// of calls still on their way for room; use Reconcile when no Ticket is at
// hand.) It never blocks, but in Redis mode (redisrate.Shared) a limit
// new to a key (Rule.Learn) is stored in Redis for the fleet, with the
// budget the reply gives, before it returns: at most two round trips, each
// bounded by the Redis timeout, while the call still counts there (under
// an adaptive rule, Rule.Adapt, three; the other keys of the rule store
// their quota at their next admission when a reply first names the
// server's window); other reports go to Redis in the background. It is safe for concurrent use.
func (t *Ticket) ObserveHeaders(h http.Header) {
	p := t.pool
	var date time.Time // the reply's Date, read once a rule learns
	for i := range t.held {
		hd := &t.held[i]
		if rs := hd.lim.rule; rs.Learn != nil {
			if in, ok := rs.Learn(h, p.now()); ok {
				if date.IsZero() {
					date = serverDate(h)
				}
				p.book.learn(t, hd, in, date)
			}
		}
	}
	for i := range t.held {
		if rs := t.held[i].lim.rule; rs.Usage != nil {
			if used, ok := rs.Usage(h); ok && used >= 0 {
				p.book.observe(t, i, used)
			}
		}
	}
}

// learn is the Rule.Learn part of ObserveHeaders in process, for the
// charge hd of t: a report in, date the reply's Date (zero when none).
func (b *inProc) learn(_ *Ticket, hd *held, in Learned, date time.Time) {
	p := (*Engine)(b)
	rs, key := hd.lim.rule, hd.lim.key
	extra, distrust := p.learn(hd, in, date)
	p.emitReconciled(rs.Name, key, extra)
	if distrust != nil {
		p.emit(ratesem.Event{Kind: ratesem.Distrusted, Rule: rs.Name, Key: key, Err: distrust})
	}
}

// observe is the Rule.Usage part of ObserveHeaders in process: the
// server's count used (≥ 0) for t's charge i.
func (b *inProc) observe(t *Ticket, i int, used int64) {
	p := (*Engine)(b)
	hd := &t.held[i]
	p.emitReconciled(hd.lim.rule.Name, hd.lim.key, p.observe(hd, used))
}

// observe takes in one charge's server count used (≥ 0); see ObserveHeaders.
func (p *Engine) observe(hd *held, used int64) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.observeLocked(hd, used, p.now())
}

// observeLocked is observe under the lock.
func (p *Engine) observeLocked(hd *held, used int64, now time.Time) int64 {
	r, ok := hd.lim.policy.(window.Reconciler)
	if !ok {
		return 0
	}
	if hd.marked {
		// A fixed completion window (see ObserveHeaders); a call admitted
		// in an earlier window is ignored.
		cur, _, _, ok := win.Mark(hd.lim.policy, now)
		if !ok || cur != hd.recAtAdmit {
			return 0
		}
		// The call's units are subtracted from the server's count once:
		// another report of it is a count with no call at hand.
		first := !hd.reported
		hd.reported = true
		delta, _ := win.Report(hd.lim.policy, now, hd.recAtAdmit, used, hd.usedAtAdmit, hd.n, first)
		return p.reportedLocked(hd.lim, delta, now)
	}
	known := hd.lim.state().reconciled - hd.recAtAdmit // taken in since this call was admitted; ≥ 0
	return p.consumeLocked(hd.lim, r, sat.Sub(sat.Sub(used, hd.usedAtAdmit), known), now)
}
