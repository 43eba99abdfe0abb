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
// which then admits nothing until enough has left it. Reply {now µs}, or
// {-1, charge, stored spec} for a spec mismatch.
var carryScript = goredis.NewScript(header + prelude + `
local Ls, err = loadall(true)
if Ls == nil then return err end
for i = 1, NC do
  local L = Ls[i]
  prepare(L)
  commit(L, ARGV[2], tonumber(ARGV[3]))
  save(L)
end
return {now}
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
// nothing but prove that Redis answers. It returns the errors of Admit
// (an error matching ErrLimitMismatch included) and blocks for one round
// trip.
func (s *Store) Carry(ctx context.Context, scope string, cs []Charge, ended bool) (Decision, error) {
	tok := newToken()
	lease := s.leaseS
	if ended {
		lease = "1"
	}
	keys, args, err := s.call(scope, cs, tok, lease)
	if err != nil {
		return Decision{}, err
	}
	v, err := carryScript.Run(ctx, s.c, keys, args...).Slice()
	if err != nil {
		return Decision{}, fmt.Errorf("ratesem: redis carry: %w", err)
	}
	if len(v) == 3 {
		if code, _ := v[0].(int64); code == -1 {
			return Decision{}, mismatch(cs, v)
		}
	}
	if len(v) != 1 {
		return Decision{}, fmt.Errorf("ratesem: malformed reply from Redis: %v", v)
	}
	now, ok := v[0].(int64)
	if !ok {
		return Decision{}, fmt.Errorf("ratesem: malformed reply from Redis: %v", v)
	}
	return Decision{OK: true, Token: tok + "." + strconv.FormatInt(now, 10), Now: time.UnixMicro(now), Leased: !ended}, nil
}
