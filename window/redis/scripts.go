package redis

import goredis "github.com/redis/go-redis/v9"

// The scripts. Each admission decision is one script run (one EVALSHA round
// trip), and so is each release, extension or cancellation.
//
// Conventions shared by every script:
//
//   - Time is in whole microseconds since the Unix epoch. ARGV[1] is the
//     caller's explicit instant for tests, or "" in production, where the
//     script reads the server's clock (TIME): the only clock, so replicas
//     with skewed clocks agree. The instant is raised to the latest one the
//     limiter has seen (field t of its hash), so time never goes back for one
//     limiter, even across a failover to a server whose clock is behind.
//   - Lua numbers are doubles: every value is an integer below 2^53 (the Go
//     side checks the limits), products that could pass 2^53 go through
//     muldiv, and numbers go to Redis formatted by num, which prints every
//     digit (Lua's own tostring and .. keep 14 significant digits, which
//     would lose microseconds).
//   - Members of the sorted sets are "<weight>:<id>", so the weight travels
//     with the member and needs no companion key.
//   - Every key written gets a TTL just over the time its state matters
//     (SLACK_MS more), so an abandoned limiter leaves nothing behind.
//   - Every admission script takes one more key after the window's own, the
//     pause key (a string: the instant the pause ends). While it lies ahead
//     the script refuses at once, with the time left as the wait, and
//     changes nothing.
//
// Replies are arrays of integers: {admitted 0/1, wait µs, in flight 0/1,
// now µs} for admissions, {done 0/1, now µs} for the others.
const prelude = `
if redis.replicate_commands then pcall(redis.replicate_commands) end
local MAX = 9007199254740992 -- 2^53
local SLACK_MS = 1000

local function num(x) return string.format('%.0f', x) end

local function clock(arg)
  if arg ~= nil and arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- now raised to the latest instant seen in hash h.
local function latest(h, now)
  local t = tonumber(redis.call('HGET', h, 't') or 0)
  if now < t then return t end
  return now
end

local function hnum(h, f)
  local v = redis.call('HGET', h, f)
  if v then return tonumber(v) end
  return nil
end

-- floor(a / b) for integers a >= 0, b > 0, exactly (fmod is exact).
local function fdiv(a, b)
  return (a - math.fmod(a, b)) / b
end

-- floor(a*b/c) and a*b mod c for integers 0 <= a, b < 2^53 and 0 < c < 2^53,
-- without rounding: binary long multiplication keeping the remainder below c.
-- The quotient saturates at 2^53.
local function muldiv(a, b, c)
  local ra = math.fmod(a, c)
  local qa = (a - ra) / c
  local q, r = 0, 0
  local i = 0
  while 2 ^ (i + 1) <= b do i = i + 1 end
  for k = i, 0, -1 do
    q = q * 2
    if r >= c - r then r = r - (c - r); q = q + 1 else r = r + r end
    if math.floor(b / 2 ^ k) % 2 == 1 then
      if r >= c - ra then r = r - (c - ra); q = q + 1 else r = r + ra end
    end
  end
  local hi = qa * b
  if hi >= MAX or hi + q >= MAX then return MAX, r end
  return hi + q, r
end

-- ceil((x*y - z) / d) for integers 0 <= x, y, z < 2^53, 0 < d < 2^53 and
-- x*y >= z; it saturates at 2^53.
local function ceilwait(x, y, z, d)
  local q, r = muldiv(x, y, d)
  if q >= MAX then return MAX end
  local e = r - z
  if e > 0 then
    local m = math.fmod(e, d)
    q = q + (e - m) / d
    if m > 0 then q = q + 1 end
  elseif e < 0 then
    local m = math.fmod(-e, d)
    q = q - (-e - m) / d
  end
  if q > MAX then q = MAX end
  return q
end

local function expire(key, us)
  if us < 0 then us = 0 end
  redis.call('PEXPIRE', key, num(math.floor(us / 1000) + SLACK_MS))
end

local function weight(m) return tonumber(string.match(m, '^(%d+):')) end

-- ZREM members in chunks (unpack is limited by the Lua C stack).
local function zrem(key, members)
  for i = 1, #members, 1000 do
    redis.call('ZREM', key, unpack(members, i, math.min(i + 999, #members)))
  end
end

-- Drops the members of z that count no more (score <= now), and them from
-- l too if l is given; returns the units dropped.
local function prune(z, l, now)
  local gone = redis.call('ZRANGEBYSCORE', z, '-inf', num(now))
  local w = 0
  for i = 1, #gone do w = w + weight(gone[i]) end
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', z, '-inf', num(now))
    if l then zrem(l, gone) end
  end
  return w
end

-- The score by which k units of z have left: the k-th unit in score order.
local function kth(z, k)
  local from = 0
  while true do
    local page = redis.call('ZRANGE', z, from, from + 99, 'WITHSCORES')
    if #page == 0 then return nil end
    for i = 1, #page, 2 do
      k = k - weight(page[i])
      if k <= 0 then return tonumber(page[i + 1]) end
    end
    from = from + 100
  end
end

-- The time left (µs) of the pause in key p at now, 0 when none is set.
local function paused(p, now)
  local v = redis.call('GET', p)
  if v then
    local u = tonumber(v)
    if u and now < u then return u - now end
  end
  return 0
end

-- Lost state of the one-hash windows. v is HMGET h 'e', 'L', 'b', then the
-- fields the state needs. Lost when some of those fields are there and
-- some not (a partial hash), or when the caller's must lies ahead while h
-- is gone or holds another epoch than the caller's (known), unless a loss
-- was handled (at L) since the state the caller knew was created.
local function hashlost(v, now, known, must)
  local some, all = false, true
  for i = 4, #v do
    if v[i] then some = true else all = false end
  end
  if some and not all then return true end
  if must == nil or now >= must then return false end
  if not some and not v[1] then return true end
  local e, handled = tonumber(v[1]), tonumber(v[2])
  return e ~= known and not (handled and known and handled >= known)
end

-- After a loss of a one-hash window: a fresh state, held full for block µs.
local function hashreset(h, now, block)
  local b = now + block
  redis.call('DEL', h)
  redis.call('HSET', h, 'e', num(now), 'L', num(now), 'b', num(b), 't', num(now))
  expire(h, block)
  return {0, block, 0, now, 1, now, b}
end

-- The highest score in z, or now when z is empty.
local function top(z, now)
  local last = redis.call('ZRANGE', z, -1, -1, 'WITHSCORES')
  if #last == 0 then return now end
  return tonumber(last[2])
end
`

