package exchangetest

import (
	"slices"
	"sync"
	"time"

	"github.com/ratesem/ratesem/internal/memnet"
)

// core is the state shared by OKXServer and BinanceServer: the clock, the
// rules and their counters, and the log, all guarded by mu.
type core struct {
	net     *memnet.Server
	now     func() time.Time
	latency func() time.Duration
	rules   []Rule

	mu  sync.Mutex
	lim *limiter
	log []Entry
}

func newCore(rules []Rule, now func() time.Time, latency func() time.Duration) *core {
	if now == nil {
		now = time.Now
	}
	return &core{now: now, latency: latency, rules: rules, lim: newLimiter(rules)}
}

func (c *core) rulesCopy() []Rule { return slices.Clone(c.rules) }

func (c *core) rule(name string) (Rule, bool) {
	for _, r := range c.rules {
		if r.Name == name {
			return r, true
		}
	}
	return Rule{}, false
}

func (c *core) logCopy() []Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Entry, len(c.log))
	for i, e := range c.log {
		e.Charges = slices.Clone(e.Charges)
		out[i] = e
	}
	return out
}

func (c *core) used(k RuleKey) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lim.used(k, c.now())
}
