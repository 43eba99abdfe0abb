package rstore

import "context"

// Carry records the call cs, which a process's local fallback admitted
// while Redis was unreachable, in Redis now, whatever the windows hold
// (it refuses nothing, and may leave a window over its limit, so that
// later admissions wait until the carried units have left it). A call
// still in flight (ended false) is recorded as admitted now with a lease,
// under the token returned: Release, Settle and Cancel take it. A call that
// has ended is recorded as admitted and ended now: the token returned is
// of no use then. Counting a call from now rather than from when it really
// happened counts it longer, never less. Charges of weight 0 change
// nothing but prove that Redis answers. It reads the scope's epoch as
// Admit does (see # Losses): a whole loss found by a carry holds the
// scope's limiters from then, the carried units counted on top.
//
// A ctx made by rspec.WithAnswerBy sets the instant after which the carry
// is refused, changing nothing, as a late admission is (Decision.Late, OK
// false; see # Late admissions): a carry that a frozen Redis runs after
// its caller gave up on it would leave a lease nobody releases (the caller
// carries the call again later). It returns the errors of Admit (an error
// matching ErrLimitMismatch included) and blocks for one round trip (two
// when it reads the clock first, as Admit).
func (s *Store) Carry(ctx context.Context, scope string, cs []Charge, ended bool) (Decision, error) {
	lease := s.leaseS
	if ended {
		lease = "1" // µs: the call counts as ended now
	}
	// The admission script, told to refuse nothing: a call still in flight
	// keeps a lease like any other (Release ends it). It reads the scope's
	// epoch as an admission does, so that the first round trip after a
	// whole loss (a carry, when the process fell back meanwhile) finds it
	// and holds the scope's limiters from then (a carry made no epoch key,
	// and found no loss, would leave it to the first admission, which the
	// fallback's window may delay by a Per).
	ds, errs, err := s.admitAll(ctx, "carry", scope, [][]Charge{cs}, lease, "carry")
	if err != nil {
		return Decision{}, err
	}
	ds[0].Leased = ds[0].Leased && !ended
	return ds[0], errs[0]
}
