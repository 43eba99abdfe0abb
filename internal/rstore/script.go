package rstore

import goredis "github.com/redis/go-redis/v9"

// The Lua side. Every script takes KEYS in groups of three per charge (the
// limiter's hash H, its sorted set of leases F, its sorted set log Z) and
// ARGV as:
//
//	ARGV[1]  the instant in µs since the Unix epoch, or "" for the server's TIME
//	ARGV[2]  the call's token (16 hex digits) or "" when the script takes none
//	ARGV[3]  the lease in µs, or the script's own argument (pause, used)
//	ARGV[4]  the number of charges
//	then per charge perArg values: spec, kind, N, Per µs, p1, conc, weight, ttl ms
//
// p1 is the burst of the buckets and GCRA (0 for a pacer), the margin in µs
// of the sliding log, the block count of the sub-window counter.
//
// H fields: s spec, S "1" when SetLimit wrote s, p pause end µs, h held-full
// end µs (lost state), m latest instant seen µs, f units in flight (leased),
// z units in the log Z, w window or block index, u units counted (fixed
// windows), v and c the previous and current windows' units (sliding window
// counter; c is the sum for the sub-window counter, b<slot> its blocks), t
// TAT (GCRA) or tokens (buckets), r refill fraction in units·µs, l latest
// refill instant, a latest admission instant, q reconciliation counter.
//
// A lease is the member token:weight of F, scored by its deadline. A log
// entry is the member token:weight of Z (or r<q>:weight for units taken on
// a server's word), scored by its end (completion) or start + margin
// (sliding log).
const perArg = 8