// Completion window. KEYS: z (member → instant until which it counts: lease
// expiry + Per while in flight, end + Per once released), l (member → lease
// expiry, for members in flight), h (u: units in z, c: members in l, t:
// latest instant, x: the instant until which the three keys are known to
// live, p: the next instant at which admissions prune z).
//
// These scripts are written for speed (the admission is the hot path): no
// prelude, no closures, one HMGET, and integers handed to redis.call as Lua
// numbers, which Redis formats with every digit (all are below 2^53).
//
// Pruning is lazy. u counts the units of every member still in z, expired
// or not, so it is an upper bound of the units that count: when n fits
// beside it, n fits, and nothing needs pruning to decide. z is pruned when
// n might not fit (then the decision needs the exact count) and otherwise
// at most every PRUNE_US, so expired members linger that long at most. A
// member of l whose z score (lease end + Per) has passed counts no more:
// Release, Extend and Cancel treat it as gone, as if already pruned.
//
// TTLs are refreshed lazily too. x stays at least HALF_US past the highest
// score in z; an admission refreshes the TTLs (to its own score + SLACK,
// which moves x by about SLACK - HALF) only when its score comes within
// HALF_US of x, or when it creates z or l anew (u or c is 0: Redis deletes
// an empty sorted set, and a new key has no TTL), or when x is unknown.
// Release, which can lower the highest score, sets the TTLs to the highest
// score + SLACK unless x is still within [top + HALF_US, top + SLACK], so
// an idle limiter still vanishes on time.
//
// Admit ARGV: now, n, N, Per, lease, member, epoch, must: the epoch (field
// e) and the instant until which, as far as the caller knows from its own
// admissions, the state must exist ("" when it knows of none).
//
// Lost state. Redis may lose the keys (eviction under maxmemory, a FLUSHALL,
// a DEL by hand, a restart without persistence), all of them or some. The
// three keys always share one TTL, and u > 0 exactly when z exists, c > 0
// exactly when l exists, so the script sees a partial loss: h without z
// (or z without h, or l without h, or ZCARD l differing from c). It sees a
// whole loss when the caller's must lies ahead while h is gone or has
// another epoch. Either way it rebuilds what is left (the members of l go
// back into z, u and c are recounted), takes a new epoch, and treats the
// window as full until now + Per (field b; 1 s when Per is 0): the calls it
// forgot may have ended within the last Per. The refusal sets bit 1 of the
// flags. A caller whose epoch is older than a loss already handled (field
// L, the instant of the loss) takes the new epoch without a second loss. For the window's Release of a call it no longer knows (until
// lost-instant + lease + Per, field L), see there.
//
// Limit. Field n holds N. A caller with another N is served under the
// smaller of the two, and the smaller is kept (bit 2 of the flags).
//
// Reply: {admitted, wait µs, in flight, now µs, flags, epoch}.
var completionAdmit = goredis.NewScript(`
if redis.replicate_commands then pcall(redis.replicate_commands) end
local SLACK_MS, HALF_US, PRUNE_US, LOSTMIN_US = 1000, 500000, 100000, 1000000
local z, l, h = KEYS[1], KEYS[2], KEYS[3]
local now = ARGV[1]
if now ~= '' then
  now = tonumber(now)
else
  local tm = redis.call('TIME')
  now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
end
local s = redis.call('HMGET', h, 't', 'u', 'c', 'x', 'p', 'e', 'n', 'b', 'L')
local t = tonumber(s[1])
if t and now < t then now = t end
local n, cap, per, lease, member = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local u, c, x, p, e, b = tonumber(s[2]) or 0, tonumber(s[3]), tonumber(s[4]), tonumber(s[5]), tonumber(s[6]), tonumber(s[8])
local must = tonumber(ARGV[8])
local flags = 0
local lost = false
if not t then
  lost = redis.call('EXISTS', z, l) > 0 or (must ~= nil and now < must)
else
  local zx = redis.call('EXISTS', z) == 1
  local lc = redis.call('ZCARD', l)
  if c == nil then c = lc end
  -- Another epoch than the caller's: lost, unless a loss was already
  -- handled (at L) since the state the caller knew was created.
  local known, handled = tonumber(ARGV[7]), tonumber(s[9])
  lost = (u > 0) ~= zx or lc ~= c or
    (must ~= nil and e ~= known and now < must and not (handled and known and handled >= known))
end
local stored = tonumber(s[7])
if stored and stored ~= cap then
  flags = 2
  if stored < cap then cap = stored end
end
-- Rebuild from what is left, and refuse for one Per.
local function rebuild()
  local inl = redis.call('ZRANGE', l, 0, -1, 'WITHSCORES')
  for i = 1, #inl, 2 do
    redis.call('ZADD', z, 'NX', tonumber(inl[i + 1]) + per, inl[i])
  end
  redis.call('ZREMRANGEBYSCORE', z, '-inf', now)
  local all = redis.call('ZRANGE', z, 0, -1)
  u = 0
  for i = 1, #all do u = u + tonumber(string.match(all[i], '^(%d+):')) end
  redis.call('ZREMRANGEBYSCORE', l, '-inf', now - per)
  c = redis.call('ZCARD', l)
  local block = per
  if block == 0 then block = LOSTMIN_US end
  b, e = now + block, now
  local top = b + lease + per
  local ms = math.floor((top - now) / 1000) + SLACK_MS
  redis.call('DEL', h)
  redis.call('HSET', h, 't', now, 'u', u, 'c', c, 'x', now + ms * 1000, 'p', now + PRUNE_US, 'e', e, 'n', cap, 'b', b, 'L', now)
  redis.call('PEXPIRE', z, ms)
  redis.call('PEXPIRE', l, ms)
  redis.call('PEXPIRE', h, ms)
  return {0, b - now, 0, now, flags + 1, e}
end
if lost then return rebuild() end
if b and now < b then return {0, b - now, 0, now, flags, e} end
local pv = redis.call('GET', KEYS[4])
if pv then
  pv = tonumber(pv)
  if pv and now < pv then return {0, pv - now, 0, now, flags, 0} end
end
if c == nil then c = redis.call('ZCARD', l) end
if n > cap - u or (p and now >= p) then
  local gone = redis.call('ZRANGEBYSCORE', z, '-inf', now)
  local k = #gone
  if k > 0 then
    local match = string.match
    for i = 1, k do u = u - tonumber(match(gone[i], '^(%d+):')) end
    redis.call('ZREMRANGEBYSCORE', z, '-inf', now)
    for i = 1, k, 1000 do
      c = c - redis.call('ZREM', l, unpack(gone, i, math.min(i + 999, k)))
    end
    if u < 0 then u = 0 end
    if c < 0 then c = 0 end
  end
  p = now + PRUNE_US
elseif not p then
  p = now + PRUNE_US
end
if not e then e = now end
if n <= cap - u then
  local lend = now + lease
  local sc = lend + per
  local fresh = u == 0 or c == 0
  redis.call('ZADD', z, sc, member)
  redis.call('ZADD', l, lend, member)
  u = u + n
  c = c + 1
  if fresh or not x or x < sc + HALF_US then
    local top = sc
    if not x then
      local last = redis.call('ZRANGE', z, -1, -1, 'WITHSCORES')
      if #last > 0 and tonumber(last[2]) > top then top = tonumber(last[2]) end
    elseif x - SLACK_MS * 1000 > top then
      top = x - SLACK_MS * 1000
    end
    local ms = math.floor((top - now) / 1000) + SLACK_MS
    x = now + ms * 1000
    redis.call('HSET', h, 't', now, 'u', u, 'c', c, 'x', x, 'p', p, 'e', e, 'n', cap)
    redis.call('PEXPIRE', z, ms)
    redis.call('PEXPIRE', l, ms)
    redis.call('PEXPIRE', h, ms)
  elseif flags == 2 then
    redis.call('HSET', h, 't', now, 'u', u, 'c', c, 'p', p, 'n', cap)
  else
    redis.call('HSET', h, 't', now, 'u', u, 'c', c, 'p', p)
  end
  return {1, 0, 0, now, flags, e}
end
-- Refused: z is pruned (n did not fit beside the stored count). The wait
-- is until the (n - free)-th unit in score order has left.
local need = n - (cap - u)
local wait, from, found = 0, 0, false
while not found do
  local page = redis.call('ZRANGE', z, from, from + 99, 'WITHSCORES')
  if #page == 0 then break end
  for i = 1, #page, 2 do
    need = need - tonumber(string.match(page[i], '^(%d+):'))
    if need <= 0 then wait = tonumber(page[i + 1]) - now; found = true; break end
  end
  from = from + 100
end
if not found then
  -- u counts units that z does not hold: z lost members (it was deleted
  -- and recreated by a Release, say). A loss.
  return rebuild()
end
local live = redis.call('ZRANGEBYSCORE', l, '(' .. string.format('%.0f', now), '+inf')
local inflight = 0
for i = 1, #live do inflight = inflight + tonumber(string.match(live[i], '^(%d+):')) end
local blocked = 0
if n > cap - inflight then blocked = 1 end
if t then
  redis.call('HSET', h, 't', now, 'u', u, 'c', c, 'p', p)
end
return {0, wait, blocked, now, flags, e}
`)

