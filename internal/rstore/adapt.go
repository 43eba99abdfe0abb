package rstore

import (
	"context"
	"fmt"

	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/internal/rspec"
)

// # Adaptive limits (issue 21 item 1)
//
// A limiter whose N nobody publishes learns it: Adapt applies the control
// law "HL" (hysteresis + last good / last bad level, documented in
// internal/adapt and research21/LAW.md) to the ended calls the fleet
// reports, in Redis, one state per (scope, rule, key), and stores the
// learned level n as the limiter's limit for every process, as SetLimit
// does (spec field s, S "1"): the next admission of any replica is held to
// it, atomically.
//
// The state lives in its own hash, the limiter's hash key + ":a" (no
// limiter's key ends so: rule and key are escaped, ':' never appears in
// them), next to H, F and Z, with the same hash tag. Not in H: the
// admission scripts read H with HMGET of fixed fields and never need the
// law's 13 numbers, and a hash of its own lets an Adapt run without
// loading the window's state. Fields (all integers; times µs on Redis's
// clock):
//
//	n      the learned level: the limiter's N, in units per Per
//	G      the last good level (proven by one clean full cycle)
//	B      the last bad level (a throttle was seen at it), 0: none known
//	inc    the next step above G when no bad level is known
//	clean  clean cycles counted at the bad level or its edge
//	cyc    successes of calls started at or after chg
//	chg    the instant n last changed (or was proven)
//	cut    the instant of the last cut, -1: none
//	cur, prev, cst  successes in the current and previous aligned Per
//	               (cst: the current one's start, 0 before the first), the
//	               "accepted in the last window" term of a deep cut
//	lat    the mean duration of successful calls (µs), an average of
//	       weight 1/64, 0 before the first
//	m      the instant of the latest report (Redis's clock; when a report
//	       comes earlier, the clock went back: chg, cut and cst move to it)
//	C      the ceiling set for the fleet (SetLimit; AdaptBounds.Set):
//	       replaces each process's Ceiling; absent: none set
//	L      the limit the key learned from a reply (AdaptBounds.Learned):
//	       lowers the ceiling; absent: none
//
// Its TTL is the limiter's (Spec.TTL), refreshed by every Adapt. A state
// lost (FLUSHALL, eviction, an idle key expired) starts again from the
// floor: the safe side.

// The types of Adapt (rspec's, under their names here).
type (
	AdaptBounds = rspec.AdaptBounds
	AdaptEvent  = rspec.AdaptEvent
)

var _ rspec.Adapter = (*Store)(nil)

// adaptKey returns the key of the law's state of c's limiter.
func (s *Store) adaptKey(scope string, c Charge) string {
	return s.Keys(scope, c)[0] + ":a"
}