const prelude = `
local NC = tonumber(ARGV[4])
local now
if ARGV[1] ~= '' then now = tonumber(ARGV[1]) else
  local t = redis.call('TIME'); now = tonumber(t[1]) * 1000000 + tonumber(t[2]) end
local function fdiv(a, b) return math.floor(a / b) end
local function wt(m) return tonumber(string.match(m, ':(%d+)$')) end

-- lim(i) loads charge i: its parameters (the stored spec when SetLimit wrote
-- one) and its hash; nil, err for a spec that disagrees with the stored one.
local KF = {
  {'m','f','z'}, {'m','f','w','u'}, {'m','f','z'}, {'f','w','u'}, {'m','f','w','v','c'},
  {'f','w','c'}, {'f','t','r','l','a'}, {'f','t','r','l','a'}, {'f','t','a'}}
local function lim(i, adopt)
  local b = 4 + (i - 1) * 8
  local L = {i = i, H = KEYS[3*i-2], F = KEYS[3*i-1], Z = KEYS[3*i],
    spec = ARGV[b+1], kind = tonumber(ARGV[b+2]), N = tonumber(ARGV[b+3]),
    per = tonumber(ARGV[b+4]), p1 = tonumber(ARGV[b+5]), conc = tonumber(ARGV[b+6]),
    n = tonumber(ARGV[b+7]), ttl = tonumber(ARGV[b+8]), dirty = {}}
  local fs = KF[L.kind]
  if fs == nil then return nil, '' end
  local v = redis.call('HMGET', L.H, 's', 'S', 'p', 'h', 'x', unpack(fs))
  L.new = (v[1] == false)
  if not L.new and v[1] ~= L.spec then
    if v[2] == '1' and adopt then
      local k, N, per, p1, conc = string.match(v[1], '^(%d+)/(%d+)/(%d+)/(%d+)/(%d+)$')
      if k == nil or KF[tonumber(k)] == nil then return nil, v[1] end
      L.spec, L.kind, L.N, L.per, L.p1, L.conc = v[1], tonumber(k), tonumber(N), tonumber(per), tonumber(p1), tonumber(conc)
      L.ttl = math.max(L.ttl, math.ceil(L.per * (math.max(L.p1, L.N) / math.max(L.N, 1) + 2) / 1000) + 1000)
      L.adopted = true
      if KF[L.kind] ~= fs then
        fs = KF[L.kind]
        v = redis.call('HMGET', L.H, 's', 'S', 'p', 'h', 'x', unpack(fs))
      end
    else
      return nil, v[1]
    end
  end
  L.p, L.h, L.x = tonumber(v[3]), tonumber(v[4]), tonumber(v[5])
  for j = 1, #fs do L[fs[j]] = tonumber(v[5 + j]) end
  L.f = L.f or 0
  L.z = L.z or 0
  L.t0 = math.max(now, L.m or 0) -- time never goes back for one limiter
  L.usesm = (fs[1] == 'm')
  L.leased = L.kind == 1 or L.kind == 2 or L.conc > 0
  L.logged = L.kind == 1 or L.kind == 3
  return L
end

local function set(L, k, v) L[k] = v; L.dirty[k] = true end

-- roll moves a fixed window on to the window of instant t.
local function roll(L, t)
  local k = L.kind
  if k == 2 or k == 4 then
    local idx = fdiv(t, L.per)
    if L.w == nil or idx > L.w then
      set(L, 'w', idx)
      if k == 2 then set(L, 'u', L.f) else set(L, 'u', 0) end
    end
  elseif k == 5 then
    local idx = fdiv(t, L.per)
    if L.w == nil then set(L, 'w', idx); set(L, 'v', 0); set(L, 'c', 0)
    elseif idx == L.w + 1 then set(L, 'v', L.c or 0); set(L, 'c', 0); set(L, 'w', idx)
    elseif idx > L.w + 1 then set(L, 'v', 0); set(L, 'c', 0); set(L, 'w', idx) end
  elseif k == 6 then
    local size = math.ceil(L.per / L.p1)
    local idx = fdiv(t, size)
    if L.w == nil or idx - L.w >= L.p1 then
      if L.w ~= nil then
        local del = {}
        for s = 0, L.p1 - 1 do del[#del+1] = 'b' .. s end
        redis.call('HDEL', L.H, unpack(del))
      end
      set(L, 'c', 0); set(L, 'w', idx)
      return
    end
    while L.w < idx do
      L.w = L.w + 1
      local s = 'b' .. (L.w % L.p1)
      local x = tonumber(redis.call('HGET', L.H, s))
      if x then L.c = L.c - x; redis.call('HDEL', L.H, s) end
    end
    L.dirty.w = true; L.dirty.c = true
  end
end

-- sweep ends the leases that ran out by now: a completion window logs them
-- as ended at their deadline, a fixed completion window rolls to it first.
local function sweep(L)
  if not L.leased or L.f <= 0 then return end
  local exp = redis.call('ZRANGEBYSCORE', L.F, '-inf', L.t0, 'WITHSCORES')
  if #exp == 0 then
    if redis.call('EXISTS', L.F) == 0 then L.lost = true end
    return
  end
  for j = 1, #exp, 2 do
    local m, d = exp[j], tonumber(exp[j+1])
    local n = wt(m)
    if L.kind == 2 then roll(L, d) end
    set(L, 'f', math.max(L.f - n, 0))
    if L.kind == 1 then
      redis.call('ZADD', L.Z, d, m)
      if L.z == 0 then L.fresh = true end
      set(L, 'z', L.z + n)
    end
  end
  redis.call('ZREMRANGEBYSCORE', L.F, '-inf', L.t0)
end

-- prune drops from the log the entries that left the window.
local function prune(L)
  if not L.logged or L.z <= 0 then return end
  local cut = L.t0 - L.per
  local old = redis.call('ZRANGEBYSCORE', L.Z, '-inf', cut)
  if #old == 0 then
    if redis.call('EXISTS', L.Z) == 0 then L.lost = true end
    return
  end
  local sum = 0
  for j = 1, #old do sum = sum + wt(old[j]) end
  set(L, 'z', math.max(L.z - sum, 0))
  redis.call('ZREMRANGEBYSCORE', L.Z, '-inf', cut)
end

-- refill brings a bucket to instant t (exact: q = ⌊(e·N + r)/Per⌋ with e
-- split at whole Pers, so no product exceeds Per·(N+1)).
local function refill(L, t)
  if L.l == nil then set(L, 'l', t); set(L, 'a', t); set(L, 't', L.p1); set(L, 'r', 0); return end
  if t <= L.l then return end
  local e = t - L.l
  set(L, 'l', t)
  if L.t >= L.p1 then set(L, 't', L.p1); set(L, 'r', 0); return end
  local a = fdiv(e, L.per)
  local b = e - a * L.per
  local x = b * L.N + (L.r or 0)
  local q = a * L.N + fdiv(x, L.per)
  if q >= L.p1 - L.t then set(L, 't', L.p1); set(L, 'r', 0); return end
  set(L, 't', L.t + q); set(L, 'r', x % L.per)
end

local function emit(L) return math.ceil(L.per / L.N) end

-- prepare brings L's state to now (leases swept, log pruned, windows
-- rolled, bucket refilled) and detects lost state.
local function prepare(L)
  if L.new and (redis.call('EXISTS', L.F) == 1 or redis.call('EXISTS', L.Z) == 1) then L.lost = true end
  sweep(L)
  prune(L)
  local k = L.kind
  if k == 2 or k == 4 or k == 5 or k == 6 then roll(L, L.t0)
  elseif k == 7 or k == 8 then refill(L, L.t0)
  elseif k == 9 and L.t == nil then set(L, 't', L.t0); set(L, 'a', L.t0) end
  if L.lost then
    -- Rebuild from what is left and hold the limiter full for the time it
    -- forgets: calls the state forgot may have ended within the last Per.
    local f, z = 0, 0
    local fl = redis.call('ZRANGE', L.F, 0, -1)
    for j = 1, #fl do f = f + wt(fl[j]) end
    if L.logged then
      local zl = redis.call('ZRANGE', L.Z, 0, -1)
      for j = 1, #zl do z = z + wt(zl[j]) end
    end
    set(L, 'f', f); set(L, 'z', z)
    L.fresh = true
    set(L, 'h', L.t0 + math.max(L.per + (k == 3 and L.p1 or 0), 1000000))
  end
end

-- lease bound: the wait until the oldest lease runs out, plus Per for the
-- windows that count an end for Per.
local function leasewait(L)
  local o = redis.call('ZRANGE', L.F, 0, 0, 'WITHSCORES')
  local w = 0
  if #o == 2 then w = tonumber(o[2]) - L.t0 end
  if L.kind == 1 then w = w + L.per end
  return math.max(w, 1)
end

-- logwait: the wait until need units of the log left the window.
local function logwait(L, need)
  local from = 0
  while true do
    local es = redis.call('ZRANGE', L.Z, from, from + 63, 'WITHSCORES')
    if #es == 0 then return L.per end
    for j = 1, #es, 2 do
      need = need - wt(es[j])
      if need <= 0 then return math.max(tonumber(es[j+1]) + L.per - L.t0, 1) end
    end
    from = from + 64
  end
end

-- check decides charge L at now: true; or false, the wait in µs, and
-- whether only a release can make room.
local function check(L)
  local n, N, t = L.n, L.N, L.t0
  if L.p ~= nil and L.p > t then L.paused = true; return false, L.p - t, false end
  if L.h ~= nil and L.h > t then L.lost = true; return false, L.h - t, false end
  if n == 0 then return true end
  if L.conc > 0 and n > L.conc - L.f then return false, leasewait(L), true end
  local k = L.kind
  if k == 1 then
    if n <= N - L.f - L.z then return true end
    if n > N - L.f then return false, leasewait(L), true end
    if L.per == 0 then return false, leasewait(L), true end
    return false, logwait(L, n - (N - L.f - L.z)), false
  elseif k == 3 then
    if n <= N - L.z then return true end
    return false, logwait(L, n - (N - L.z)), false
  elseif k == 2 or k == 4 then
    if n <= N - L.u then return true end
    if k == 2 and n > N - L.f then return false, leasewait(L), true end
    return false, (L.w + 1) * L.per - t, false
  elseif k == 5 then
    local per, e = L.per, math.min(math.max(t - L.w * L.per, 0), L.per)
    if L.v * (per - e) + (L.c + n) * per <= N * per then return true end
    local start, prev, cur = L.w * per, L.v, L.c
    for _ = 1, 3 do
      local room = N - n - cur
      if room >= 0 then
        local ee = 0
        if prev > 0 then ee = math.max(per - fdiv(room * per, prev), 0) end
        if ee < per then return false, math.max(start + ee - t, 1), false end
      end
      start, prev, cur = start + per, cur, 0
    end
    return false, math.max(start - t, 1), false
  elseif k == 6 then
    if n <= N - L.c then return true end
    local size = math.ceil(L.per / L.p1)
    local left = L.c
    for j = 1, L.p1 do
      local x = tonumber(redis.call('HGET', L.H, 'b' .. ((L.w - L.p1 + j) % L.p1))) or 0
      left = left - x
      if n <= N - left then return false, math.max(j * size - (t - L.w * size), 1), false end
    end
    return false, L.per, false
  elseif k == 7 or k == 8 then
    if n <= L.t then return true end
    local need = (n - L.t) * L.per - (L.r or 0)
    return false, math.max(math.ceil(need / N), 1), false
  elseif k == 9 then
    local em = emit(L)
    local tol = 0
    if L.p1 > 0 then tol = (L.p1 - n) * em end
    if L.t - t <= tol then return true end
    return false, L.t - tol - t, false
  end
  return false, 0, false
end

-- commit records the admission of L's charge under token tok.
local function commit(L, tok, lease)
  local n, t, k = L.n, L.t0, L.kind
  if L.usesm then set(L, 'm', t) end
  if n == 0 then return end
  if L.leased then
    redis.call('ZADD', L.F, t + lease, tok .. ':' .. n)
    if L.f == 0 then L.fresh = true end
    set(L, 'f', L.f + n)
  end
  if k == 2 or k == 4 then set(L, 'u', L.u + n)
  elseif k == 3 then
    redis.call('ZADD', L.Z, t + L.p1, tok .. ':' .. n)
    if L.z == 0 then L.fresh = true end
    set(L, 'z', L.z + n)
  elseif k == 5 then set(L, 'c', L.c + n)
  elseif k == 6 then redis.call('HINCRBY', L.H, 'b' .. (L.w % L.p1), n); set(L, 'c', L.c + n)
  elseif k == 7 or k == 8 then set(L, 't', L.t - n); set(L, 'a', t)
  elseif k == 9 then set(L, 't', math.max(L.t, t) + n * emit(L)); set(L, 'a', math.max(L.a or t, t)) end
end

-- save writes L's changed fields and refreshes the TTLs of all three keys
-- when the expiry last set (field x) is less than the TTL minus its one
-- second of slack away (so at most once a second on a busy limiter), when
-- the hash is new, or when a key was just created (fresh).
local function save(L)
  local ttl = L.ttl
  if L.p ~= nil and L.p > L.t0 then ttl = math.max(ttl, math.ceil((L.p - L.t0) / 1000) + 1000) end
  if L.h ~= nil and L.h > L.t0 then ttl = math.max(ttl, math.ceil((L.h - L.t0) / 1000) + 1000) end
  local refresh = L.new or L.fresh or L.x == nil or L.x - L.t0 < (ttl - 1000) * 1000
  if refresh then set(L, 'x', L.t0 + ttl * 1000) end
  local args = {}
  -- Numbers go as they are: Redis formats them exactly (%.17g), plain
  -- digits below 2^53.
  for k, _ in pairs(L.dirty) do args[#args+1] = k; args[#args+1] = L[k] end
  if L.new then args[#args+1] = 's'; args[#args+1] = L.spec end
  if #args > 0 then redis.call('HSET', L.H, unpack(args)) end
  if refresh then
    redis.call('PEXPIRE', L.H, ttl)
    if L.leased and L.f > 0 then redis.call('PEXPIRE', L.F, ttl) end
    if L.logged and L.z > 0 then redis.call('PEXPIRE', L.Z, ttl) end
  end
end

local function loadall(adopt)
  local Ls = {}
  for i = 1, NC do
    local L, stored = lim(i, adopt)
    if L == nil then return nil, {-1, i, stored} end
    Ls[i] = L
  end
  return Ls
end
`

