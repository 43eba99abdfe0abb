package engine

import "github.com/ratesem/ratesem"

// BodyUnread tells the ticket that its call's reply was closed before its
// body was read to the end (io.EOF), so the rules that settle from the
// body (Rule.Settle) may not have seen the weight it reports. It returns
// the number of the ticket's charges under such a rule that no Settle has
// settled: they keep the weight they were admitted for (their estimate)
// when the ticket is released. Each is reported to the pool's observer as
// a ratesem.Unsettled event (Rule, Key, Weight), once: a later call returns
// the same count and emits no event again. Package httpclient calls
// it, after SettleResponse and before Release, for a body closed unread.
// It never blocks and is safe for concurrent use; after Release it reports
// nothing and returns 0.
func (t *Ticket) BodyUnread() int {
	p := t.pool
	var unsettled []Charge
	n := 0
	p.mu.Lock()
	if !t.released.Load() {
		for i := range t.held {
			h := &t.held[i]
			if h.lim.rule.Settle == nil || h.settled {
				continue
			}
			n++
			if p.observer != nil && !h.unreadSaid {
				h.unreadSaid = true
				unsettled = append(unsettled, Charge{Rule: h.lim.rule.Name, Key: h.lim.key, Weight: h.n})
			}
		}
	}
	p.mu.Unlock()
	if len(unsettled) > 0 {
		p.emitCharges(ratesem.Event{Kind: ratesem.Unsettled}, unsettled) // no lock held: the observer may call the pool
	}
	return n
}
