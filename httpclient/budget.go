package httpclient

import (
	"encoding/binary"
	"hash/maphash"
	"math"
	"slices"
	"sync"

	"github.com/ratesem/ratesem/clientpool"
)

// The retry budget follows gRPC's retryThrottling (the A6 design,
// https://github.com/grpc/proposal/blob/master/A6-client-retries.md#throttling-retry-attempts-and-hedged-rpcs):
// tokens start at maxTokens; each response whose headers show a throttle
// takes 1 token (never below 0), each success (a response not throttled,
// status below 400) gives back tokenRatio (never above maxTokens), other
// failures change nothing (A6 counts only retryable ones), and a throttled
// response may be retried only when, after its own token is taken, more
// than maxTokens/2 are left. Tokens are kept in thousandths (gRPC keeps 3 decimals of the
// ratio), so the arithmetic is exact.
const (
	milli = 1000

	// defaultBudgetTokens and defaultBudgetRatio are the example of the
	// A6 design and of grpc-go's service-config tests (maxTokens 10,
	// tokenRatio 0.1): with every response throttled a Transport sends 4
	// retries in all; with none throttled, 10 successes earn one retry.
	defaultBudgetTokens = 10
	defaultBudgetRatio  = 100 // thousandths: 0.1

	// maxBudgetTokens is gRPC's cap on maxTokens (A6: "maxTokens ... must
	// be in the range (0, 1000]").
	maxBudgetTokens = 1000

	// maxBudgetKeys bounds the per-(rule, key) budgets a Transport of
	// NewPool keeps below full: keys are often chosen by callers (or
	// attackers), so past it the keys without a budget of their own share
	// one overflow budget.
	maxBudgetKeys = 1024
)

// retryBudget is a Transport's retry budget: its own (for requests without
// pool charges) and one per (rule, key) of the charges of NewPool's
// requests. All of it is guarded by mu: a response's spend and the retry
// decision it leads to happen in one critical section, so concurrent
// requests can never retry past the bound between them.
type retryBudget struct {
	max   int64 // tokens at full, in thousandths
	ratio int64 // thousandths given back by a success

	seed    maphash.Seed
	maxKeys int

	mu     sync.Mutex
	tokens int64 // the Transport's own budget
	// keys holds the (rule, key) budgets below full, by a seeded hash of
	// rule and key (keyOf; not the strings, whose length callers choose);
	// a budget back at full carries no information and is dropped. A key
	// without an entry shares overflow: on its first throttle it gets an
	// entry starting from overflow's tokens while there is room (so a key
	// that failed in the overflow is never forgiven by getting room), and
	// spends overflow itself when keys is full.
	keys     map[uint64]int64
	overflow int64
}

// newRetryBudget returns the budget WithRetryBudget(maxTokens, ratio)
// asks for, or nil when it turns the budget off (maxTokens < 0). Hostile
// values are made sane as WithRetryBudget documents.
func newRetryBudget(maxTokens int, ratio float64) *retryBudget {
	if maxTokens < 0 {
		return nil
	}
	if maxTokens == 0 {
		maxTokens = defaultBudgetTokens
	}
	maxTokens = min(maxTokens, maxBudgetTokens)
	full := int64(maxTokens) * milli
	var r int64
	switch {
	case math.IsNaN(ratio) || ratio <= 0:
		r = defaultBudgetRatio
	case ratio >= float64(maxTokens): // +Inf too: a success refills it all
		r = full
	default:
		r = max(int64(math.Round(ratio*milli)), 1)
	}
	return &retryBudget{max: full, ratio: r, seed: maphash.MakeSeed(), maxKeys: maxBudgetKeys,
		tokens: full, overflow: full, keys: map[uint64]int64{}}
}