// admitScript: ARGV[2] the token, ARGV[3] the lease in µs. Reply {1, now,
// 0, 0, flags, adopted} or {0, now, wait µs, refuser, flags, adopted}, or
// {-1, charge, stored spec} for a spec mismatch. flags: 1 only a release
// can help, 2 paused, 4 state lost, 8 a lease was taken. adopted: the
// indices of adopted specs, comma-separated.
var admitScript = goredis.NewScript(prelude + `
local Ls, err = loadall(true)
if Ls == nil then return err end
local ok, wait, refuser, flags, adopted = true, -1, 0, 0, ''
for i = 1, NC do
  local L = Ls[i]
  prepare(L)
  if L.adopted then adopted = adopted .. i .. ',' end
  local yes, w, rel = check(L)
  if not yes then
    ok = false
    if rel then flags = bit.bor(flags, 1) end
    if L.paused then flags = bit.bor(flags, 2) end
    if w > wait then wait, refuser = w, i end
  end
  if L.lost then flags = bit.bor(flags, 4) end
end
if ok then
  local lease = tonumber(ARGV[3])
  for i = 1, NC do
    local L = Ls[i]
    commit(L, ARGV[2], lease)
    if L.leased and L.n > 0 then flags = bit.bor(flags, 8) end
    save(L)
  end
  return {1, now, 0, 0, flags, adopted}
end
for i = 1, NC do
  local L = Ls[i]
  L.dirty.m = nil
  if next(L.dirty) ~= nil then save(L) end
end
return {0, now, math.max(wait, 1), refuser, flags, adopted}
`)