// Adapt applies ev to the learned limit of c's limiter in scope and runs
// the law's lazy tick, atomically, in one EVALSHA, on Redis's clock; when
// the level changes, or the limit stored in the limiter's hash is not the
// level (expired, made again by an admission under the caller's spec), it
// stores c.Spec with N = n as the limit of every process (as SetLimit:
// admissions adopt it, Decision.Adopted). It returns n, the level now in
// force, in units per c.Spec's Per.
//
// The law is internal/adapt's, in the same integer arithmetic (a
// differential test holds them to the same states), with now the script's
// Redis TIME: a report of Count successes is Count calls of
// adapt.Law.Success(Start, now) (each followed by its Tick), with the
// duration Latency when it is set; a throttle is adapt.Law.Throttle(Start,
// now); Count 0 is adapt.Law.Tick(now). A state made new (first report,
// or after a loss) is adapt.New(p, b.Start) (the floor unless Start
// says), with its level set at the instant it is made: calls started
// before it (before a loss) prove nothing.
//
// The ceiling in force is the fleet's when the state keeps one: b.Set
// (SetLimit) stored as C replaces b.Ceiling, and b.Learned (a published
// limit) stored as L lowers it, so that the level is held to
// max(Floor, min(L, C or Ceiling)) whichever process reports (see
// AdaptBounds for when they are stored); a level above it comes down to
// it at once, and is stored as the limit.
//
// c.Spec gives the window (kind, Per, margin or blocks, a bucket's or
// GCRA's burst, concurrency cap); its N is not used. A bucket's burst
// (and GCRA's) stays c.Spec's whatever the level, as win.TokenBucket's
// and win.GCRA's SetLimit keep a burst given to them in process; their
// state is carried to each new level as Store.SetLimit carries it. Throttles of calls started before the last cut are
// ignored (hysteresis), so several processes reporting one overload cut
// once. c.Weight is not used.
//
// It returns an error, without a round trip, for the errors of Admit's
// charges, a Spec that is neither a window nor a bucket (a quota;
// ErrSpec), a Spec that Check refuses at Floor or Ceiling, a Per of 0,
// bounds outside
// 1 ≤ Floor ≤ Ceiling ≤ MaxN, a negative Count; an error matching
// ErrLimitMismatch when the limiter's hash stores a limit of another kind;
// the go-redis error when the round trip fails. One round trip; safe for
// concurrent use (Redis runs one script at a time).
func (s *Store) Adapt(ctx context.Context, scope string, c Charge, b AdaptBounds, ev AdaptEvent) (int64, error) {
	lv, err := s.AdaptAll(ctx, scope, c, b, ev)
	return lv.N, err
}

// MaxAdaptEvents is the most events of one AdaptAll.
const MaxAdaptEvents = 8

// AdaptAll is Adapt for up to MaxAdaptEvents reports applied in order, in
// one EVALSHA (a process's successes split by the level's last change, a
// throttle after them); it returns the level in force after the last and
// the instant the level last changed or was proven (Redis's clock), from
// which a process can tell which of its calls may prove the next level.
// Errors as Adapt, and an error for no event or too many.
func (s *Store) AdaptAll(ctx context.Context, scope string, c Charge, b AdaptBounds, evs ...AdaptEvent) (rspec.AdaptLevel, error) {
	var none rspec.AdaptLevel
	if c.Spec == nil {
		return none, fmt.Errorf("ratesem: adapt: charge %s[%s] has no Spec", clip(c.Rule), clip(c.Key))
	}
	switch c.Spec.Kind {
	case Completion, FixedCompletion, SlidingLog, FixedWindow, SlidingWindowCounter, SubWindowCounter, TokenBucket, LeakyBucket, GCRA:
	default:
		return none, fmt.Errorf("%w: rule %q key %q: an adaptive limit needs a window or a bucket (not %s)", ErrSpec, clip(c.Rule), clip(c.Key), c.Spec)
	}
	if c.Spec.Limit.Per <= 0 {
		return none, fmt.Errorf("%w: rule %q key %q: an adaptive limit needs a Per > 0", ErrSpec, clip(c.Rule), clip(c.Key))
	}
	ceil := b.Ceiling
	if ceil == 0 {
		ceil = MaxN
	}
	if b.Floor < 1 || ceil < b.Floor || ceil > MaxN {
		return none, fmt.Errorf("ratesem: adapt: floor %d, ceiling %d: want 1 ≤ floor ≤ ceiling ≤ %d", b.Floor, b.Ceiling, int64(MaxN))
	}
	if len(evs) == 0 || len(evs) > MaxAdaptEvents {
		return none, fmt.Errorf("ratesem: adapt: %d events: want 1 to %d", len(evs), MaxAdaptEvents)
	}
	sp := *c.Spec
	c.Spec = &sp
	// The spec at the ceiling must be one a Store keeps (a sliding window
	// counter bounds N·Per); its own N is not used.
	sp.Limit.N = ceil
	c.Weight = 0
	// and so must the spec at the floor (GCRA bounds burst·Per/N)
	lo := sp
	lo.Limit.N = b.Floor
	if err := lo.Check(); err != nil {
		return none, err
	}
	keys, args, err := s.call(scope, []Charge{c}, "", "")
	if err != nil {
		return none, err
	}
	keys = append(keys, s.adaptKey(scope, c))
	set, force := int64(0), "0"
	if b.Set > 0 {
		set = min(max(b.Set, b.Floor), MaxN)
		if b.Force {
			force = "1"
		}
	}
	args = append(args, b.Floor, ceil, max(b.Start, 0), len(evs), set, force, min(max(b.Learned, 0), MaxN))
	for _, ev := range evs {
		if ev.Count < 0 {
			return none, fmt.Errorf("ratesem: adapt: %d successes: want a count ≥ 0", ev.Count)
		}
		start := int64(0)
		if !ev.Start.IsZero() {
			start = max(ev.Start.UnixMicro(), 0)
		}
		kind := "s"
		if ev.Throttled {
			kind = "t"
		}
		args = append(args, kind, start, min(ev.Count, MaxN), min(max(ev.Latency, 0), MaxPer).Microseconds())
	}
	script := adaptScript
	if sp.Kind == TokenBucket || sp.Kind == LeakyBucket || sp.Kind == GCRA {
		script = adaptBucketScript
	}
	v, err := script.Run(ctx, s.c, keys, args...).Result()
	if err != nil {
		return none, fmt.Errorf("ratesem: redis adapt: %w", err)
	}
	if r, ok := v.([]any); ok && len(r) == 3 {
		if r[0] == int64(-1) {
			return none, mismatch([]Charge{c}, r)
		}
		n, ok1 := r[0].(int64)
		chg, ok2 := r[1].(int64)
		cyc, ok3 := r[2].(int64)
		if ok1 && ok2 && ok3 {
			return rspec.AdaptLevel{N: n, Changed: time.UnixMicro(chg), Cycled: cyc}, nil
		}
	}
	return none, fmt.Errorf("ratesem: malformed reply from Redis: %v", v)
}