// Release, extend and cancel ARGV: now, Per, member, lease[, must]. Each acts only
// on a member still in l (in flight, or with a lease run out that the window
// still counts: lease end + Per is ahead).
//
// Release of a member the window does not know (in neither l nor z) within
// lease + Per of a loss (field L, see the admission) is the end of a call
// admitted before the loss: it is recorded as ended now, counting until now
// + Per, though the reply still says the call was not in flight. A Release
// that finds the hash gone and its member unknown, while the caller's must
// (ARGV[5]: the caller has calls in flight, or admitted or released one
// within the last Per) lies ahead, detects the loss itself: it rebuilds the
// state as the admission does, held full for one Per, with its call
// recorded as ended now.
var completionRelease = goredis.NewScript(`
if redis.replicate_commands then pcall(redis.replicate_commands) end
local SLACK_MS, HALF_US = 1000, 500000
local z, l, h = KEYS[1], KEYS[2], KEYS[3]
local now = ARGV[1]
if now ~= '' then
  now = tonumber(now)
else
  local tm = redis.call('TIME')
  now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
end
local s = redis.call('HMGET', h, 't', 'u', 'c', 'x', 'L')
local t = tonumber(s[1])
if t and now < t then now = t end
local per, member, lease = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]) or 0
local lend = redis.call('ZSCORE', l, member)
local ok = 1
local u, c = tonumber(s[2]) or 0, tonumber(s[3])
local lostAt = tonumber(s[5])
local must = tonumber(ARGV[5])
if not t and not lend and must and now < must then
  if not redis.call('ZSCORE', z, member) then redis.call('ZADD', z, now + per, member) end
  local inl = redis.call('ZRANGE', l, 0, -1, 'WITHSCORES')
  for i = 1, #inl, 2 do
    redis.call('ZADD', z, 'NX', tonumber(inl[i + 1]) + per, inl[i])
  end
  redis.call('ZREMRANGEBYSCORE', z, '-inf', now)
  redis.call('ZREMRANGEBYSCORE', l, '-inf', now - per)
  local all = redis.call('ZRANGE', z, 0, -1)
  u = 0
  for i = 1, #all do u = u + tonumber(string.match(all[i], '^(%d+):')) end
  c = redis.call('ZCARD', l)
  local block = per
  if block == 0 then block = 1000000 end
  local ms = math.floor((block + lease + per) / 1000) + SLACK_MS
  redis.call('HSET', h, 't', now, 'u', u, 'c', c, 'x', now + ms * 1000, 'p', now, 'e', now, 'b', now + block, 'L', now)
  redis.call('PEXPIRE', z, ms)
  redis.call('PEXPIRE', l, ms)
  redis.call('PEXPIRE', h, ms)
  return {0, now}
end
if not lend or tonumber(lend) + per <= now then
  if lend or not lostAt or now >= lostAt + lease + per or redis.call('ZSCORE', z, member) then
    return {0, now}
  end
  -- A call admitted before the state was lost: count it from its end.
  ok = 0
  redis.call('ZADD', z, now + per, member)
  u = u + tonumber(string.match(member, '^(%d+):'))
else
  redis.call('ZREM', l, member)
  if c then
    c = c - 1
    if c < 0 then c = 0 end
  end
  if redis.call('ZADD', z, now + per, member) == 1 then
    u = u + tonumber(string.match(member, '^(%d+):'))
  end
end
-- The highest score may have dropped: the TTLs are set anew unless x is
-- still within [top + HALF_US, top + SLACK].
local top = now
local last = redis.call('ZRANGE', z, -1, -1, 'WITHSCORES')
if #last > 0 then top = tonumber(last[2]) end
if not t then
  -- h is gone (a partial loss the next admission detects): never create
  -- it here, without its fields, but keep z and l from living forever.
  local ms = math.floor((top - now) / 1000) + SLACK_MS
  redis.call('PEXPIRE', z, ms)
  redis.call('PEXPIRE', l, ms)
  return {ok, now}
end
local x = tonumber(s[4])
if x and x >= top + HALF_US and x <= top + SLACK_MS * 1000 then
  if c then
    redis.call('HSET', h, 't', now, 'u', u, 'c', c)
  else
    redis.call('HSET', h, 't', now, 'u', u)
  end
  return {ok, now}
end
local d = top - now
if d < 0 then d = 0 end
if lostAt and x and x > top + SLACK_MS * 1000 then d = x - SLACK_MS * 1000 - now end
local ms = math.floor(d / 1000) + SLACK_MS
if c then
  redis.call('HSET', h, 't', now, 'u', u, 'c', c, 'x', now + ms * 1000)
else
  redis.call('HSET', h, 't', now, 'u', u, 'x', now + ms * 1000)
end
redis.call('PEXPIRE', z, ms)
redis.call('PEXPIRE', l, ms)
redis.call('PEXPIRE', h, ms)
return {ok, now}
`)