// releaseScript ends token's call now. Reply: the number of charges whose
// lease was no longer there.
var releaseScript = goredis.NewScript(prelude + `
local Ls, err = loadall(true)
if Ls == nil then return err end
local missing = 0
for i = 1, NC do
  local L = Ls[i]
  if L.leased and L.n > 0 then
    local m = ARGV[2] .. ':' .. L.n
    if redis.call('ZREM', L.F, m) == 1 then
      if L.kind == 2 then roll(L, L.t0) end
      set(L, 'f', math.max(L.f - L.n, 0))
      if L.kind == 1 and L.per > 0 then
        redis.call('ZADD', L.Z, L.t0, m)
        if L.z == 0 then L.fresh = true end
        set(L, 'z', L.z + L.n)
      end
      if L.usesm then set(L, 'm', L.t0) end
      save(L)
    else
      missing = missing + 1
    end
  end
end
return missing
`)

// cancelScript takes back token's admission at ARGV[3] µs. Reply as
// releaseScript.
var cancelScript = goredis.NewScript(prelude + `
local Ls, err = loadall(true)
if Ls == nil then return err end
local at = tonumber(ARGV[3])
local missing = 0
for i = 1, NC do
  local L = Ls[i]
  local n, k = L.n, L.kind
  if n > 0 then
    local m = ARGV[2] .. ':' .. n
    local gone = false
    if L.leased then
      if redis.call('ZREM', L.F, m) == 1 then set(L, 'f', math.max(L.f - n, 0)) else gone = true; missing = missing + 1 end
    end
    if not gone then
      if k == 2 or k == 4 then
        if L.w ~= nil and fdiv(at, L.per) == L.w then set(L, 'u', math.max(L.u - n, 0)) end
      elseif k == 3 then
        if redis.call('ZREM', L.Z, m) == 1 then set(L, 'z', math.max(L.z - n, 0)) end
      elseif k == 5 and L.w ~= nil then
        local idx = fdiv(at, L.per)
        if idx == L.w then set(L, 'c', math.max(L.c - n, 0)) elseif idx == L.w - 1 then set(L, 'v', math.max(L.v - n, 0)) end
      elseif k == 6 and L.w ~= nil then
        local size = math.ceil(L.per / L.p1)
        local idx = fdiv(at, size)
        if idx <= L.w and idx > L.w - L.p1 then
          local s = 'b' .. (idx % L.p1)
          local x = tonumber(redis.call('HGET', L.H, s)) or 0
          local y = math.min(n, x)
          if y > 0 then redis.call('HINCRBY', L.H, s, -y); set(L, 'c', L.c - y) end
        end
      elseif (k == 7 or k == 8) and L.t ~= nil then
        if at >= (L.a or 0) then
          set(L, 't', L.t + math.min(n, L.p1 - L.t))
          if L.t == L.p1 then set(L, 'r', 0) end
        end
      elseif k == 9 and L.t ~= nil then
        if at >= (L.a or 0) then set(L, 't', math.max(L.t - n * emit(L), L.a or 0)) end
      end
      if next(L.dirty) ~= nil then save(L) end
    end
  end
end
return missing
`)