// adaptScript is AdaptAll's script: KEYS H, F, Z, E of the charge
// (call's), then A (AdaptAll appends it); ARGV as call's, then floor,
// ceiling, the start level, the number of events, the fleet's ceilings
// (AdaptBounds' Set, "1" to force it, Learned; 0: none), then 4 values
// per event: "s" successes or "t" a throttle, start µs, count, latency µs.
// It returns {n, chg, cyc}, or {-1, 1, stored} for a limit of another
// kind.
//
// Every division is a floor of integers below 2^53 (exact in Lua's
// doubles), in the order internal/adapt computes them, so that both give
// the same n to the unit (adapt_test.go's differential test).
var adaptScript = goredis.NewScript(header + `
local function carry() end -- a window's state is read under any N
` + adaptLua)

// adaptBucketScript is adaptScript for a bucket or GCRA: their state is
// carried to a new level (carryLua, which needs the prelude: the windows'
// script goes without its cost).
var adaptBucketScript = goredis.NewScript(header + prelude + carryLua + adaptLua)

// adaptLua is the body of the adaptive scripts: carry must be defined.
const adaptLua = `
local function fdiv(a, b) return math.floor(a / b) end
local MAXN, MAXPER, P53 = 1099511627776, 1099511627776, 9007199254740992
-- muldiv is ⌊a·b/c⌋ for integers a, b ≥ 0 below 2^53 and 0 < c < 2^52,
-- exact as internal/adapt's 128-bit mulDiv (while the result is below
-- 2^53): a·b below 2^53 is exact in a double, and so is its quotient's
-- floor; beyond, ⌊a·b/c⌋ = q·b + ⌊r·b/c⌋ (a = q·c + r) and ⌊r·b/c⌋ is
-- computed bit by bit of b with a remainder below 2c (a/c·b in doubles
-- rounded a level near 2^40 to the unit above Go's: a deep cut 1 higher)
local function muldiv(a, b, c)
  local x = a * b
  if x < P53 then return fdiv(x, c) end
  local q = fdiv(a, c)
  local r = a - q * c
  if r * b < P53 then return q * b + fdiv(r * b, c) end
  local b0, p = b, 1
  while p * 2 <= b do p = p * 2 end
  local Q, R = 0, 0
  while p >= 1 do
    Q = 2 * Q; R = 2 * R
    if R >= c then Q = Q + 1; R = R - c end
    if b >= p then
      b = b - p
      R = R + r
      if R >= c then Q = Q + 1; R = R - c end
    end
    p = p / 2
  end
  return q * b0 + Q
end
local H, AK = KEYS[1], KEYS[5]
local kind, per, p1, conc, ttl = tonumber(ARGV[6]), tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[12])
local FL, CE, ST, NE = tonumber(ARGV[13]), tonumber(ARGV[14]), tonumber(ARGV[15]), tonumber(ARGV[16])
local SET, FORCE, LRN = tonumber(ARGV[17]), ARGV[18] == '1', tonumber(ARGV[19])
-- the fleet's ceilings kept with the state: C set (SetLimit), L learned
-- (a published limit); C replaces the process's ceiling, L lowers it
local cl = redis.call('HMGET', AK, 'C', 'L')
local C, L = tonumber(cl[1]), tonumber(cl[2])
local dropL = false
if SET > 0 and (FORCE or C == nil) then
  C = SET
  if FORCE and L ~= nil then L = nil; dropL = true end
end
if LRN > 0 then L = LRN end
if C ~= nil then CE = C end
if L ~= nil then CE = math.min(CE, L) end
CE = math.max(CE, FL)
if ST <= FL then ST = FL elseif ST > CE then
  if C ~= nil or L ~= nil then ST = CE else ST = FL end
end
local W = per
local FS = {'n', 'G', 'B', 'inc', 'clean', 'cyc', 'chg', 'cut', 'cur', 'prev', 'cst', 'lat', 'm'}
local v = redis.call('HMGET', AK, unpack(FS))
local S = {}
for j = 1, #FS do S[FS[j]] = tonumber(v[j]) end
for j = 1, #FS do
  if S[FS[j]] == nil then
    -- a new (or partly lost) state: adapt.New at the start level, its
    -- level set now (only calls started from now on prove it)
    S = {n = ST, G = ST, B = 0, inc = 1, clean = 0, cyc = 0, chg = now, cut = -1,
      cur = 0, prev = 0, cst = 0, lat = 0, m = now}
    break
  end
end
-- a clock that went back (a failover to a replica whose TIME is behind):
-- the latest change and cut and the current bucket move to now, so the
-- level is proven and cut on the new clock, not frozen until it catches
-- up (adapt.Law's back)
if now < S.chg then S.chg = now end
if now < S.cut then S.cut = now end
if now < S.cst then S.cst = now - now % W end
-- the bounds in force now (adapt.Law.SetCeiling: a published limit)
S.n = math.min(math.max(S.n, FL), CE)
S.G = math.min(math.max(S.G, FL), CE)
S.m = now

-- roll moves the two success buckets to the aligned window holding now
local function roll()
  local el = now - S.cst
  if el >= 2 * W then S.prev = 0; S.cur = 0; S.cst = now - now % W
  elseif el >= W then S.prev = S.cur; S.cur = 0; S.cst = S.cst + W end
end

-- tick proves the level (a Per elapsed, n successes of calls started at
-- it) and moves it: adapt.Law.Tick; true when it did
local function tick()
  if now - S.chg < W or S.cyc < S.n then return false end
  S.chg = now; S.cyc = 0; S.G = S.n
  -- step: +inc, inc ×2 (×4 in the climb after a forgotten B: clean > 0)
  local function step()
    S.n = math.min(S.n + S.inc, CE)
    local mul = 2
    if S.clean > 0 then mul = 4 end
    S.inc = math.min(mul * S.inc, math.max(1, fdiv(S.n * 35, 100)))
  end
  if S.B > 0 and S.n >= S.B then
    -- B is stale (the limit rose): forget it; clean = 1 marks the climb
    S.clean = S.clean + 1
    if S.clean >= 1 then S.B = 0; S.clean = 1; S.inc = math.max(1, fdiv(S.n, 16)); step() end
  elseif S.B > 0 and S.n + 1 >= S.B then
    S.clean = S.clean + 1
    if S.clean >= math.max(2, fdiv(100 + S.n - 1, S.n)) then S.n = math.min(S.n + 1, CE); S.clean = 0 end
  elseif S.B > 0 then
    S.n = math.min(S.n + math.max(1, fdiv(S.B - S.n, 2)), CE)
  else
    step()
  end
  return true
end

for e = 0, NE - 1 do
local ev, s, cnt, lat0 = ARGV[20 + 4*e], tonumber(ARGV[21 + 4*e]), tonumber(ARGV[22 + 4*e]), tonumber(ARGV[23 + 4*e])
s = math.min(math.max(s, 0), now)
if ev == 's' then
  -- cnt calls of adapt.Law.Success(s, now), each followed by its Tick
  cnt = math.min(math.max(cnt, 0), MAXN)
  local cyc0, n0 = S.cyc, S.n
  local counted = s >= S.chg
  if cnt > 0 then
    roll()
    S.cur = math.min(S.cur + cnt, MAXN)
    if counted then S.cyc = math.min(S.cyc + cnt, MAXN) end
    local d = lat0
    if d <= 0 then d = now - s end
    d = math.min(d, MAXPER)
    -- the average moves as for cnt samples of d, until it stops moving
    for _ = 1, cnt do
      local l = d
      if S.lat ~= 0 then l = S.lat + fdiv(d - S.lat, 64) end
      if l == S.lat then break end
      S.lat = l
    end
  end
  if tick() and cnt > 0 then
    -- one by one, the proof came at success i; those after it count
    -- toward the new level only if they started at it (s == now)
    local i = 1
    if counted then i = math.max(1, n0 - cyc0) end
    if s >= now then S.cyc = cnt - i end
  end
elseif ev == 't' and s >= S.cut then
  if S.n > S.G then
    -- a probe above the last good level failed: back to it
    S.B = S.n; S.n = S.G
  else
    -- the good level failed: n = max(floor, min(n·9/10, slots·95/100)),
    -- slots the successes of the last Per scaled by (W + lat)/W
    S.B = S.n
    roll()
    local el = math.min(math.max(now - S.cst, 0), W)
    local a = S.cur + muldiv(S.prev, W - el, W)
    local t = muldiv(a, W + S.lat, W)
    local m = math.min(fdiv(S.n * 9, 10), 95 * fdiv(t, 100) + fdiv(95 * (t % 100), 100))
    S.n = math.min(math.max(m, FL), CE); S.G = S.n
  end
  S.inc = 1; S.clean = 0; S.cyc = 0; S.cut = now; S.chg = now
end
end

local st = redis.call('HMGET', H, 's', 'S')
if st[1] then
  local k = string.match(st[1], '^(%d+)/')
  -- another kind's state would be misread (rspec.Unknown's may be replaced)
  if tonumber(k) ~= kind and st[1] ~= '1/1/0/0/1' then return {-1, 1, st[1]} end
end
local args = {}
for j = 1, #FS do args[#args+1] = FS[j]; args[#args+1] = S[FS[j]] end
if C ~= nil then args[#args+1] = 'C'; args[#args+1] = C end
if L ~= nil then args[#args+1] = 'L'; args[#args+1] = L end
redis.call('HSET', AK, unpack(args))
if dropL then redis.call('HDEL', AK, 'L') end
redis.call('PEXPIRE', AK, ttl)
local want = string.format('%d/%d/%d/%d/%d', kind, S.n, per, p1, conc)
if st[1] ~= want or st[2] ~= '1' then
  -- a bucket's or GCRA's state carried to the level, as SetLimit does
  if st[1] ~= want then carry(H, kind, S.n, per, p1, want) end
  redis.call('HSET', H, 's', want, 'S', '1')
end
if redis.call('PTTL', H) < ttl then redis.call('PEXPIRE', H, ttl) end
redis.call('PEXPIRE', EK, ttl, 'GT')
return {S.n, S.chg, S.cyc}
`