var completionExtend = goredis.NewScript(`
if redis.replicate_commands then pcall(redis.replicate_commands) end
local SLACK_MS, HALF_US = 1000, 500000
local z, l, h = KEYS[1], KEYS[2], KEYS[3]
local now = ARGV[1]
if now ~= '' then
  now = tonumber(now)
else
  local tm = redis.call('TIME')
  now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
end
local s = redis.call('HMGET', h, 't', 'u', 'x')
local t = tonumber(s[1])
if t and now < t then now = t end
local per, member, lease = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local old = redis.call('ZSCORE', l, member)
if not old then return {0, now} end
old = tonumber(old)
if old + per <= now then return {0, now} end
local u, x = tonumber(s[2]) or 0, tonumber(s[3])
local lend = math.max(old, now + lease)
local sc = lend + per
redis.call('ZADD', l, lend, member)
local added = redis.call('ZADD', z, sc, member) == 1
if added then u = u + tonumber(string.match(member, '^(%d+):')) end
if added or not x or x < sc + HALF_US then
  local top = sc
  local last = redis.call('ZRANGE', z, -1, -1, 'WITHSCORES')
  if #last > 0 and tonumber(last[2]) > top then top = tonumber(last[2]) end
  local ms = math.floor((top - now) / 1000) + SLACK_MS
  x = now + ms * 1000
  if t then redis.call('HSET', h, 't', now, 'u', u, 'x', x) end
  redis.call('PEXPIRE', z, ms)
  redis.call('PEXPIRE', l, ms)
  redis.call('PEXPIRE', h, ms)
elseif t then
  redis.call('HSET', h, 't', now, 'u', u)
end
return {1, now}
`)

