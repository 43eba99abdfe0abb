package remote

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/ratesem/ratesem/internal/rspec"
	"github.com/ratesem/ratesem/internal/rstore"
)

// fakeStore is an in-memory model of rstore.Store for the engine's own
// tests (the Redis tests are in package semaphore and clientpool): every
// limiter is a completion window (units in flight + units ended within Per
// ≤ N), decided atomically over all the charges of a call, on time.Now
// (the fake clock of a synctest bubble). Its hooks let a test stall or fail
// a round trip.
type fakeStore struct {
	mu       sync.Mutex
	lims     map[limKey]*fakeLim
	calls    map[string][]rstore.Charge // token → charges in flight
	scopes   map[string]string          // token → scope
	seq      int
	admits   int
	releases int
	cancels  int
	pauses   int
	carries  int
	settles  [][]int64 // the actual weights of every Settle, in order

	// Hooks, read without the lock: set them before the engine runs.
	admitHook   func(ctx context.Context) error // before an Admit decides; an error fails it
	decide      func() *rstore.Decision         // when it returns a decision, Admit returns it
	releaseHook func(ctx context.Context) error // before a Release; an error fails it
	reconcile   func(used int64) int64          // the reply of ReconcileAt (0 when nil)
}

type fakeLim struct {
	inflight int64
	ended    []fakeEnd
	paused   time.Time
}

type fakeEnd struct {
	at time.Time
	n  int64
}

const fakeLease = time.Minute

func newFake() *fakeStore {
	return &fakeStore{lims: map[limKey]*fakeLim{}, calls: map[string][]rstore.Charge{}, scopes: map[string]string{}}
}

func (f *fakeStore) lim(scope string, c rstore.Charge) *fakeLim {
	k := limKey{scope, c.Rule, c.Key}
	l := f.lims[k]
	if l == nil {
		l = &fakeLim{}
		f.lims[k] = l
	}
	return l
}

// used returns the units counted at now, dropping ends older than per.
func (l *fakeLim) used(now time.Time, per time.Duration) int64 {
	n := l.inflight
	keep := l.ended[:0]
	for _, e := range l.ended {
		if e.at.Add(per).After(now) {
			keep = append(keep, e)
			n += e.n
		}
	}
	l.ended = keep
	return n
}

