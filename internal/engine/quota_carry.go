package engine

import (
	"math"
	"time"

	"github.com/ratesem/ratesem/internal/sat"
	"github.com/ratesem/ratesem/internal/win"
)

// quotaCarryLocked starts the first window of l's key under its rule's
// quota (quotaLocked, before the key's policy is replaced) with what the
// key's window counts at now: the calls that ended within the last Per
// (a completion window) or started within it (a sliding log), or in the
// current window (a fixed window; a fixed completion window counts those
// in flight too), or a token bucket's or GCRA's debt, count in a window
// of Per from now, which allows the key's N
// less them until a reply names the server's (budgetLocked: a report only
// lowers it, or opens a later window). Without it a key that spent its
// window just before the switch spent it again at once: the window
// invariant broken across the switch. Redis carries the same at the
// switch (internal/rstore's setLimitScript); the other windows (the
// sliding window counters, the leaky bucket) start a window of N less the
// calls in flight, in both modes. rs.quota must be set and
// p.mu held.
func (p *Engine) quotaCarryLocked(l *limiter, now time.Time) {
	var used int64
	switch w := l.policy.(type) {
	case *win.Completion:
		used = w.Used(now) // in flight, and ended within Per
	case *win.SlidingLog:
		used = w.Used(now) // started within Per
	case *win.FixedWindow:
		used = w.Used(now) // started in the current window (and, a fixed completion window, in flight)
	case *win.TokenBucket:
		used = w.Used(now) // the bucket's debt: burst less its tokens
	case *win.GCRA:
		used = w.Used(now) // the TAT's lead over now, in units
	default:
		return
	}
	if used <= 0 || l.unknown {
		return
	}
	fb := l.feedback()
	nowNs := p.mono(now)
	fb.budget, fb.reset, fb.budgeted = max(l.limit().N-used, 0), sat.Add(nowNs, int64(l.rule.limit.Per)), true
	fb.low, fb.epoch = math.MaxInt64, 0
}