var completionCancel = goredis.NewScript(`
if redis.replicate_commands then pcall(redis.replicate_commands) end
local z, l, h = KEYS[1], KEYS[2], KEYS[3]
local now = ARGV[1]
if now ~= '' then
  now = tonumber(now)
else
  local tm = redis.call('TIME')
  now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
end
local s = redis.call('HMGET', h, 't', 'u', 'c')
local t = tonumber(s[1])
if t and now < t then now = t end
local per, member = tonumber(ARGV[2]), ARGV[3]
local lend = redis.call('ZSCORE', l, member)
if not lend or tonumber(lend) + per <= now then return {0, now} end
local u, c = tonumber(s[2]) or 0, tonumber(s[3])
redis.call('ZREM', l, member)
if c then
  c = c - 1
  if c < 0 then c = 0 end
end
if redis.call('ZREM', z, member) == 1 then
  u = u - tonumber(string.match(member, '^(%d+):'))
  if u < 0 then u = 0 end
end
if t then -- never create h here: it would have no TTL
  if c then
    redis.call('HSET', h, 'u', u, 'c', c)
  else
    redis.call('HSET', h, 'u', u)
  end
end
return {1, now}
`)

// Sliding log (start window with a margin). KEYS: z (member → start +
// margin + Per, the instant until which it counts), h (u: units in z, t,
// e: epoch, n: N, b: refuse until, after a loss).
//
// Admit ARGV: now, n, N, Per, margin, member, epoch, must. Lost state is
// detected and handled as in the completion window (u > 0 exactly when z
// exists; a must ahead with h gone or of another epoch): u is recounted
// from z and the window is full until now + margin + Per. Reply as the
// completion window's.
var slidingLogAdmit = goredis.NewScript(prelude + `
local z, h = KEYS[1], KEYS[2]
local s = redis.call('HMGET', h, 't', 'u', 'e', 'n', 'b', 'L')
local t = tonumber(s[1])
local now = clock(ARGV[1])
if t and now < t then now = t end
local n, cap, per, margin, member = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local u, e, b = tonumber(s[2]) or 0, tonumber(s[3]), tonumber(s[5])
local must = tonumber(ARGV[8])
local flags = 0
local stored = tonumber(s[4])
if stored and stored ~= cap then
  flags = 2
  if stored < cap then cap = stored end
end
local zx = redis.call('EXISTS', z) == 1
local lost
if not t then
  lost = zx or (must ~= nil and now < must)
else
  local known, handled = tonumber(ARGV[7]), tonumber(s[6])
  lost = (u > 0) ~= zx or
    (must ~= nil and e ~= known and now < must and not (handled and known and handled >= known))
end
if lost then
  redis.call('ZREMRANGEBYSCORE', z, '-inf', num(now))
  local all = redis.call('ZRANGE', z, 0, -1)
  u = 0
  for i = 1, #all do u = u + weight(all[i]) end
  b, e = now + margin + per, now
  redis.call('DEL', h)
  redis.call('HSET', h, 'u', num(u), 't', num(now), 'e', num(e), 'n', num(cap), 'b', num(b), 'L', num(now))
  local ttl = math.max(top(z, now), b) - now
  expire(z, ttl); expire(h, ttl)
  return {0, b - now, 0, now, flags + 1, e}
end
if b and now < b then return {0, b - now, 0, now, flags, e} end
local pw = paused(KEYS[3], now)
if pw > 0 then return {0, pw, 0, now, flags, 0} end
if not e then e = now end
u = u - prune(z, nil, now)
if u < 0 then u = 0 end
local ok, wait = 0, 0
if n <= cap - u then
  redis.call('ZADD', z, num(now + margin + per), member)
  u = u + n
  ok = 1
else
  wait = (kth(z, n - (cap - u)) or now) - now
  if wait <= 0 then wait = per end
end
redis.call('HSET', h, 'u', num(u), 't', num(now), 'e', num(e), 'n', num(cap))
local ttl = top(z, now) - now
if b and b > now + ttl then ttl = b - now end
expire(z, ttl); expire(h, ttl)
return {ok, wait, 0, now, flags, e}
`)