func (f *fakeStore) Admit(ctx context.Context, scope string, cs []rstore.Charge) (rstore.Decision, error) {
	if f.admitHook != nil {
		if err := f.admitHook(ctx); err != nil {
			return rstore.Decision{}, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.admits++
	if f.decide != nil {
		if d := f.decide(); d != nil {
			return *d, nil
		}
	}
	now := time.Now()
	for i, c := range cs {
		l := f.lim(scope, c)
		if now.Before(l.paused) {
			return rstore.Decision{Now: now, Wait: l.paused.Sub(now), Refused: i, Paused: true}, nil
		}
		per, n := c.Spec.Limit.Per, c.Spec.Limit.N
		if l.used(now, per)+c.Weight <= n {
			continue
		}
		// The earliest instant enough ends leave the window, if they can.
		need := l.inflight + c.Weight - n
		for _, e := range l.ended {
			need += e.n
		}
		var at time.Time
		for _, e := range l.ended { // in order of end
			if need <= 0 {
				break
			}
			need -= e.n
			at = e.at.Add(per)
		}
		if need > 0 {
			return rstore.Decision{Now: now, Wait: fakeLease, Refused: i, Release: true}, nil
		}
		return rstore.Decision{Now: now, Wait: at.Sub(now), Refused: i}, nil
	}
	f.seq++
	tok := strconv.Itoa(f.seq)
	for _, c := range cs {
		f.lim(scope, c).inflight += c.Weight
	}
	f.calls[tok] = cs
	f.scopes[tok] = scope
	return rstore.Decision{OK: true, Token: tok, Now: now}, nil
}

func (f *fakeStore) end(scope string, token string, record bool) error {
	return f.endAs(scope, token, record, nil)
}

// Settle ends the call like Release, logging actual[i] units (at least 0)
// for charge i instead of its weight.
func (f *fakeStore) Settle(ctx context.Context, scope string, cs []rstore.Charge, token string, actual []int64) error {
	if f.releaseHook != nil {
		if err := f.releaseHook(ctx); err != nil {
			return err
		}
	}
	if len(actual) != len(cs) {
		return fmt.Errorf("fake: %d actual weights for %d charges", len(actual), len(cs))
	}
	f.mu.Lock()
	f.settles = append(f.settles, append([]int64(nil), actual...))
	f.mu.Unlock()
	return f.endAs(scope, token, true, actual)
}

func (f *fakeStore) endAs(scope string, token string, record bool, actual []int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	cs, ok := f.calls[token]
	if !ok || f.scopes[token] != scope {
		return fmt.Errorf("fake: token %q: %w", token, rstore.ErrNotInFlight)
	}
	delete(f.calls, token)
	now := time.Now()
	for i, c := range cs {
		l := f.lim(scope, c)
		l.inflight -= c.Weight
		if record {
			w := c.Weight
			if actual != nil {
				w = max(actual[i], 0)
			}
			l.ended = append(l.ended, fakeEnd{now, w})
		}
	}
	return nil
}

func (f *fakeStore) Release(ctx context.Context, scope string, cs []rstore.Charge, token string) error {
	if f.releaseHook != nil {
		if err := f.releaseHook(ctx); err != nil {
			return err
		}
	}
	f.mu.Lock()
	f.releases++
	f.mu.Unlock()
	return f.end(scope, token, true)
}

func (f *fakeStore) Cancel(ctx context.Context, scope string, cs []rstore.Charge, token string) error {
	f.mu.Lock()
	f.cancels++
	f.mu.Unlock()
	return f.end(scope, token, false)
}

func (f *fakeStore) Pause(ctx context.Context, scope string, c rstore.Charge, d time.Duration) (time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pauses++
	l := f.lim(scope, c)
	until := time.Now().Add(d)
	if until.After(l.paused) {
		l.paused = until
	}
	return l.paused, nil
}

func (f *fakeStore) ReconcileAt(ctx context.Context, scope string, c rstore.Charge, used int64, _ rstore.Read) (int64, error) {
	if f.reconcile != nil {
		return f.reconcile(used), nil
	}
	return 0, nil
}

func (f *fakeStore) SetLimit(ctx context.Context, scope string, c rstore.Charge) error { return nil }

func (f *fakeStore) Budget(context.Context, string, rstore.Charge, int64, time.Duration, int64, string) (int64, error) {
	return 0, nil
}

// Carry records the call whatever the windows hold: in flight under a new
// token, or ended now.
func (f *fakeStore) Carry(ctx context.Context, scope string, cs []rstore.Charge, ended bool) (rstore.Decision, error) {
	if f.admitHook != nil {
		if err := f.admitHook(ctx); err != nil {
			return rstore.Decision{}, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.carries++
	now := time.Now()
	if ended {
		for _, c := range cs {
			l := f.lim(scope, c)
			l.ended = append(l.ended, fakeEnd{now, c.Weight})
		}
		return rstore.Decision{OK: true, Token: "carried", Now: now}, nil
	}
	f.seq++
	tok := strconv.Itoa(f.seq)
	for _, c := range cs {
		f.lim(scope, c).inflight += c.Weight
	}
	f.calls[tok] = cs
	f.scopes[tok] = scope
	return rstore.Decision{OK: true, Token: tok, Now: now, Leased: true}, nil
}

// inFlight returns the calls the fake holds in flight.
func (f *fakeStore) inFlight() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func (f *fakeStore) counts() (admits, releases, cancels int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.admits, f.releases, f.cancels
}

// acquire waits for an admission over Decide, asking again at each
// refusal's instant (the engine's queues do this for real), until ctx is
// done.
func acquire(e *Engine, ctx context.Context, scope string, cs []rspec.Charge) (*Call, error) {
	for {
		o, err := e.Decide(ctx, scope, cs)
		if err != nil || o.Call != nil {
			return o.Call, err
		}
		d := time.Until(o.At)
		if d <= MinRetry {
			d = MinRetry + rand.N(MinRetry) // as the engine: never in a loop
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
}

// tryAcquire is one decision: the call admitted at once, or not.
func tryAcquire(e *Engine, scope string, cs []rspec.Charge) (*Call, bool, error) {
	o, err := e.Decide(context.Background(), scope, cs)
	return o.Call, o.Call != nil, err
}
