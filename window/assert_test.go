package window

import "github.com/ratesem/ratesem/internal/win"

// The windows of internal/win are this package's policies (its
// constructors return them as a Policy); the two Policy interfaces are one
// method set. Every window settles; all but the two sliding window
// counters reconcile.
var (
	_ Policy     = win.Policy(nil)
	_ win.Policy = Policy(nil)

	_ Settler = (*win.Completion)(nil)
	_ Settler = (*win.SlidingLog)(nil)
	_ Settler = (*win.FixedWindow)(nil)
	_ Settler = (*win.SlidingWindowCounter)(nil)
	_ Settler = (*win.SubWindowCounter)(nil)
	_ Settler = (*win.TokenBucket)(nil)
	_ Settler = (*win.LeakyBucket)(nil)
	_ Settler = (*win.GCRA)(nil)

	_ Reconciler = (*win.Completion)(nil)
	_ Reconciler = (*win.SlidingLog)(nil)
	_ Reconciler = (*win.FixedWindow)(nil)
	_ Reconciler = (*win.TokenBucket)(nil)
	_ Reconciler = (*win.LeakyBucket)(nil)
	_ Reconciler = (*win.GCRA)(nil)
)
