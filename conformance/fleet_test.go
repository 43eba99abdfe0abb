package conformance_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/ratesem/ratesem/window"
)

// A fleet shares one limit: over Redis three semaphores (pools) of one
// name (scope), as three processes hold them; in process one semaphore
// (pool) that the goroutines share. The window holds over the calls of
// all of them together.

// TestFleetSemaphore: the completion window holds over a fleet of three
// semaphores.
func TestFleetSemaphore(t *testing.T) {
	forModesRun(t, false, func(t *testing.T, m mode) {
		l := window.Limit{N: fanN, Per: m.per / 2}
		fleet := m.semFleet(t, 3, l.N, l.Per, semCfg{})
		var next atomic.Int64
		recs := fanOut(t, fanCalls, fanGoroutines, fanMaxW, l.Per/5, []string{""},
			func(ctx context.Context, n int64, _ string) (func(), error) {
				s := fleet[next.Add(1)%int64(len(fleet))]
				if err := s.Acquire(ctx, n); err != nil {
					return nil, err
				}
				return func() { s.Release(n) }, nil
			})
		checkWindow(t, m, completion, l, 0, 0, true, recs)
	})
}

// TestFleetPool: each key's completion window holds over a fleet of three
// pools.
func TestFleetPool(t *testing.T) {
	forModesRun(t, true, func(t *testing.T, m mode) {
		l := window.Limit{N: fanN, Per: m.per / 2}
		fleet := m.poolFleet(t, 3, poolCfg{}, ruleSpec{name: "r", limit: l})
		var next atomic.Int64
		recs := fanOut(t, fanCalls, fanGoroutines, fanMaxW, l.Per/5, []string{"a", "b"},
			func(ctx context.Context, n int64, key string) (func(), error) {
				p := fleet[next.Add(1)%int64(len(fleet))]
				tk, err := p.Acquire(ctx, charge("r", key, n))
				if err != nil {
					return nil, err
				}
				return tk.Release, nil
			})
		for _, recs := range byKey(recs) {
			checkWindow(t, m, completion, l, 0, 0, true, recs)
		}
	})
}

// TestFleetTransport: Transports over a fleet of three pools send no
// request the server refuses.
func TestFleetTransport(t *testing.T) {
	forModesRun(t, true, func(t *testing.T, m mode) {
		e := &enforcer{n: 5, per: m.per, tol: m.tol}
		base := m.server(t, e)
		fleet := m.poolFleet(t, 3, poolCfg{}, ruleSpec{name: "r", limit: window.Limit{N: 5, Per: m.per}})
		var rts []http.RoundTripper
		for _, p := range fleet {
			rts = append(rts, poolTransport(p, base))
		}
		checkEnforced(t, e, hammer(t, roundRobin(rts), 40, 8), 40)
	})
}

// TestFleetLearn: a fleet of pools learns a limit from the server's
// headers and shares the learned budget: no request the server refuses.
func TestFleetLearn(t *testing.T) {
	forModesRun(t, true, func(t *testing.T, m mode) {
		srv := &learnServer{n: 3, per: learnPer}
		base := m.server(t, srv)
		fleet := m.poolFleet(t, 2, poolCfg{}, ruleSpec{name: "r", limit: window.Limit{Per: learnPer}, learn: true})
		var rts []http.RoundTripper
		for _, p := range fleet {
			rts = append(rts, poolTransport(p, base))
		}
		checkLearned(t, srv, hammer(t, roundRobin(rts), learnCalls, 3))
	})
}

// roundRobin sends each request through the next of rts.
type roundRobin []http.RoundTripper

var rrNext atomic.Uint64

func (rr roundRobin) RoundTrip(req *http.Request) (*http.Response, error) {
	return rr[rrNext.Add(1)%uint64(len(rr))].RoundTrip(req)
}