// Cancel ARGV: now, member.
var slidingLogCancel = goredis.NewScript(prelude + `
local z, h = KEYS[1], KEYS[2]
local member = ARGV[2]
if redis.call('ZREM', z, member) == 0 then return {0, 0} end
local u = hnum(h, 'u')
if not u then return {1, 0} end -- never create h here: it would have no TTL
u = u - weight(member)
if u < 0 then u = 0 end
redis.call('HSET', h, 'u', num(u))
return {1, 0}
`)

// The one-hash windows (GCRA, token bucket, fixed window, sliding window
// counter) keep e (epoch), L (instant of the latest loss) and b (refuse
// until, after a loss) beside their state, and take the caller's epoch and
// must as their last two ARGV. A loss (hashlost: a partial hash, or a
// whole one the caller knows must exist) resets the state, held full for
// the time the window takes to forget (Per; burst·I for GCRA). Replies are
// {admitted, wait µs, in flight, now µs, flags, epoch, until µs}: until is
// the instant the state must live to (its TTL, less the slack).
//
// GCRA. KEYS: h (tat: theoretical arrival time, a: latest admission, t).
// A missing hash is an idle limiter (a full bucket).
//
// Admit ARGV: now, n, emission interval I (µs per unit), burst, epoch, must.
var gcraAdmit = goredis.NewScript(prelude + `
local h = KEYS[1]
local n, emit, burst = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local v = redis.call('HMGET', h, 'e', 'L', 'b', 'tat', 'a')
local now = latest(h, clock(ARGV[1]))
if hashlost(v, now, tonumber(ARGV[5]), tonumber(ARGV[6])) then return hashreset(h, now, burst * emit) end
local e, b = tonumber(v[1]) or now, tonumber(v[3])
if b and now < b then return {0, b - now, 0, now, 0, e, b} end
local pw = paused(KEYS[2], now)
if pw > 0 then return {0, pw, 0, now, 0, 0, 0} end
local tat = hnum(h, 'tat') or now
local adm = hnum(h, 'a') or now
local tol = (burst - n) * emit
local ok, wait = 0, 0
if tat - now <= tol then
  tat = math.max(tat, now) + n * emit
  adm = math.max(adm, now)
  ok = 1
else
  wait = tat - tol - now
end
redis.call('HSET', h, 'tat', num(tat), 'a', num(adm), 't', num(now), 'e', num(e))
expire(h, tat - now)
return {ok, wait, 0, now, 0, e, math.max(tat, now)}
`)

