package rspec

import (
	"context"
	"time"
)

// Adapter is a Store that keeps adaptive limits for a fleet (rstore.Store,
// its AdaptAll and Adapt): the level of the law of internal/adapt per
// limiter, fed by every process's ended calls, stored as the limiter's
// limit (as SetLimit).
type Adapter interface {
	// AdaptAll applies evs, in order, to the learned level of c's limiter
	// in scope and returns the level in force. One round trip.
	AdaptAll(ctx context.Context, scope string, c Charge, b AdaptBounds, evs ...AdaptEvent) (AdaptLevel, error)
}

// AdaptLevel is a limiter's learned level as Redis answered it.
type AdaptLevel struct {
	// N is the level: the limiter's N, in units per its Per.
	N int64
	// Changed is the instant (Redis's clock) the level last changed or
	// was proven: only calls admitted at or after it prove the next one.
	Changed time.Time
	// Cycled is the successes of calls admitted since Changed counted so
	// far: the level is proven once Cycled ≥ N and a Per has passed since
	// Changed.
	Cycled int64
}

// AdaptBounds are the bounds of a learned level n, in units per the
// limiter's Per (the window's N).
type AdaptBounds struct {
	// Floor is where the law starts and the least n it ever sets: 1 to
	// Ceiling.
	Floor int64
	// Ceiling is the most n it ever sets: Floor to MaxN; 0 means MaxN (no
	// ceiling). A published limit belongs here.
	Ceiling int64
	// Start is the level a new state starts at (adapt.New's start): the
	// rule's initial level; 0, or a value outside (Floor, Ceiling], means
	// Floor. A state lost starts there again.
	Start int64
	// Set is a ceiling set for the fleet (SetLimit on an adaptive rule):
	// kept with the level's state, it replaces every process's Ceiling
	// (as SetLimit's N replaces Adaptive.Ceiling in process), the level
	// coming down to it at once if above. 0: none. It is stored when the
	// state keeps none, or always with Force; values below Floor count as
	// Floor, above MaxN as MaxN.
	Set int64
	// Force makes Set replace the ceiling the state keeps (SetLimit's own
	// report: the latest SetLimit of the fleet wins) and forget a Learned
	// one (SetLimit in process resets every key's ceiling to its N).
	Force bool
	// Learned is a limit the key learned from a reply (Rule.Learn: a
	// published limit): kept with the level's state, it lowers the
	// ceiling (min with Set, or with Ceiling when none is set) for every
	// process until another replaces it. 0: no change; above MaxN counts
	// as MaxN.
	Learned int64
}

// AdaptEvent is one report to Adapt: ended calls of the limiter.
//
// Start is on Redis's clock: the Decision.Now of the admission (the
// instant the admission script gave the call). The zero time.Time counts
// as the Unix epoch, before any cut (a throttle so reported is ignored
// once any cut happened); a Start later than the script's now counts as
// now.
type AdaptEvent struct {
	// Throttled reports one call the server refused for rate (429, 503,
	// RESOURCE_EXHAUSTED, or the caller's classification); Count and
	// Latency are then not used.
	Throttled bool
	// Start is the call's admission instant (Throttled), or one at or
	// before the admission of every success counted (a batch): successes
	// of calls started at or after the level's last change prove it, and
	// a batch whose Start is earlier proves nothing.
	Start time.Time
	// Count is the number of successes reported (0: only the lazy tick
	// runs). Negative counts are an error; counts above MaxN count as
	// MaxN.
	Count int64
	// Latency is the mean duration of the successes (0: the time from
	// Start to the script's now, as adapt.Law.Success takes it); negative
	// is taken as 0, and anything above MaxPer as MaxPer.
	Latency time.Duration
}
