package engine

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/sat"
	"github.com/ratesem/ratesem/window"
)

// Rule is one limit the engine keeps per key, as a front gives it: the
// fronts' own rule types (clientpool.Rule; the one rule of a
// semaphore.RateSemaphore) are read into it. Fields mean what
// clientpool.Rule's of the same name mean.
type Rule struct {
	Name             string
	Limit            window.Limit
	Window           func(window.Limit) window.Policy // nil: the completion window
	MaxUnitsInFlight int64                            // 0: no cap beyond the window
	Usage            func(h http.Header) (used int64, ok bool)
	Learn            func(h http.Header, now time.Time) (Learned, bool)
	Settle           func(h http.Header, body []byte) (units int64, ok bool)
	PauseOnThrottle  bool
	Adapt            *Adaptive // nil: the limit is Limit (or learned)
}

// Learned is what a response's headers say about one rule's limit at the
// server (clientpool.Learned, field for field).
type Learned struct {
	Limit     window.Limit
	Remaining int64
	Reset     time.Time
	Epoch     bool
}

// Charge is what one call costs under one rule: Weight units of the
// limiter of (Rule, Key). clientpool.Charge is this type.
type Charge struct {
	// Rule names a rule of the Table.
	Rule string
	// Key is the rule's key ("" for a rule without a Key function).
	Key string
	// Weight is the units the call costs, in the rule's units (≥ 0).
	Weight int64
}

// String formats c as "rule[key]×weight".
func (c Charge) String() string { return fmt.Sprintf("%s[%s]×%d", c.Rule, c.Key, c.Weight) }

// KeyState is a snapshot of one limiter (Engine.Snapshot; clientpool.KeyState); a plain value.
type KeyState struct {
	// Rule and Key name the limiter: a rule of the Table and a key its
	// Key function returned.
	Rule, Key string
	// InFlight is the units of admitted calls not yet released.
	InFlight int64
	// Used is the units the window counts at the snapshot's instant, for
	// windows that implement window.Reconciler; -1 for the others and in
	// Redis mode.
	Used int64
	// PausedUntil is when the key's pause ends; zero when none was set.
	PausedUntil time.Time
	// Distrusted counts the server's reports about the key that were not
	// taken at their word (ratesem.Distrusted events): calls heavier than
	// its learned limit sent alone, replies whose window contradicted the
	// key's (wrapping).
	Distrusted uint32
	// Limit is the limit the key is held to: its rule's, or the one it
	// learned from a reply or, in Redis mode, adopted from another process
	// (Rule.Learn); N is 0 while the key knows none.
	Limit window.Limit
}

// ResetMargin is added to every window end a response reports
// (clientpool.ResetMargin).
const ResetMargin = time.Second

// MaxLearnedN is the largest N a Learn report is taken at
// (a larger report counts as this).
const MaxLearnedN = 1 << 40

// quiet is how long a key of r must see no activity before its limiter is
// back to a fresh state and can be dropped without losing accounting:
// Per × (1 + ⌈capacity / N⌉) covers every window of package window (a
// completion log empties Per after the last end, a token bucket of burst b
// refills in b/N × Per, a sliding window counter forgets in 2 Per).
func quiet(l window.Limit, capacity int64) time.Duration {
	if l.N <= 0 {
		return l.Per
	}
	k := 1 + (capacity+l.N-1)/l.N
	return time.Duration(sat.Mul(k, int64(l.Per))) // saturating: never forgets
}

func (r *Rule) check() error {
	switch {
	case r.Name == "":
		return errors.New("ratesem: a rule has no name")
	case r.Limit.N < 0 || r.Limit.N == 0 && r.Learn == nil && r.Adapt == nil || r.Limit.Per <= 0:
		return fmt.Errorf("%w: rule %q: limit %v: want N > 0 per Per > 0", ratesem.ErrInvalidLimit, r.Name, r.Limit)
	case r.MaxUnitsInFlight < 0:
		return fmt.Errorf("%w: rule %q: negative MaxUnitsInFlight %d", ratesem.ErrInvalidLimit, r.Name, r.MaxUnitsInFlight)
	}
	return r.checkAdapt()
}

// policyFor returns a new window for a key of rs: the rule's, or, for a
// rule counted against the server's budgets (quota), one that only caps
// the units in flight.
func (rs *ruleState) policyFor() window.Policy {
	switch {
	case rs.quota:
		return window.NewCompletion(window.Limit{N: MaxLearnedN})
	case rs.unknown:
		// A new key learns its own limit: until then it admits any weight,
		// one call at a time, whatever another key learned.
		return rs.newPolicy(window.Limit{N: MaxLearnedN, Per: rs.limit.Per})
	}
	return rs.newPolicy(rs.limit)
}

func (r *Rule) newPolicy(l window.Limit) window.Policy {
	if r.Window == nil {
		return window.NewCompletion(l)
	}
	return r.Window(l)
}