// Cancel ARGV: now (unused), admission instant, n, I. The TAT moves back
// when no admission came after the cancelled one.
var gcraCancel = goredis.NewScript(prelude + `
local h = KEYS[1]
local at, n, emit = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local tat, adm = hnum(h, 'tat'), hnum(h, 'a')
if not tat or at < adm then return {0, 0} end
redis.call('HSET', h, 'tat', num(tat - n * emit))
return {1, 0}
`)

// Token bucket. KEYS: h (k: whole tokens, f: the next token's refill so
// far in units·µs, 0 <= f < Per; last: instant refilled to, also the
// latest seen; a: latest admission). A missing hash is a full bucket.
//
// Admit ARGV: now, n, N, Per, burst, epoch, must.
var tokenBucketAdmit = goredis.NewScript(prelude + `
local h = KEYS[1]
local n, rate, per, burst = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local now = clock(ARGV[1])
local v = redis.call('HMGET', h, 'e', 'L', 'b', 'last', 'k', 'f', 'a')
local t = tonumber(redis.call('HGET', h, 't') or 0)
if now < t then now = t end
local last = tonumber(v[4])
if last and now < last then now = last end
if hashlost(v, now, tonumber(ARGV[6]), tonumber(ARGV[7])) then return hashreset(h, now, per) end
local e, b = tonumber(v[1]) or now, tonumber(v[3])
if b and now < b then return {0, b - now, 0, now, 0, e, b} end
local k, f, adm = burst, 0, now
if last then
  k, f, adm = tonumber(v[5]), tonumber(v[6]), tonumber(v[7])
end
local pw = paused(KEYS[2], now)
if pw > 0 then return {0, pw, 0, now, 0, 0, 0} end
if last and now > last then
  if k >= burst then
    k, f = burst, 0
  else
    -- floor((e*N + f) / Per) new tokens, the remainder carried in f.
    local q, r = muldiv(now - last, rate, per)
    if r >= per - f then r = r - (per - f); q = q + 1 else r = r + f end
    if q >= burst - k then k, f = burst, 0 else k, f = k + q, r end
  end
end
local ok, wait = 0, 0
if n <= k then
  k = k - n
  adm = now
  ok = 1
else
  -- the smallest e with e*N + f >= (n - k)*Per
  wait = ceilwait(n - k, per, f, rate)
end
redis.call('HSET', h, 'k', num(k), 'f', num(f), 'last', num(now), 'a', num(adm), 'e', num(e), 't', num(now))
local full = 0
if k < burst then full = ceilwait(burst - k, per, f, rate) end
expire(h, full)
return {ok, wait, 0, now, 0, e, now + full}
`)

// Cancel ARGV: now (unused), admission instant, n, burst. The tokens go back
// (up to the burst) when no admission came after the cancelled one.
var tokenBucketCancel = goredis.NewScript(prelude + `
local h = KEYS[1]
local at, n, burst = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local k, adm = hnum(h, 'k'), hnum(h, 'a')
if not k or at < adm then return {0, 0} end
k = k + math.min(n, burst - k)
if k >= burst then
  redis.call('HSET', h, 'k', num(burst), 'f', '0')
else
  redis.call('HSET', h, 'k', num(k))
end
return {1, 0}
`)