// keyOf hashes a charge's rule and key. The rule goes in with its length
// first, so no two (rule, key) pairs hash the same bytes (rule "a" key
// "b\x00c" and rule "a\x00b" key "c" would with a separator: a rule name
// may hold any byte); distinct pairs share a hash only by a 64-bit
// accident under a seed chosen per Transport.
func (b *retryBudget) keyOf(c clientpool.Charge) uint64 {
	var h maphash.Hash
	h.SetSeed(b.seed)
	var n [binary.MaxVarintLen64]byte
	h.Write(binary.AppendUvarint(n[:0], uint64(len(c.Rule))))
	h.WriteString(c.Rule)
	h.WriteString(c.Key)
	return h.Sum64()
}

// spend takes 1 token from each budget of a throttled response (the
// Transport's when charges is empty, else each charge's) and reports
// whether a retry is allowed: every budget spent still above half.
func (b *retryBudget) spend(charges []clientpool.Charge) bool {
	hs := b.hashes(charges)
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(hs) == 0 {
		b.tokens = max(b.tokens-milli, 0)
		return 2*b.tokens > b.max
	}
	ok, overflowSpent := true, false
	for _, h := range hs {
		v, found := b.keys[h]
		switch {
		case found:
		case len(b.keys) < b.maxKeys:
			v = b.overflow
		default:
			if !overflowSpent { // one token of the shared budget per response
				b.overflow = max(b.overflow-milli, 0)
				overflowSpent = true
			}
			ok = ok && 2*b.overflow > b.max
			continue
		}
		v = max(v-milli, 0)
		b.keys[h] = v
		ok = ok && 2*v > b.max
	}
	return ok
}

// earn gives tokenRatio back to each budget of a success; a key's budget
// back at full is dropped. While no key is below full it hashes nothing.
func (b *retryBudget) earn(charges []clientpool.Charge) {
	b.mu.Lock()
	if len(charges) == 0 {
		b.tokens = min(b.tokens+b.ratio, b.max)
		b.mu.Unlock()
		return
	}
	if len(b.keys) == 0 {
		// No key below full (the healthy case): every charge shares the
		// overflow, so nothing is hashed.
		b.overflow = min(b.overflow+b.ratio, b.max)
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	hs := b.hashes(charges) // outside the lock; what it finds is decided below
	b.mu.Lock()
	defer b.mu.Unlock()
	overflowEarned := false
	for _, h := range hs {
		v, found := b.keys[h]
		if !found {
			if !overflowEarned {
				b.overflow = min(b.overflow+b.ratio, b.max)
				overflowEarned = true
			}
			continue
		}
		if v += b.ratio; v >= b.max {
			delete(b.keys, h)
		} else {
			b.keys[h] = v
		}
	}
}

// hashes returns the distinct hashes of charges (a request charged twice
// under one rule and key spends that budget once), in O(n log n) however
// many charges an Endpoint's Charges returns.
func (b *retryBudget) hashes(charges []clientpool.Charge) []uint64 {
	if len(charges) == 0 {
		return nil
	}
	hs := make([]uint64, len(charges))
	for i, c := range charges {
		hs[i] = b.keyOf(c)
	}
	slices.Sort(hs)
	return slices.Compact(hs)
}

// budgetCharged is implemented by a Limiter whose requests have budgets
// per (rule, key) of their charges (NewPool's poolCall); retryCharges
// returns them, empty for a request with none (it then uses the
// Transport's own budget).
type budgetCharged interface {
	retryCharges() []clientpool.Charge
}

// retryCharges implements budgetCharged.
func (c *poolCall) retryCharges() []clientpool.Charge { return c.charges }

// budgetNote notes in the Transport's retry budget (if it has one) a
// response of a request under l, with status, throttled or not, and
// reports whether a retry is allowed (true when the Transport has no
// budget). A throttle spends; a success (not throttled, status below 400)
// earns; any other response (a 4xx or 5xx that is not a throttle) neither
// spends nor earns, as A6 counts only retryable failures and successes.
func (t *Transport) budgetNote(l Limiter, status int, throttled bool) bool {
	b := t.budget
	if b == nil || (!throttled && status >= 400) {
		return true
	}
	var charges []clientpool.Charge
	if bc, ok := l.(budgetCharged); ok {
		charges = bc.retryCharges()
	}
	if throttled {
		return b.spend(charges)
	}
	b.earn(charges)
	return true
}
