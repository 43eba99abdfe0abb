// Package win holds the windows of package window as concrete types: the
// completion window, the sliding log, the fixed window and its completion
// variant, the two sliding window counters, the token and leaky buckets,
// GCRA and the pacer. Package window's constructors return them as a
// window.Policy; the engine's fast form (Window, Of), the Redis spec
// (internal/rspec) and the tests reach their types and accessors here.
// Policy here has the same method set as window's, which documents it;
// the windows implement window.Settler, and all but the two sliding window
// counters window.Reconciler.
package win