// extendScript moves token's leases to now + ARGV[3] µs. Reply as
// releaseScript.
var extendScript = goredis.NewScript(prelude + `
local Ls, err = loadall(true)
if Ls == nil then return err end
local missing = 0
for i = 1, NC do
  local L = Ls[i]
  if L.leased and L.n > 0 then
    local m = ARGV[2] .. ':' .. L.n
    if redis.call('ZSCORE', L.F, m) and redis.call('ZSCORE', L.F, m) + 0 > L.t0 then
      redis.call('ZADD', L.F, 'XX', L.t0 + tonumber(ARGV[3]), m)
      local ttl = math.max(L.ttl, math.ceil(tonumber(ARGV[3]) / 1000) + 1000)
      redis.call('PEXPIRE', L.F, ttl)
      if redis.call('PTTL', L.H) < ttl then redis.call('PEXPIRE', L.H, ttl) end
    else
      missing = missing + 1
    end
  end
end
return missing
`)

// pauseScript holds charge 1's limiter until now + ARGV[3] µs; a pause
// only extends. Reply: the pause's end in µs.
var pauseScript = goredis.NewScript(prelude + `
local Ls, err = loadall(true)
if Ls == nil then return err end
local L = Ls[1]
local untilus = L.t0 + tonumber(ARGV[3])
if L.p == nil or untilus > L.p then set(L, 'p', untilus) end
save(L)
return L.p
`)

