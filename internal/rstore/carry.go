package rstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// carryScript records, whatever the window holds, a call admitted while
// Redis was unreachable (by a process's local fallback), as an admission
// now under token ARGV[2] whose leases run out after ARGV[3] µs: a call
// still in flight keeps a lease like any other (Release ends it); a call
// that has ended is carried with a lease of 1 µs, so that it counts as
// ended now. It refuses nothing (a pause or a hold does not apply: the
// call already happened) and may leave a window counting more than N,
// which then admits nothing until enough has left it. It takes the
// admission's three trailing ARGV: a carry that reaches Redis after its
// deadline changes nothing (late); otherwise it reads the scope's epoch
// as an admission does, so that the first round trip after a whole loss
// (a carry, when the process fell back meanwhile) finds it and holds the
// scope's limiters from then (a carry made no epoch key, and found no
// loss, would leave it to the first admission, which the fallback's
// window may delay by a Per). Reply {now µs, epoch}, {0, now, 0, 1, 16,
// ""} when late, or {-1, charge, stored spec} for a spec mismatch.
var carryScript = goredis.NewScript(header + late + prelude + `
local Ls, err = loadall()
if Ls == nil then return err end
local ev, el = epoch(Ls, EV, tonumber(ARGV[TA + 2] or ''))
for i = 1, NC do
  local L = Ls[i]
  prepare(L)
  if L.E ~= ev then
    if el > 0 then fill(L, el) end
    set(L, 'E', ev)
  end
  commit(L, ARGV[2], tonumber(ARGV[3]))
  save(L)
end
return {now, ev}
`)

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
	tok := newToken()
	lease := s.leaseS
	if ended {
		lease = "1"
	}
	v, sent, got, err := s.runTimed(ctx, carryScript, "carry", scope, cs, tok, lease)
	if err != nil {
		return Decision{}, err
	}
	if len(v) == 3 {
		if code, _ := v[0].(int64); code == -1 {
			return Decision{}, mismatch(cs, v)
		}
	}
	if len(v) == 6 {
		now, _ := v[1].(int64)
		if flags, _ := v[4].(int64); flags&16 != 0 {
			s.learn(scope, cs, now, sent, got, false, "")
			return Decision{Late: true, Now: time.UnixMicro(now)}, nil
		}
	}
	if len(v) != 2 {
		return Decision{}, fmt.Errorf("ratesem: malformed reply from Redis: %v", v)
	}
	now, ok := v[0].(int64)
	epoch, ok2 := v[1].(string)
	if !ok || !ok2 {
		return Decision{}, fmt.Errorf("ratesem: malformed reply from Redis: %v", v)
	}
	// The carry made or extended the epoch key as an admission does.
	s.learn(scope, cs, now, sent, got, true, epoch)
	return Decision{OK: true, Token: tok + "." + strconv.FormatInt(now, 10), Now: time.UnixMicro(now), Leased: !ended}, nil
}