// Fixed window, aligned to the Unix epoch. KEYS: h (w: window index
// floor(now / Per), c: units counted in it, t).
//
// Admit ARGV: now, n, N, Per, epoch, must.
var fixedWindowAdmit = goredis.NewScript(prelude + `
local h = KEYS[1]
local n, cap, per = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local v = redis.call('HMGET', h, 'e', 'L', 'b', 'w', 'c')
local now = latest(h, clock(ARGV[1]))
if hashlost(v, now, tonumber(ARGV[5]), tonumber(ARGV[6])) then return hashreset(h, now, per) end
local e, b = tonumber(v[1]) or now, tonumber(v[3])
if b and now < b then return {0, b - now, 0, now, 0, e, b} end
local pw = paused(KEYS[2], now)
if pw > 0 then return {0, pw, 0, now, 0, 0, 0} end
local idx = fdiv(now, per)
local win, used = hnum(h, 'w'), hnum(h, 'c') or 0
if not win or idx > win then win, used = idx, 0 end
local ok, wait = 0, 0
if used + n <= cap then
  used = used + n
  ok = 1
else
  wait = (win + 1) * per - now
end
redis.call('HSET', h, 'w', num(win), 'c', num(used), 't', num(now), 'e', num(e))
expire(h, (win + 1) * per - now)
return {ok, wait, 0, now, 0, e, (win + 1) * per}
`)

// Cancel ARGV: now (unused), admission instant, n, Per.
var fixedWindowCancel = goredis.NewScript(prelude + `
local h = KEYS[1]
local at, n, per = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local win, used = hnum(h, 'w'), hnum(h, 'c')
if not win or fdiv(at, per) ~= win then return {0, 0} end
redis.call('HSET', h, 'c', num(used - math.min(n, used)))
return {1, 0}
`)

// Sliding window counter. KEYS: h (w: current window index, p and c: units
// in windows w-1 and w, t).
//
// Admit ARGV: now, n, N, Per, epoch, must.
var slidingCounterAdmit = goredis.NewScript(prelude + `
local h = KEYS[1]
local n, cap, per = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local v = redis.call('HMGET', h, 'e', 'L', 'b', 'w', 'p', 'c')
local now = latest(h, clock(ARGV[1]))
if hashlost(v, now, tonumber(ARGV[5]), tonumber(ARGV[6])) then return hashreset(h, now, per) end
local e, b = tonumber(v[1]) or now, tonumber(v[3])
if b and now < b then return {0, b - now, 0, now, 0, e, b} end
local pw = paused(KEYS[2], now)
if pw > 0 then return {0, pw, 0, now, 0, 0, 0} end
local idx = fdiv(now, per)
local win, prev, cur = hnum(h, 'w'), hnum(h, 'p') or 0, hnum(h, 'c') or 0
if not win or idx > win + 1 then
  win, prev, cur = idx, 0, 0
elseif idx == win + 1 then
  win, prev, cur = idx, cur, 0
end
-- prev*(Per - elapsed) + (cur + n)*Per <= N*Per, i.e.
-- ceil(prev*(Per - elapsed)/Per) <= N - cur - n
local function fits(prev, cur, elapsed)
  local room = cap - cur - n
  if room < 0 then return false end
  if prev == 0 then return true end
  local q, r = muldiv(prev, per - elapsed, per)
  if r > 0 then q = q + 1 end
  return q <= room
end
local elapsed = math.min(math.max(now - win * per, 0), per)
local ok, wait = 0, 0
if fits(prev, cur, elapsed) then
  cur = cur + n
  ok = 1
else
  -- the earliest instant at which n units fit if nothing else is admitted
  local start, p, c = win * per, prev, cur
  for _ = 1, 3 do
    local room = cap - c - n
    if room >= 0 then
      local e = 0
      if p > 0 then e = math.max(per - muldiv(room, per, p), 0) end
      if e < per then wait = start + e - now; break end
    end
    start, p, c = start + per, c, 0
  end
end
redis.call('HSET', h, 'w', num(win), 'p', num(prev), 'c', num(cur), 't', num(now), 'e', num(e))
expire(h, (win + 2) * per - now)
return {ok, wait, 0, now, 0, e, (win + 2) * per}
`)

// Cancel ARGV: now (unused), admission instant, n, Per.
var slidingCounterCancel = goredis.NewScript(prelude + `
local h = KEYS[1]
local at, n, per = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local win = hnum(h, 'w')
if not win then return {0, 0} end
local idx = fdiv(at, per)
local f
if idx == win then f = 'c' elseif idx == win - 1 then f = 'p' else return {0, 0} end
local v = hnum(h, f) or 0
redis.call('HSET', h, f, num(v - math.min(n, v)))
return {1, 0}
`)

// Pause. KEYS: p (the pause key: the instant the pause ends). ARGV: now, d
// (µs). The pause ends at now + d unless one already set ends later; the
// key lives until the end of the pause (SLACK_MS more). Reply: {end µs,
// now µs}.
var pauseScript = goredis.NewScript(prelude + `
local p = KEYS[1]
local now = clock(ARGV[1])
local d = tonumber(ARGV[2])
local pend = now + d
local cur = tonumber(redis.call('GET', p) or 0) or 0
if pend > cur then
  redis.call('SET', p, num(pend), 'PX', num(math.floor(d / 1000) + SLACK_MS))
  cur = pend
end
return {cur, now}
`)