// reconcileScript tightens charge 1's limiter with a server's count of
// ARGV[3] units in its current window. Reply: the units added.
var reconcileScript = goredis.NewScript(prelude + `
local Ls, err = loadall(true)
if Ls == nil then return err end
local L = Ls[1]
prepare(L)
local used, N, k = math.min(tonumber(ARGV[3]), L.N), L.N, L.kind
local extra = 0
if k == 1 or k == 3 then
  extra = math.max(used - L.f - L.z, 0)
  if extra > 0 then
    local q = redis.call('HINCRBY', L.H, 'q', 1)
    redis.call('ZADD', L.Z, L.t0, 'r' .. q .. ':' .. extra)
    if L.z == 0 then L.fresh = true end
    set(L, 'z', L.z + extra)
  end
elseif k == 2 or k == 4 then
  extra = math.max(used - L.u, 0); set(L, 'u', L.u + extra)
elseif k == 5 then
  extra = math.max(used - L.c, 0); set(L, 'c', L.c + extra)
elseif k == 6 then
  extra = math.max(used - L.c, 0)
  if extra > 0 then redis.call('HINCRBY', L.H, 'b' .. (L.w % L.p1), extra); set(L, 'c', L.c + extra) end
elseif k == 7 or k == 8 then
  local cap = L.p1 - math.min(tonumber(ARGV[3]), L.p1)
  if L.t > cap then extra = L.t - cap; set(L, 't', cap) end
elseif k == 9 then
  local b = L.p1
  if b == 0 then b = 1 end
  local tat = L.t0 + math.min(tonumber(ARGV[3]), b) * emit(L)
  if tat > L.t then extra = math.ceil((tat - L.t) / emit(L)); set(L, 't', tat) end
end
if L.usesm then set(L, 'm', L.t0) end
save(L)
return extra
`)

// setLimitScript stores charge 1's spec as the limiter's, for every process.
var setLimitScript = goredis.NewScript(`
redis.call('HSET', KEYS[1], 's', ARGV[5], 'S', '1')
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[12]) then redis.call('PEXPIRE', KEYS[1], ARGV[12]) end
return 1
`)
