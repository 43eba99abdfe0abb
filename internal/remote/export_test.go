package remote

import (
	"context"
	"time"

	"github.com/ratesem/ratesem/internal/rspec"
)

// Request is one call to decide: its scope and charges (as Decide takes
// them).
type Request struct {
	Scope   string
	Charges []rspec.Charge
}

// DecideAll decides reqs in order, each as Decide does, and returns one
// Result per request: the batched decision. Over internal/rstore's Store
// the requests of one scope that need Redis share one round trip (a
// pipeline of admissions, rstore.Store.AdmitAll: Redis decides them in
// this order, each seeing the admissions before it; one script for them
// all, carrying pending releases too, is the next step); a request this
// process can decide alone (a pause, a known refusal) costs none. While
// Redis is taken as unreachable, the fallback's window drains or its
// calls wait to be carried into Redis, each request is decided by Decide.
// A round trip that fails marks Redis unreachable once: the requests it
// carried go to the fallback. ctx bounds them all. It does not stop at a
// refusal: a caller that keeps FIFO order per limiter sends no request
// behind one it expects refused on the same limiter.
func (e *Engine) DecideAll(ctx context.Context, reqs []Request) []Result {
	rs := make([]Result, len(reqs))
	ws := make([]*waiter, len(reqs))
	var scopes []string
	groups := map[string][]int{}
	for i, r := range reqs {
		w, o, err := e.begin(ctx, r.Scope, r.Charges)
		if w == nil {
			rs[i] = Result{o, err}
			continue
		}
		defer e.leave(w)
		ws[i] = w
		if _, seen := groups[r.Scope]; !seen {
			scopes = append(scopes, r.Scope)
		}
		groups[r.Scope] = append(groups[r.Scope], i)
	}
	b, _ := e.st.(batcher)
	for _, sc := range scopes {
		idx := groups[sc]
		now := time.Now()
		var (
			send []*waiter
			at   []int
		)
		e.mu.Lock()
		one := b == nil || len(idx) == 1 || e.closed || e.down || e.gatedLocked(now) || len(e.recs) > 0
		e.mu.Unlock()
		for _, i := range idx {
			if one {
				rs[i].Outcome, rs[i].Err = e.decide(ctx, ws[i])
				continue
			}
			e.mu.Lock()
			until, ri := e.knownLocked(ws[i], now)
			e.mu.Unlock()
			if until.IsZero() {
				send, at = append(send, ws[i]), append(at, i)
			} else {
				rs[i].Outcome = Outcome{At: until, Refused: ri}
			}
		}
		if len(send) == 0 {
			continue
		}
		for k, r := range e.ask(ctx, b, sc, send, e.cfg.Timeout) {
			rs[at[k]] = r
		}
	}
	return rs
}
