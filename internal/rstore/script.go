package rstore

import (
	"strconv"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/internal/rspec"
)

// The Lua side. Every script takes KEYS in groups of three per charge (the
// limiter's hash H, its sorted set of leases F, its sorted set log Z), then
// the scope's epoch key E (KEYS[3·NC+1]), and ARGV as:
//
//	ARGV[1]  the instant in µs since the Unix epoch, or "" for the server's TIME
//	ARGV[2]  the call's token (16 hex digits) or "" when the script takes none
//	ARGV[3]  the lease in µs, "at:lease" (releaseScript), or the script's own argument (pause, used)
//	ARGV[4]  the number of charges
//	then per charge perArg values: spec, kind, N, Per µs, p1, conc, weight, ttl ms
//
// p1 is the burst of the buckets and GCRA (0 for a pacer), the margin in µs
// of the sliding log, the block count of the sub-window counter. The
// admission script takes three more: the scope's epoch as this process
// last saw it ("" when it saw none), the instant in µs until which this
// process knows E exists ("" when it knows nothing), and the instant in µs
// after which the admission is refused, its caller gone ("" for none);
// then "carry" for Store.Carry. releaseScript takes, after the charges'
// values, the actual weights of a Settle, or weights of 0 and the mode
// ("cancel", "extend").
//
// E holds "id:l": id names the scope's state since E was made (it is the
// token of the admission that made it), l is 0, or the instant in µs a
// whole loss of the scope's state was found. E lives as long as any key of
// the scope: every script that sets a hash's TTL extends E's (PEXPIRE GT).
//
// H fields: s spec, S "1" when SetLimit wrote s, p pause end µs, h held-full
// end µs (lost state), E the epoch (the epoch key's value) the state was
// last brought to, m latest instant seen µs, f units in flight (leased),
// z units in the log Z, w window or block index, u units counted (fixed
// windows), v and c the previous and current windows' units (sliding window
// counter; c is the sum for the sub-window counter, b<slot> its blocks), t
// TAT (GCRA) or tokens (buckets), r refill fraction in units·µs, l latest
// refill instant, a latest admission instant, q reconciliation counter,
// T the usage reports of a fixed completion window
// ("w:top:known:rep:floor", see reconcileScript), o a lower bound of the
// ends of the leases in F (2^52 for none; absent: unknown), which every
// script that adds or moves a lease lowers and prepare reads from F.
//
// A lease is the member token:weight of F, scored by its deadline. A log
// entry is the member token:weight of Z (or r<q>:weight for units taken on
// a server's word), scored by its end (completion) or start + margin
// (sliding log).
const perArg = 8

// direct defines, without a closure (a few µs each per run), how the fast
// paths (singleAdmit, fastAdmit, fastRelease) read and write the limiters'
// hashes and read the epoch key: RC, straight to Redis. The batch script
// defines RC over a cache instead (each hash read once per batch, written
// once) and FLUSH, which the full paths call first (they read and write
// Redis), to write the cache back and drop it.
const direct = `
local RC, FLUSH = redis.call, false
`

// header reads the charge count and the instant.
const header = `
local NC = tonumber(ARGV[4])
local EK = KEYS[3 * NC + 1]
local now
if ARGV[1] ~= '' then now = tonumber(ARGV[1]) else
  local t = redis.call('TIME'); now = t[1] * 1000000 + t[2] end
`

// prelude defines the helpers of the full path. Defining them costs a few
// µs per run (closures), so the admission script runs its fast path first
// and reaches the prelude only when the fast path cannot decide.
const prelude = `
local GAP = 1000000 -- at most this long (µs) between full sweeps of a busy limiter
local ONONE = 4503599627370496 -- 2^52 µs (year 2112): o of a limiter with no lease
local function fdiv(a, b) return math.floor(a / b) end
local function wt(m) return tonumber(string.match(m, ':(%d+)$')) end

-- lim(i) loads charge i: its parameters (the stored spec when SetLimit wrote
-- one) and its hash; nil, err for a spec that disagrees with the stored one.
local KF = {
  {'m','f','z'}, {'m','f','w','u','d','e'}, {'m','f','z'}, {'f','w','u'}, {'m','f','w','v','c'},
  {'f','w','c'}, {'f','t','r','l','a'}, {'f','t','r','l','a'}, {'f','t','a'}, {'f','R','B','Q'}}
local UNK = '1/1/0/0/1' -- rspec.Unknown's spec: defers to any stored one
local function lim(i)
  local b = 4 + (i - 1) * 8
  local L = {i = i, H = KEYS[3*i-2], F = KEYS[3*i-1], Z = KEYS[3*i],
    spec = ARGV[b+1], kind = tonumber(ARGV[b+2]), N = tonumber(ARGV[b+3]),
    per = tonumber(ARGV[b+4]), p1 = tonumber(ARGV[b+5]), conc = tonumber(ARGV[b+6]),
    n = tonumber(ARGV[b+7]), ttl = tonumber(ARGV[b+8]), dirty = {}}
  local fs = KF[L.kind]
  if fs == nil then return nil, '' end
  local v = redis.call('HMGET', L.H, 's', 'S', 'p', 'h', 'x', 'g', 'fc', 'zc', 'E', 'o', unpack(fs))
  L.new = (v[1] == false)
  if not L.new and v[1] ~= L.spec then
    if v[1] == UNK and L.spec ~= UNK then
      -- a key nobody had learned the limit of (rspec.Unknown): the
      -- caller's limit, learned, is stored for every process (S)
      L.replace = true
    elseif v[2] == '1' or L.spec == UNK then
      local k, N, per, p1, conc = string.match(v[1], '^(%d+)/(%d+)/(%d+)/(%d+)/(%d+)$')
      if k == nil or KF[tonumber(k)] == nil then return nil, v[1] end
      L.spec, L.kind, L.N, L.per, L.p1, L.conc = v[1], tonumber(k), tonumber(N), tonumber(per), tonumber(p1), tonumber(conc)
      L.ttl = math.max(L.ttl, math.ceil(L.per * (math.max(L.p1, L.N) / math.max(L.N, 1) + 2) / 1000) + 1000)
      L.adopted = true
      fs = KF[L.kind] -- read again: the stored kind's fields
      v = redis.call('HMGET', L.H, 's', 'S', 'p', 'h', 'x', 'g', 'fc', 'zc', 'E', 'o', unpack(fs))
    else
      return nil, v[1]
    end
  end
  L.p, L.h, L.x, L.g = tonumber(v[3]), tonumber(v[4]), tonumber(v[5]), tonumber(v[6])
  L.fc, L.zc = tonumber(v[7]) or 0, tonumber(v[8]) or 0
  if v[9] then L.E = v[9] end
  L.o = tonumber(v[10])
  for j = 1, #fs do L[fs[j]] = tonumber(v[10 + j]) end
  L.f = L.f or 0
  L.z = L.z or 0
  L.t0 = math.max(now, L.m or 0) -- time never goes back for one limiter
  L.usesm = (fs[1] == 'm')
  -- a quota always: its calls in flight are known to the fleet, so that
  -- a window that ends without a report allows N less them (they may
  -- arrive in it; as in process), and a budget report subtracts those
  -- the server may not have counted; leases taken under the limit it had
  -- before (a key that learned it while calls were in flight) end as
  -- their calls end too
  L.leased = L.kind == 1 or L.kind == 2 or L.conc > 0 or L.kind == 10
  L.logged = L.kind == 1 or L.kind == 3
  return L
end

local function set(L, k, v) L[k] = v; L.dirty[k] = true end

-- add puts the member mem of w units, scored sc, in L's leases (s 'f')
-- or log (s 'z'), and counts it in the hash (a set just made is fresh).
local function add(L, s, sc, mem, w)
  redis.call('ZADD', s == 'f' and L.F or L.Z, sc, mem)
  if s == 'f' and L.o ~= nil and sc < L.o then set(L, 'o', sc) end
  if L[s] == 0 then L.fresh = true end
  set(L, s, L[s] + w); set(L, s .. 'c', L[s .. 'c'] + 1)
end

-- roll moves a fixed window on to the window of instant t.
local function roll(L, t)
  local k = L.kind
  if k == 2 or k == 4 then
    local idx = fdiv(t, L.per)
    if L.w == nil or idx > L.w then
      set(L, 'w', idx)
      if k == 2 then set(L, 'u', L.f); set(L, 'd', 0); set(L, 'e', 0) else set(L, 'u', 0) end
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
  local logs = {} -- score, member pairs for the log, added 200 at a time
  for j = 1, #exp, 2 do
    local m, d = exp[j], tonumber(exp[j+1])
    local n = wt(m)
    if L.kind == 2 then roll(L, d) end
    set(L, 'f', math.max(L.f - n, 0))
    set(L, 'fc', math.max(L.fc - 1, 0))
    if L.kind == 1 then
      logs[#logs+1] = d; logs[#logs+1] = m
      if #logs == 400 then redis.call('ZADD', L.Z, unpack(logs)); logs = {} end
      if L.z == 0 then L.fresh = true end
      set(L, 'z', L.z + n)
      set(L, 'zc', L.zc + 1)
    end
  end
  if #logs > 0 then redis.call('ZADD', L.Z, unpack(logs)) end
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
  set(L, 'zc', math.max(L.zc - #old, 0))
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
  -- A key of the limiter evicted or deleted, even if a fast admission has
  -- since made it again: its members disagree with the count kept.
  if not L.new and L.leased and redis.call('ZCARD', L.F) ~= L.fc then L.lost = true end
  if not L.new and L.logged and redis.call('ZCARD', L.Z) ~= L.zc then L.lost = true end
  if L.leased or L.logged then set(L, 'g', L.t0 + GAP) end
  sweep(L)
  prune(L)
  local k = L.kind
  if k == 2 or k == 4 or k == 5 or k == 6 then roll(L, L.t0)
  elseif k == 7 or k == 8 then refill(L, L.t0)
  elseif k == 9 and L.t == nil then set(L, 't', L.t0); set(L, 'a', L.t0)
  elseif k == 10 and (L.R == nil or L.t0 >= L.R) then
    -- a quota's window ended: the next one allows N, less the calls in
    -- flight (leased), which may arrive in it; its end is a guess (Q 0)
    -- until a report names the server's (budgetScript)
    set(L, 'R', L.t0 + L.per); set(L, 'B', math.max(L.N - L.f, 0)); set(L, 'Q', 0)
  end
  if L.lost then
    -- Rebuild from what is left and hold the limiter full for the time it
    -- forgets: calls the state forgot may have ended within the last Per.
    local f, z, zc = 0, 0, 0
    local fl = redis.call('ZRANGE', L.F, 0, -1)
    for j = 1, #fl do f = f + wt(fl[j]) end
    if L.logged then
      local zl = redis.call('ZRANGE', L.Z, 0, -1)
      for j = 1, #zl do z = z + wt(zl[j]) end
      zc = #zl
    end
    set(L, 'f', f); set(L, 'z', z); set(L, 'fc', #fl); set(L, 'zc', zc)
    L.fresh = true
    set(L, 'h', L.t0 + math.max(L.per + (k == 3 and L.p1 or 0), 1000000))
  end
  if L.leased then
    -- o: the earliest lease's end, as F holds it now (ONONE: no lease)
    local o = redis.call('ZRANGE', L.F, 0, 0, 'WITHSCORES')
    local v = ONONE
    if #o == 2 then v = tonumber(o[2]) end
    if L.o ~= v then set(L, 'o', v) end
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
    if n > N - L.f or L.per == 0 then return false, leasewait(L), true end
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
  elseif k == 10 then
    if n <= L.B then return true end
    return false, math.max(L.R - t, 1), false
  end
  return false, 0, false
end

-- commit records the admission of L's charge under token tok.
local function commit(L, tok, lease)
  local n, t, k = L.n, L.t0, L.kind
  if L.usesm then set(L, 'm', t) end
  if n == 0 then return end
  if L.leased then add(L, 'f', t + lease, tok .. ':' .. n, n) end
  if k == 2 or k == 4 then set(L, 'u', L.u + n)
  elseif k == 3 then add(L, 'z', t + L.p1, tok .. ':' .. n, n)
  elseif k == 5 then set(L, 'c', L.c + n)
  elseif k == 6 then redis.call('HINCRBY', L.H, 'b' .. (L.w % L.p1), n); set(L, 'c', L.c + n)
  elseif k == 7 or k == 8 then set(L, 't', L.t - n); set(L, 'a', t)
  elseif k == 9 then set(L, 't', math.max(L.t, t) + n * emit(L)); set(L, 'a', math.max(L.a or t, t))
  elseif k == 10 then set(L, 'B', L.B - n) end
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
  -- never shorten an expiry set further (Extend, a pause)
  if refresh and L.x ~= nil and L.x - L.t0 > ttl * 1000 then ttl = math.ceil((L.x - L.t0) / 1000) end
  if refresh then set(L, 'x', L.t0 + ttl * 1000) end
  local args = {}
  -- Numbers go as they are: Redis formats them exactly (%.17g), plain
  -- digits below 2^53.
  for k, _ in pairs(L.dirty) do args[#args+1] = k; args[#args+1] = L[k] end
  if L.new or L.replace then args[#args+1] = 's'; args[#args+1] = L.spec end
  if L.replace then args[#args+1] = 'S'; args[#args+1] = '1' end
  if #args > 0 then redis.call('HSET', L.H, unpack(args)) end
  if refresh then
    redis.call('PEXPIRE', L.H, ttl)
    redis.call('PEXPIRE', EK, ttl, 'GT')
    if L.leased and L.f > 0 then redis.call('PEXPIRE', L.F, ttl) end
    if L.logged and L.z > 0 then redis.call('PEXPIRE', L.Z, ttl) end
  end
end

local function loadall()
  local Ls = {}
  for i = 1, NC do
    local L, stored = lim(i)
    if L == nil then return nil, {-1, i, stored} end
    Ls[i] = L
  end
  return Ls
end

-- epoch reads the scope's epoch E, given what this process saw of it (ev,
-- "" for nothing; E known to exist until the instant A, or nil). E gone
-- while it should exist, or made again by a process that never saw the
-- old one while it should exist, is a whole loss of the scope's state
-- (FLUSHALL, a restart without persistence, a failover to an empty
-- replica): found now, noted in E. It returns E's value and the instant
-- of the loss it notes (0 for none), and extends E's TTL to Ls's.
local function epoch(Ls, ev, A)
  local ttl = 0
  for i = 1, NC do ttl = math.max(ttl, Ls[i].ttl) end
  local valid = ev ~= '' and A ~= nil and now <= A
  local cur = redis.call('GET', EK)
  if cur == false then
    local l = 0
    if valid then l = now end
    cur = ARGV[2] .. ':' .. string.format('%.0f', l)
    redis.call('SET', EK, cur, 'PX', ttl)
    return cur, l
  end
  redis.call('PEXPIRE', EK, ttl, 'GT')
  local id, l = string.match(cur, '^(.*):(%d+)$')
  if id == nil then id, l = cur, 0 else l = tonumber(l) end
  if valid and cur ~= ev and l == 0 and id ~= string.match(ev, '^(.*):%d+$') then
    l = now
    cur = id .. ':' .. string.format('%.0f', l)
    redis.call('SET', EK, cur, 'KEEPTTL')
  end
  return cur, l
end

-- fill makes L's state (brought to L.t0) count at least what a limiter
-- full at instant l would count now: the state a whole loss at l may have
-- forgotten. The completion window and the sliding log are held full
-- until l + Per (+ margin; at least a second); a fixed window (and a fixed
-- completion window) full in l's window; the sliding window counter N in
-- l's window; the sub-window counter N in l's block; a bucket empty at l,
-- refilled since; GCRA's TAT a whole burst (N for a pacer) after l. It
-- only ever tightens, does nothing for an l long past, and reports
-- whether it changed anything.
local function fill(L, l)
  local k, t = L.kind, L.t0
  if k == 1 or k == 3 then
    local h = l + math.max(L.per + (k == 3 and L.p1 or 0), 1000000)
    if h > t and (L.h == nil or h > L.h) then set(L, 'h', h); return true end
  elseif k == 2 or k == 4 then
    if L.w == fdiv(l, L.per) then
      -- a fixed completion window counts the units a server's report
      -- took (e) as its own from then: a later report's give-back
      -- (reconcileScript) must not come out of the hold
      local ch = false
      if k == 2 and (L.e or 0) > 0 then set(L, 'e', 0); ch = true end
      if (L.u or 0) < L.N then set(L, 'u', L.N); ch = true end
      if ch then return true end
    end
  elseif k == 5 then
    local idx = fdiv(l, L.per)
    if idx == L.w and (L.c or 0) < L.N then set(L, 'c', L.N); return true end
    if idx == L.w - 1 and (L.v or 0) < L.N then set(L, 'v', L.N); return true end
  elseif k == 6 then
    local idx = fdiv(l, math.ceil(L.per / L.p1))
    if idx <= L.w and idx > L.w - L.p1 and L.c < L.N then
      redis.call('HINCRBY', L.H, 'b' .. (idx % L.p1), L.N - L.c)
      set(L, 'c', L.N)
      return true
    end
  elseif k == 7 or k == 8 then
    local e = math.max(t - l, 0)
    local a = fdiv(e, L.per)
    local x = (e - a * L.per) * L.N
    local q = a * L.N + fdiv(x, L.per)
    if q < L.p1 and L.t > q then set(L, 't', q); set(L, 'r', x % L.per); return true end
  elseif k == 9 then
    local b = L.p1
    if b == 0 then b = L.N end
    local tat = l + b * emit(L)
    if tat > t and tat > L.t then set(L, 't', tat); return true end
  elseif k == 10 then
    -- a quota held spent until its window ends (at least a Per after l;
    -- no report shortens it: Q 1)
    if l + L.per > L.R then set(L, 'R', l + L.per); set(L, 'Q', 1) end
    if L.B > 0 then set(L, 'B', 0); return true end
  end
  return false
end
`

// singleAdmit is the cheapest path, for the commonest calls: one charge of
// a GCRA or a completion window, of a positive weight, without a
// concurrency cap, that fits (ARGV[5] to ARGV[12] are its spec, kind, N,
// Per µs, p1, concurrency, weight, TTL), on a state of the epoch this
// process saw (EV: the hash's E and the epoch key both EV). It decides as
// fastAdmit would, with fewer fields read and no tables but the replies;
// anything else falls through to fastAdmit, changing nothing.
const singleAdmit = `
if NC == 1 and ARGV[10] == '0' and ARGV[11] ~= '0' then
  local k, H = ARGV[6], KEYS[1]
  if k == '9' then
    local v = RC('HMGET', H, 's', 'p', 'h', 'x', 't', 'a', 'E')
    if v[1] == ARGV[5] and v[5] and (not v[2] or tonumber(v[2]) <= now) and (not v[3] or tonumber(v[3]) <= now) and
        v[7] == EV and RC('GET', EK) == EV then
      local n, N, per, p1 = tonumber(ARGV[11]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
      local t = tonumber(v[5])
      local em = math.ceil(per / N)
      local tol = 0
      if p1 > 0 then tol = (p1 - n) * em end
      if t - now <= tol then
        local a = tonumber(v[6]) or now
        local ttl, x = tonumber(ARGV[12]), tonumber(v[4])
        -- x (the expiry last set) written back as it is unless refreshed
        if x == nil or x - now < (ttl - 1000) * 1000 then
          x = now + ttl * 1000
          redis.call('PEXPIRE', H, ttl)
          redis.call('PEXPIRE', EK, ttl, 'GT')
        end
        RC('HSET', H, 't', math.max(t, now) + n * em, 'a', math.max(a, now), 'x', x)
        return {1, now, 0, 0, 0, ''}
      end
    end
  elseif k == '1' then
    local v = RC('HMGET', H, 's', 'p', 'h', 'x', 'g', 'f', 'fc', 'm', 'z', 'E', 'o')
    if v[1] == ARGV[5] and v[10] == EV and RC('GET', EK) == EV then
      local t0 = math.max(now, tonumber(v[8]) or 0)
      local g = tonumber(v[5])
      if g and g > t0 and (not v[2] or tonumber(v[2]) <= t0) and (not v[3] or tonumber(v[3]) <= t0) then
        local n, N = tonumber(ARGV[11]), tonumber(ARGV[7])
        local f, fc = tonumber(v[6]) or 0, tonumber(v[7]) or 0
        if n <= N - f - (tonumber(v[9]) or 0) then
          local ttl, x = tonumber(ARGV[12]), tonumber(v[4])
          local dl = t0 + tonumber(ARGV[3])
          redis.call('ZADD', KEYS[2], dl, ARGV[2] .. ':' .. ARGV[11])
          local refresh = x == nil or x - t0 < (ttl - 1000) * 1000
          if refresh then
            x = t0 + ttl * 1000
            redis.call('PEXPIRE', H, ttl)
            redis.call('PEXPIRE', EK, ttl, 'GT')
            if v[9] and v[9] ~= '0' then redis.call('PEXPIRE', KEYS[3], ttl) end
          end
          -- o, the earliest lease's end, stays a lower bound (see fastRelease)
          local o = tonumber(v[11])
          if o ~= nil and dl < o then RC('HSET', H, 'f', f + n, 'fc', fc + 1, 'm', t0, 'x', x, 'o', dl)
          else RC('HSET', H, 'f', f + n, 'fc', fc + 1, 'm', t0, 'x', x) end
          -- refreshed, or the leases' key just made (it alone needs a TTL)
          if refresh or f == 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
          return {1, now, 0, 0, 8, ''}
        end
      end
    end
  end
end
`

// fastAdmit decides, with no helper functions, a call whose every charge
// fits on the state as stored: the epoch this process saw (EV, the hashes'
// E and the epoch key alike), no pause, no lost state, no spec to adopt,
// a stored spec, a full sweep done within GAP for the limiters with sorted
// sets, no sub-window block and no fixed completion window with calls in
// flight to roll. The counts of leases and logs it reads may still hold
// entries that ran out (swept or pruned lazily): they are upper bounds, so
// a call that fits on them fits the exact state, and it decides as the full
// path would. Otherwise it changes nothing and the full path runs.
const fastAdmit = `
local FA = {}
local fast = RC('GET', EK) == EV
for i = 1, NC do
  if not fast then break end
  local b = 4 + (i - 1) * 8
  local H = KEYS[3*i-2]
  local k, n, conc = tonumber(ARGV[b+2]), tonumber(ARGV[b+7]), tonumber(ARGV[b+6])
  -- the fields of kind k, after s p h x g f fc (v[1] to v[7]), then E and o
  local v
  if k == 9 then v = RC('HMGET', H, 's', 'p', 'h', 'x', 'g', 'f', 'fc', 't', 'a', 'E', 'o')
  elseif k == 1 then v = RC('HMGET', H, 's', 'p', 'h', 'x', 'g', 'f', 'fc', 'm', 'z', 'E', 'o')
  elseif k == 2 then v = RC('HMGET', H, 's', 'p', 'h', 'x', 'g', 'f', 'fc', 'm', 'w', 'u', 'd', 'E', 'o')
  elseif k == 3 then v = RC('HMGET', H, 's', 'p', 'h', 'x', 'g', 'f', 'fc', 'm', 'z', 'zc', 'E', 'o')
  elseif k == 4 then v = RC('HMGET', H, 's', 'p', 'h', 'x', 'g', 'f', 'fc', 'w', 'u', 'E', 'o')
  elseif k == 5 then v = RC('HMGET', H, 's', 'p', 'h', 'x', 'g', 'f', 'fc', 'm', 'w', 'c', 'v', 'E', 'o')
  elseif k == 6 then v = RC('HMGET', H, 's', 'p', 'h', 'x', 'g', 'f', 'fc', 'w', 'c', 'E', 'o')
  else v = RC('HMGET', H, 's', 'p', 'h', 'x', 'g', 'f', 'fc', 't', 'r', 'l', 'a', 'E', 'o') end
  if v[1] ~= ARGV[b+1] or v[#v-1] ~= EV then fast = false; break end
  local leased = k == 1 or k == 2 or conc > 0
  local logged = k == 1 or k == 3
  local t0 = now
  if k == 1 or k == 2 or k == 3 or k == 5 then t0 = math.max(now, tonumber(v[8]) or 0) end
  local p, h, g = tonumber(v[2]), tonumber(v[3]), tonumber(v[5])
  if (p ~= nil and p > t0) or (h ~= nil and h > t0) then fast = false; break end
  if (leased or logged) and (g == nil or g <= t0) then fast = false; break end
  local f, fc = tonumber(v[6]) or 0, tonumber(v[7]) or 0
  if conc > 0 and n > conc - f then fast = false; break end
  local N, per, p1 = tonumber(ARGV[b+3]), tonumber(ARGV[b+4]), tonumber(ARGV[b+5])
  local hs = {}
  local c = {H = H, k = k, n = n, t0 = t0, hs = hs, leased = leased, logged = logged, f = f,
    x = tonumber(v[4]), ttl = tonumber(ARGV[b+8]), i = i, o = tonumber(v[#v])}
  if k == 1 or k == 2 or k == 3 or k == 5 then hs[#hs+1] = 'm'; hs[#hs+1] = t0 end
  if n > 0 then
    if k == 1 then
      local z = tonumber(v[9]) or 0
      if n > N - f - z then fast = false; break end
      c.z = z
    elseif k == 2 or k == 4 then
      local w, u
      if k == 2 then w, u = tonumber(v[9]), tonumber(v[10]) or 0 else w, u = tonumber(v[8]), tonumber(v[9]) or 0 end
      if w == nil then fast = false; break end
      local idx = math.floor(t0 / per)
      local d = 0
      if k == 2 then d = tonumber(v[11]) or 0 end
      if idx > w then
        if k == 2 and f > 0 then fast = false; break end
        u = 0; d = 0; w = idx; hs[#hs+1] = 'w'; hs[#hs+1] = idx
        if k == 2 then hs[#hs+1] = 'd'; hs[#hs+1] = 0; hs[#hs+1] = 'e'; hs[#hs+1] = 0 end
      end
      if k == 2 then c.mark = string.format('%d:%d:%d,', i, w, d) end
      if n > N - u then fast = false; break end
      hs[#hs+1] = 'u'; hs[#hs+1] = u + n
    elseif k == 3 then
      local z, zc = tonumber(v[9]) or 0, tonumber(v[10]) or 0
      if n > N - z then fast = false; break end
      c.z = z
      hs[#hs+1] = 'z'; hs[#hs+1] = z + n; hs[#hs+1] = 'zc'; hs[#hs+1] = zc + 1
      c.log = t0 + p1
    elseif k == 5 then
      local w, cv, vv = tonumber(v[9]), tonumber(v[10]) or 0, tonumber(v[11]) or 0
      if w == nil then fast = false; break end
      local idx = math.floor(t0 / per)
      if idx == w + 1 then vv = cv; cv = 0; w = idx elseif idx > w + 1 then vv = 0; cv = 0; w = idx end
      local e = math.min(math.max(t0 - w * per, 0), per)
      if vv * (per - e) + (cv + n) * per > N * per then fast = false; break end
      hs[#hs+1] = 'w'; hs[#hs+1] = w; hs[#hs+1] = 'v'; hs[#hs+1] = vv; hs[#hs+1] = 'c'; hs[#hs+1] = cv + n
    elseif k == 6 then
      local w, cv = tonumber(v[8]), tonumber(v[9]) or 0
      if w == nil or math.floor(t0 / math.ceil(per / p1)) > w then fast = false; break end
      if n > N - cv then fast = false; break end
      hs[#hs+1] = 'c'; hs[#hs+1] = cv + n
      c.block = 'b' .. (w % p1)
    elseif k == 7 or k == 8 then
      local t, r, l = tonumber(v[8]), tonumber(v[9]) or 0, tonumber(v[10])
      if t == nil or l == nil then fast = false; break end
      if t0 > l then
        local e = t0 - l
        l = t0
        if t >= p1 then t = p1; r = 0 else
          local a = math.floor(e / per)
          local x = (e - a * per) * N + r
          local q = a * N + math.floor(x / per)
          if q >= p1 - t then t = p1; r = 0 else t = t + q; r = x % per end
        end
      end
      if n > t then fast = false; break end
      hs[#hs+1] = 't'; hs[#hs+1] = t - n; hs[#hs+1] = 'r'; hs[#hs+1] = r
      hs[#hs+1] = 'l'; hs[#hs+1] = l; hs[#hs+1] = 'a'; hs[#hs+1] = t0
    elseif k == 9 then
      local t, a = tonumber(v[8]), tonumber(v[9])
      if t == nil then fast = false; break end
      local em = math.ceil(per / N)
      local tol = 0
      if p1 > 0 then tol = (p1 - n) * em end
      if t - t0 > tol then fast = false; break end
      hs[#hs+1] = 't'; hs[#hs+1] = math.max(t, t0) + n * em
      hs[#hs+1] = 'a'; hs[#hs+1] = math.max(a or t0, t0)
    else
      fast = false; break
    end
    if leased then hs[#hs+1] = 'f'; hs[#hs+1] = f + n; hs[#hs+1] = 'fc'; hs[#hs+1] = fc + 1 end
  elseif k == 2 or k == 4 or k == 5 or k == 6 or k == 7 or k == 8 or k == 9 then
    -- a weight of 0 fits, but the full path rolls and refills first
    fast = false; break
  end
  FA[i] = c
end
if fast then
  local flags, lease, tok, marks = 0, tonumber(ARGV[3]), ARGV[2], ''
  for i = 1, NC do
    local c = FA[i]
    if c.mark then marks = marks .. c.mark end
    local n, H, hs = c.n, c.H, c.hs
    local freshF, freshZ = false, false -- a key made by this call, which alone needs a TTL
    if n > 0 then
      local m = tok .. ':' .. n
      if c.leased then
        redis.call('ZADD', KEYS[3*i-1], c.t0 + lease, m)
        -- o, the earliest lease's end, stays a lower bound (see fastRelease)
        if c.o ~= nil and c.t0 + lease < c.o then hs[#hs+1] = 'o'; hs[#hs+1] = c.t0 + lease end
        flags = 8
        if c.f == 0 then freshF = true end
      end
      if c.k == 3 then
        redis.call('ZADD', KEYS[3*i], c.log, m)
        if c.z == 0 then freshZ = true end
      elseif c.k == 6 then
        redis.call('HINCRBY', H, c.block, n)
      end
    end
    local ttl = c.ttl
    local refresh = c.x == nil or c.x - c.t0 < (ttl - 1000) * 1000
    if refresh then hs[#hs+1] = 'x'; hs[#hs+1] = c.t0 + ttl * 1000
    else
      if freshF then redis.call('PEXPIRE', KEYS[3*i-1], ttl) end
      if freshZ then redis.call('PEXPIRE', KEYS[3*i], ttl) end
    end
    if #hs > 0 then RC('HSET', H, unpack(hs)) end
    if refresh then
      redis.call('PEXPIRE', H, ttl)
      redis.call('PEXPIRE', EK, ttl, 'GT')
      if c.leased and (c.f > 0 or n > 0) then redis.call('PEXPIRE', KEYS[3*i-1], ttl) end
      if c.logged and ((c.z or 0) > 0 or n > 0) then redis.call('PEXPIRE', KEYS[3*i], ttl) end
    end
  end
  return {1, now, 0, 0, flags, '', marks}
end
`

// admitScript: ARGV[2] the token, ARGV[3] the lease in µs, and after the
// charges' values the epoch this process saw, the instant until which it
// knows the epoch key exists and the deadline (see the top of this file),
// then "carry" for Store.Carry (every charge committed). Reply {1,
// now, 0, 0, flags, adopted, marks, epoch} (the fast paths leave the
// epoch out, the single-charge fast path for the completion window and
// GCRA the marks too) or {0, now, wait µs, refuser, flags, adopted, "",
// epoch}, or {0, now, 0, 1, 16, ""} when the deadline had passed, or {-1,
// charge, stored spec} for a spec mismatch. flags: 1 only a release can
// help, 2 paused, 4 state lost, 8 a lease was taken, 16 too late. adopted:
// "i=spec," for each charge i whose stored spec was adopted. marks: "i:w:d," for each
// fixed completion charge i of weight > 0: its window w and the units d of
// the calls of w that ended before this admission (see reconcileScript).
// epoch: the epoch key's value.
var admitScript = goredis.NewScript(admitSource)

// late refuses, changing nothing, an admission that reaches Redis after
// the deadline its caller sent (the caller gave up on it: admitted, it
// would hold its units until its lease ran out), and reads the epoch this
// process saw (EV).
const late = `
local TA = 4 + 8 * NC
local DL = ARGV[TA + 3]
if DL ~= nil and DL ~= '' and now > tonumber(DL) then return {0, now, 0, 1, 16, ''} end
local EV = ARGV[TA + 1] or ''
`

// admitSource is the admission script's text.
const admitSource = direct + admitBody

// admitBody is the admission script's text but the fast paths' helpers
// (direct, or the batch script's cache).
const admitBody = header + late + singleAdmit + fastAdmit + prelude + `
if FLUSH then FLUSH() end
local Ls, err = loadall()
if Ls == nil then return err end
-- The scope's epoch: a state brought to an older one (or to none: new) is
-- made as full as a whole loss noted in E may have left it.
local ev, el = epoch(Ls, EV, tonumber(ARGV[TA + 2] or ''))
-- A carry (Store.Carry: "carry" after the deadline) records a call that
-- already happened: it refuses nothing (no pause, hold or limit applies).
local carry = ARGV[TA + 4] == 'carry'
local ok, wait, refuser, flags, adopted = true, -1, 0, 0, ''
for i = 1, NC do
  local L = Ls[i]
  prepare(L)
  if L.E ~= ev then
    if el > 0 and fill(L, el) then L.wl = true end
    set(L, 'E', ev)
  end
  if L.adopted then
    adopted = adopted .. i .. '=' .. L.spec .. ','
    -- rspec.Spec.Capacity of the adopted spec: a charge heavier than it
    -- can never be admitted, so say so (ratesem.ErrWeightTooLarge) rather
    -- than a wait its caller would sleep out to its deadline.
    local cap = L.N
    if L.kind == 7 or L.kind == 8 or (L.kind == 9 and L.p1 > 0) then cap = L.p1 end
    if L.conc > 0 then cap = math.min(cap, L.conc) end
    if L.n > cap and not carry then return {-2, i, L.spec} end
  end
  local yes, w, rel = carry, 0, false
  if not carry then yes, w, rel = check(L) end
  if not yes then
    ok = false
    if rel then flags = bit.bor(flags, 1) end
    if L.paused then flags = bit.bor(flags, 2) end
    if w > wait then wait, refuser = w, i end
  end
  if L.lost or L.wl then flags = bit.bor(flags, 4) end
end
if ok then
  local lease, marks = tonumber(ARGV[3]), ''
  for i = 1, NC do
    local L = Ls[i]
    -- a fixed completion window's mark: its window and the units of its
    -- calls that ended in it before this admission (reconcile)
    if L.kind == 2 and L.n > 0 then marks = marks .. string.format('%d:%d:%d,', i, L.w, L.d or 0) end
    commit(L, ARGV[2], lease)
    if L.leased and L.n > 0 then flags = bit.bor(flags, 8) end
    save(L)
  end
  return {1, now, 0, 0, flags, adopted, marks, ev}
end
for i = 1, NC do
  local L = Ls[i]
  L.dirty.m = nil
  if next(L.dirty) ~= nil then save(L) end
end
return {0, now, math.max(wait, 1), refuser, flags, adopted, '', ev}
`

// fastRelease ends, with no helper functions, a plain release (no
// actual weights, no mode) whose every charge is of a completion window,
// or of a fixed completion window that need not roll, of a positive
// weight, without a concurrency cap, on a limiter no other charge of the
// call names, whose lease is there and has not run out; it does, charge by
// charge, what the full path would. It reads every charge before it
// writes any: anything else falls through, changing nothing. A limiter
// whose hash says no lease ends before now (o, a lower bound of the
// leases' ends: every script that adds or moves a lease lowers it to the
// lease's end, prepare sets it to the earliest end in F) needs no ZSCORE:
// its lease has not run out if it is there, and ZREM tells. A lease found
// gone there (lost) stops the fast path at that charge: the full path
// ends that charge and the ones after it (from FD), as it would have, the
// charges before it ended as the full path would have ended them.
const fastRelease = `
local FD = 1
if ARGV[4 + 8 * NC + 1] == nil then
  local RS, seen = {}, {}
  for i = 1, NC do
    local b = 4 + (i - 1) * 8
    local k, H = ARGV[b+2], KEYS[3*i-2]
    if ARGV[b+6] ~= '0' or ARGV[b+7] == '0' or (k ~= '1' and k ~= '2') or seen[H] then RS = nil; break end
    seen[H] = true
    local v = RC('HMGET', H, 's', 'f', 'fc', 'z', 'zc', 'm', 'x', 'w', 'd', 'o')
    local t0 = math.max(now, tonumber(v[6]) or 0)
    local per = tonumber(ARGV[b+4])
    if v[1] ~= ARGV[b+1] or (k == '2' and not (v[8] and math.floor(t0 / per) <= tonumber(v[8]))) then RS = nil; break end
    local mem = ARGV[2] .. ':' .. ARGV[b+7]
    local o = tonumber(v[10])
    if o == nil or o <= t0 then
      local d = tonumber(redis.call('ZSCORE', KEYS[3*i-1], mem))
      if d == nil or d <= t0 then RS = nil; break end
      v.seen = true
    end
    RS[i] = v; v.t0 = t0; v.per = per; v.mem = mem
  end
  if RS ~= nil then
    local stop = false
    for i = 1, NC do
      local v, b = RS[i], 4 + (i - 1) * 8
      local H, F, Z, k = KEYS[3*i-2], KEYS[3*i-1], KEYS[3*i], ARGV[b+2]
      local t0, per, mem = v.t0, v.per, v.mem
      if redis.call('ZREM', F, mem) == 0 and not v.seen then FD, stop = i, true; break end
      local n, ttl, x = tonumber(ARGV[b+7]), tonumber(ARGV[b+8]), tonumber(v[7])
      local f, fc = math.max((tonumber(v[2]) or 0) - n, 0), math.max((tonumber(v[3]) or 0) - 1, 0)
      local z, zc = tonumber(v[4]) or 0, tonumber(v[5]) or 0
      local fresh = false
      if k == '1' and per > 0 then
        redis.call('ZADD', Z, t0, mem)
        if z == 0 then fresh = true end
        z, zc = z + n, zc + 1
      end
      local refresh = x == nil or x - t0 < (ttl - 1000) * 1000
      if fresh and not refresh then redis.call('PEXPIRE', Z, ttl) end -- the log was just made
      if refresh then
        if x ~= nil and x - t0 > ttl * 1000 then ttl = math.ceil((x - t0) / 1000) end
        x = t0 + ttl * 1000
      end
      -- x written back as it is unless refreshed; d: the units of the
      -- calls of this window that ended (reconcile)
      if k == '1' then RC('HSET', H, 'f', f, 'fc', fc, 'z', z, 'zc', zc, 'm', t0, 'x', x)
      else RC('HSET', H, 'f', f, 'fc', fc, 'm', t0, 'x', x, 'd', (tonumber(v[9]) or 0) + n) end
      if refresh then
        redis.call('PEXPIRE', H, ttl)
        redis.call('PEXPIRE', EK, ttl, 'GT')
        if f > 0 then redis.call('PEXPIRE', F, ttl) end
        if z > 0 then redis.call('PEXPIRE', Z, ttl) end
      end
    end
    if not stop then return 0 end -- else the full path, from charge FD
  end
end
`

// releaseScript ends token's call now; ARGV[3] is "at:lease": its
// admission instant and the lease, in µs. After the charges' values it
// takes, for a Settle, the actual weights ARGV[4 + 8·NC + i] (clamped to
// [0, MaxN]) instead of the estimates (the charges' weights): a refund
// where the window still counts the call (never for a charge whose lease
// is gone), a debit at now (see Store.Settle); for a Cancel, "cancel"
// after the weights (all 0): the admission is taken back (as far as the
// windows can tell: a fixed window that moved on keeps nothing to take
// back, a bucket or GCRA that admitted another call since gives nothing
// back); for an Extend, "extend" there: the leases move to now + ARGV[3]
// µs. Reply: the number of charges whose lease was no longer there.
var releaseScript = goredis.NewScript(releaseSource)

// releaseSource is the release script's text.
const releaseSource = direct + releaseBody

// releaseBody is the release script's text but the fast paths' helpers
// (direct, or the batch script's cache).
const releaseBody = header + fastRelease + prelude + `
if FLUSH then FLUSH() end
local Ls, err = loadall()
if Ls == nil then return err end
local at, ls = string.match(ARGV[3], '^(%d+):(%d+)$')
at, ls = tonumber(at), tonumber(ls)
local TA = 4 + 8 * NC
local mode = ARGV[TA + NC + 1]
local cancel = mode == 'cancel'
local SAT = 4503599627370496 -- 2^52: where debts and counts saturate
local missing = 0
for i = FD, NC do
  local L = Ls[i]
  local n, k, tok = L.n, L.kind, ARGV[2]
  local a = math.min(math.max(tonumber(ARGV[TA + i]) or n, 0), 1099511627776)
  local m = tok .. ':' .. n
  -- the lease's end, read before a sweep ends the leases that ran out
  local d
  if L.leased and n > 0 then d = tonumber(redis.call('ZSCORE', L.F, m)) end
  if mode == 'extend' then
    if L.leased and n > 0 and d ~= nil and d > L.t0 then
      if L.new then prepare(L) end -- lost, not new: see prepare
      redis.call('ZADD', L.F, 'XX', L.t0 + tonumber(ARGV[3]), m)
      if L.o ~= nil and L.t0 + tonumber(ARGV[3]) < L.o then set(L, 'o', L.t0 + tonumber(ARGV[3])) end
      -- The keys live at least until the new end and a second more (save
      -- refreshes them when their expiry, x, is less than the TTL minus a
      -- second away); x moves with them, so that an admission never
      -- shortens them (it refreshes only when x comes near).
      L.ttl = math.max(L.ttl, math.ceil(tonumber(ARGV[3]) / 1000) + 2000)
      save(L)
    elseif L.leased and n > 0 then
      missing = missing + 1
    end
  elseif (L.leased and n > 0) or a ~= n then
    -- A settle (or a cancel) brings the state to now: leases that ran out
    -- ended (this call's included: then it counted its estimate at its
    -- lease's end), windows rolled, buckets refilled, lost state found and
    -- held full. So does a release of a hash gone while its sets are left
    -- (evicted, deleted): rebuilt from the sets and held full, never
    -- remade bare.
    if a ~= n or L.new then prepare(L)
    elseif k == 2 then
      -- a fixed completion window carries the calls in flight at its
      -- start: end those whose lease ran out before rolling
      if L.w == nil or fdiv(L.t0, L.per) > L.w then sweep(L) end
      roll(L, L.t0)
    end
    local live = not L.leased -- the window may still count the call: a refund is due
    local forgot = false -- Redis lost the call while it was in flight
    if L.leased and n > 0 then
      if d ~= nil and d > L.t0 then
        redis.call('ZREM', L.F, m)
        set(L, 'f', math.max(L.f - n, 0)); set(L, 'fc', math.max(L.fc - 1, 0))
        live = true
      else
        if d ~= nil then sweep(L) end -- ran out: ended at its lease's end
        missing = missing + 1
        -- No lease, though it cannot have run out (admitted at 'at', its
        -- lease ends after now): the state that counted the call was lost
        -- (a whole or a half loss). The completion windows count its end
        -- from now, with its actual weight: a window held full for a Per
        -- after the loss must not forget the calls then in flight.
        forgot = d == nil and ls ~= nil and at + ls > L.t0 and not cancel
      end
    end
    local r, dd = 0, 0 -- refund, debit
    if live and a < n then r = n - a end
    if a > n then dd = a - n end
    if k == 1 then
      -- the call ends with a units logged at its end; a call whose lease
      -- ran out was logged with n at its lease's end: only the debit
      local w, mem = dd, tok .. '+:' .. dd
      if live then w, mem = a, tok .. ':' .. a end
      if forgot then
        w, mem = a, tok .. ':' .. a
        if redis.call('ZSCORE', L.Z, mem) then w = 0 end -- a settle repeated logs nothing more
      end
      if w > 0 and L.per > 0 then add(L, 'z', L.t0, mem, w) end
    elseif k == 2 or k == 4 then
      -- a fixed completion window carries the call in flight into now's
      -- window: the refund comes from there; a fixed window refunds only
      -- while the admission's window is now's
      if r > 0 and ((k == 2 and not cancel) or fdiv(at, L.per) == L.w) then set(L, 'u', L.u - math.min(r, L.u)) end
      if k == 2 and forgot then
        -- lost in flight: the call counts a units in the window it ends in
        set(L, 'u', math.max(L.u, math.min(L.u + a, SAT))); set(L, 'd', (L.d or 0) + a)
      elseif dd > 0 then set(L, 'u', math.max(L.u, math.min(L.u + dd, SAT))) end
      if k == 2 and live then set(L, 'd', (L.d or 0) + a) end
    elseif k == 3 and (L.per > 0 or cancel) then -- a sliding log of Per 0 counts nothing (but its entries)
      if r > 0 then
        local sc = redis.call('ZSCORE', L.Z, m)
        if sc then
          redis.call('ZREM', L.Z, m)
          set(L, 'z', math.max(L.z - r, 0))
          if a > 0 then redis.call('ZADD', L.Z, sc, tok .. ':' .. a) else set(L, 'zc', math.max(L.zc - 1, 0)) end
        end
      end
      if dd > 0 then add(L, 'z', L.t0 + L.p1, tok .. '+:' .. dd, dd) end
    elseif k == 5 then
      if r > 0 then
        local idx = fdiv(at, L.per)
        if idx == L.w then set(L, 'c', L.c - math.min(r, L.c))
        elseif idx == L.w - 1 then set(L, 'v', L.v - math.min(r, L.v)) end
      end
      if dd > 0 then set(L, 'c', math.max(L.c, math.min(L.c + dd, SAT))) end
    elseif k == 6 then
      if r > 0 then
        local idx = fdiv(at, math.ceil(L.per / L.p1))
        if idx <= L.w and idx > L.w - L.p1 then
          local s = 'b' .. (idx % L.p1)
          local y = math.min(r, tonumber(redis.call('HGET', L.H, s)) or 0)
          if y > 0 then redis.call('HINCRBY', L.H, s, -y); set(L, 'c', L.c - y) end
        end
      end
      if dd > 0 then
        local y = math.max(math.min(L.c + dd, SAT) - L.c, 0)
        if y > 0 then redis.call('HINCRBY', L.H, 'b' .. (L.w % L.p1), y); set(L, 'c', L.c + y) end
      end
    elseif k == 7 or k == 8 then
      if r > 0 and (not cancel or at >= (L.a or 0)) then
        set(L, 't', L.t + math.max(math.min(r, L.p1 - L.t), 0))
        if L.t >= L.p1 then set(L, 'r', 0) end
      end
      -- a debit goes at most N units (one Per's refill) below empty, "full
      -- until the window moves" (win.TokenBucket.Settle); a bucket already
      -- deeper (SetLimit) stays
      if dd > 0 then set(L, 't', math.max(L.t - dd, math.min(L.t, -L.N))) end
      if L.t < 0 then
        -- the keys live until the debt is repaid (the bucket full again)
        -- (at most 2^42 ms, 139 years: the expiry kept in µs, x, stays exact)
        L.ttl = math.max(L.ttl, math.min(math.ceil((L.p1 - L.t) * L.per / L.N / 1000) + 1000, 4398046511104))
      end
    elseif k == 9 then
      local em = emit(L)
      -- a cancel gives back only while no call was admitted since (a)
      local lo = L.t0
      if cancel then lo = L.a or 0 end
      if r > 0 and L.t > lo and (not cancel or at >= lo) then set(L, 't', math.max(L.t - r * em, lo)) end
      -- a debit moves the TAT at most (burst + N) emission intervals past
      -- now (N for a pacer, whose p1 is 0), "full until the window moves"
      -- (win.GCRA.Settle); a TAT already beyond stays
      if dd > 0 then set(L, 't', math.max(L.t, math.min(math.max(L.t, L.t0) + dd * em, L.t0 + (L.p1 + L.N) * em))) end
      if L.t > L.t0 then L.ttl = math.max(L.ttl, math.ceil((L.t - L.t0) / 1000) + 1000) end
    elseif k == 10 then
      -- a quota refunds nothing (the server counted the call's arrival)
      -- but a cancel's, whose call never reached the server: its units go
      -- back to the budget (the window it was admitted in, or the next,
      -- which started with N less it, leased), at most N, as in process
      -- (Engine.undoLocked); a debit comes out of the budget
      if cancel and r > 0 then set(L, 'B', math.min(L.B + r, L.N)) end
      if dd > 0 then set(L, 'B', math.max(L.B - dd, 0)) end
    end
    if L.usesm then set(L, 'm', L.t0) end
    save(L)
  end
end
return missing
`

// pauseScript holds charge 1's limiter until now + ARGV[3] µs; a pause
// only extends. Reply: the pause's end in µs.
var pauseScript = goredis.NewScript(header + prelude + `
local Ls, err = loadall()
if Ls == nil then return err end
for i = 1, NC do if Ls[i].new then prepare(Ls[i]) end end -- lost, not new: see prepare
local L = Ls[1]
local untilus = L.t0 + tonumber(ARGV[3])
if L.p == nil or untilus > L.p then set(L, 'p', untilus) end
save(L)
return L.p
`)

// reconcileScript tightens charge 1's limiter with a server's count of
// ARGV[3] units in its current window. ARGV[2]: empty, "seen" (when the count
// was read, µs) or "seen:w:d:n" (a fixed completion window's call: its
// admission's mark w:d, see admitScript, and its weight n). Reply: the
// units added, negative when a fixed completion window gave units back.
var reconcileScript = goredis.NewScript(header + prelude + `
local Ls, err = loadall()
if Ls == nil then return err end
local L = Ls[1]
prepare(L)
local used, N, k = math.min(tonumber(ARGV[3]), L.N), L.N, L.kind
local extra = 0
local seen, mw, md, mn = string.match(ARGV[2], '^(%d+):(%d+):(%d+):(%d+)$')
if seen == nil then seen = ARGV[2] else mw, md, mn = tonumber(mw), tonumber(md), tonumber(mn) end
-- A count read in an earlier aligned window than the current one is that
-- window's (seen: when it was read, in µs, or ''): it says nothing of
-- the current one, and is dropped.
local stale = false
if seen ~= '' and (k == 2 or k == 4 or k == 5 or k == 6) and L.w ~= nil then
  local size = L.per
  if k == 6 then size = math.ceil(L.per / L.p1) end
  stale = fdiv(tonumber(seen), size) ~= L.w
end
if stale then
elseif k == 2 and (mw == nil or mw == L.w) then
  -- A fixed completion window (a call admitted in an earlier window may
  -- have been counted in that one: dropped). T keeps, for window w, the
  -- highest count reported (top), the most units of the fleet's calls a
  -- report at top showed counted (known) and the units of the calls
  -- reported (rep). A call's count includes, besides units from
  -- elsewhere, the call (n), the fleet's calls that had ended by its
  -- admission (d), and every call reported at a count no higher (counts
  -- only grow within a window); spending from elsewhere only grows too,
  -- so top - max(known, rep) bounds the units from elsewhere at every
  -- count up to top. The window counts its own calls plus that bound,
  -- giving back what a looser earlier bound took (the reply is then
  -- negative). A count with no call (mw nil) takes every call of the
  -- window as counted, as before, and never gives back.
  -- fl: the units from elsewhere a count with no call showed (every call
  -- of the window taken as counted, those on their way too): a floor no
  -- give-back goes below, kept apart from top and known, which it never
  -- loosens. A T of four fields (an older process's) keeps e as the floor.
  local e = L.e or 0
  local top, known, rep, fl = 0, 0, 0, 0
  local st = redis.call('HGET', L.H, 'T')
  if st then
    local sw, a, b, c, f = string.match(st, '^(%d+):(%d+):(%d+):(%d+):(%d+)$')
    if sw == nil then
      sw, a, b, c = string.match(st, '^(%d+):(%d+):(%d+):(%d+)$')
      f = e
    end
    if sw and tonumber(sw) == L.w then top, known, rep, fl = tonumber(a), tonumber(b), tonumber(c), tonumber(f) end
  end
  local own = math.max(L.u - e, 0)
  local room = math.max(N - own, 0)
  local take
  if mw == nil then
    fl = math.max(fl, math.min(math.max(used - own, 0), room))
    take = math.max(fl, e)
  else
    local kn = md + mn
    rep = math.min(rep + mn, N)
    if used > top then top, known = used, kn elseif used == top then known = math.max(known, kn) end
    take = math.min(math.max(top - math.max(known, rep), fl, 0), room)
  end
  extra = take - e
  if extra ~= 0 then set(L, 'u', own + take); set(L, 'e', take) end
  set(L, 'T', string.format('%d:%d:%d:%d:%d', L.w, top, math.min(known, N), rep, fl))
elseif k == 1 or k == 3 then
  extra = math.max(used - L.f - L.z, 0)
  if extra > 0 then
    add(L, 'z', L.t0, 'r' .. redis.call('HINCRBY', L.H, 'q', 1) .. ':' .. extra, extra)
  end
elseif k == 4 then
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
elseif k == 10 then
  local b = math.max(math.min(L.B, N - used), 0)
  extra = L.B - b; set(L, 'B', b)
end
if L.usesm then set(L, 'm', L.t0) end
save(L)
return extra
`)

// budgetScript takes in a server's report of a quota limiter's budget
// (charge 1, kind 10): ARGV[3] is "remaining:reset:own", the units the
// server says remain in its window, the µs from now until that window
// ends (at most Per and rspec.MaxResetOver), and the units of the
// reporting call, counted only while it is still leased here under the
// member prefix ARGV[2] of its token ("": taken as leased): the server
// counted them, and so do the calls in flight. The budget is what
// remains less the fleet's calls in flight the server may not have
// counted yet: a report of a window ending more than max(1 s, Per/2)
// after the one kept starts a new window with it; another only lowers
// the budget, and moves the window's end only later, but for a report
// that lowers the budget and the first report of a window the limiter
// rolled to on its own (field Q 0), which set it. Reply: the units taken in (the budget's drop; negative when a
// new window raised it), or {-1, charge, stored} for a spec mismatch, or
// an error reply for a limiter that is not a quota (its stored spec
// another kind).
var budgetScript = goredis.NewScript(header + prelude + `
local Ls, err = loadall()
if Ls == nil then return err end
local L = Ls[1]
if L.kind ~= 10 then return redis.error_reply('ERR ratesem: not a quota limiter') end
prepare(L)
local r, rin, own = string.match(ARGV[3], '^(%d+):(%d+):(%d+)$')
r, rin, own = tonumber(r), tonumber(rin), tonumber(own)
-- the reporting call counts in f only while its lease is held (its
-- release may have reached Redis first)
if own ~= nil and own > 0 and ARGV[2] ~= '' and not redis.call('ZSCORE', L.F, ARGV[2] .. ':' .. own) then own = 0 end
local old = L.B
if r ~= nil and rin > 0 then
  local R = L.t0 + math.min(rin, L.per + ` + strconv.FormatInt(rspec.MaxResetOver.Microseconds(), 10) + `)
  local b = math.max(math.min(r, L.N) - math.max(L.f - own, 0), 0)
  if R > L.R + math.max(1000000, fdiv(L.per, 2)) then
    set(L, 'R', R); set(L, 'B', b)
  elseif b < L.B then
    -- lower than the budget: the latest report in the server's order,
    -- whose window is the limiter's, sooner or later (a slow reply of a
    -- window that ended, read with the margin still ahead, after a reply
    -- of the next one set the budget: it ends with that window, not a
    -- Per later), as in process (budgetLocked)
    set(L, 'B', b); set(L, 'R', R)
  else
    -- the first report of a window the limiter rolled to on its own (Q 0:
    -- a guess, a Per from the roll) names its end, sooner or later; a
    -- later report moves it only later (a slower reply; or the window
    -- kept ended before the server's): the budget holds until then, as
    -- in process, never less
    if L.Q == 0 or R > L.R then set(L, 'R', R) end
  end
  if L.Q ~= 1 then set(L, 'Q', 1) end
end
L.ttl = math.max(L.ttl, math.ceil((L.R - L.t0) / 1000) + 1000)
save(L)
return old - L.B
`)

// carryLua defines carry(H, k, N, per, p1, want): a bucket's or GCRA's
// state kept in H under another limit of the same kind k is carried over
// to the limit N per per µs with p1 (the spec want) as
// win.TokenBucket.SetLimit and win.GCRA.SetLimit do in process: the
// bucket refilled to now at the old rate, its debt (burst − tokens) kept
// in units under the new burst, the refill fraction scaled to the new
// Per, at most N units below empty; GCRA's TAT − now kept in units at the
// new emission interval, at most (burst + N) intervals past now. Other
// kinds are left as they are. It needs the prelude (refill, emit) and
// changes nothing but H's state fields (the caller stores want).
const carryLua = `
local function carry(H, k, N, per, p1, want)
  if k >= 7 and k <= 9 then
    local v = redis.call('HMGET', H, 's', 't', 'r', 'l')
    local ok, oN, oper, op1 = string.match(v[1] or '', '^(%d+)/(%d+)/(%d+)/(%d+)/%d+$')
    if v[2] and tonumber(ok) == k and v[1] ~= want then
      local L = {N = tonumber(oN), per = tonumber(oper), p1 = tonumber(op1), t = tonumber(v[2]),
        r = tonumber(v[3]) or 0, l = tonumber(v[4]), dirty = {}}
      if k == 9 then
        if L.t > now and L.N > 0 and L.per > 0 and N > 0 and per > 0 then
          local oem, em = emit(L), math.ceil(per / N)
          local d = L.t - now
          -- exact below 2^53; beyond, within a rounding of the exact ceiling
          if d * em < 2^53 then d = math.ceil(d * em / oem) else d = math.ceil(d / oem * em) end
          redis.call('HSET', H, 't', math.min(now + d, now + (p1 + N) * em))
        end
      else
        refill(L, now)
        local debt, r = L.p1 - L.t, L.r or 0
        if per ~= L.per then
          if r * per < 2^53 then r = math.floor(r * per / L.per) else r = math.floor(r / L.per * per) end
        end
        local t = p1 - debt
        if t >= p1 then t, r = p1, 0 end
        if t < -N then t, r = -N, 0 end
        redis.call('HSET', H, 't', t, 'r', r, 'l', L.l)
      end
    end
  end
end
`

// setLimitScript stores charge 1's spec as the limiter's, for every process.
// A bucket's or GCRA's state, kept under another limit of the same kind,
// is carried over as win.TokenBucket.SetLimit and win.GCRA.SetLimit
// do in process: the bucket refilled to now at the old rate, its debt
// (burst − tokens) kept in units under the new burst, the refill fraction
// scaled to the new Per, at most N units below empty; GCRA's TAT − now
// kept in units at the new emission interval, at most (burst + N)
// intervals past now. A completion window, sliding log, fixed window,
// token bucket or GCRA that becomes a quota (a key that learned it counts in the server's
// windows) starts the quota's first window, of the new Per from now, with
// what it counts
// at now (a completion window: the units leased and those that ended
// within its Per; a sliding log: those that started within it; a fixed
// window or fixed completion window: its current window's; a token
// bucket or GCRA: its debt), as
// engine.quotaCarryLocked does in process: no unit counted in neither.
// The other windows keep their state as it is, read under the new limit.
var setLimitScript = goredis.NewScript(header + prelude + carryLua + `
local k, N, per, p1 = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
if k == 10 then
  local v = redis.call('HMGET', KEYS[1], 's', 'f', 'w', 'u', 't', 'r', 'l')
  local ok, oN, oper, op1 = string.match(v[1] or '', '^(%d+)/(%d+)/(%d+)/(%d+)/%d+$')
  ok, oN, oper, op1 = tonumber(ok), tonumber(oN), tonumber(oper), tonumber(op1)
  local used = 0
  if ok == 1 or ok == 3 then
    if ok == 1 then used = tonumber(v[2]) or 0 end
    local es = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. (now - oper), '+inf')
    for j = 1, #es do used = used + wt(es[j]) end
  elseif (ok == 2 or ok == 4) and oper > 0 then
    if tonumber(v[3]) == fdiv(now, oper) then used = tonumber(v[4]) or 0
    elseif ok == 2 then used = tonumber(v[2]) or 0 end
  elseif ok == 7 and v[5] and v[7] and oN > 0 and oper > 0 then
    -- a token bucket's debt, refilled to now: burst less its tokens
    local B = {N = oN, per = oper, p1 = op1, t = tonumber(v[5]), r = tonumber(v[6]) or 0, l = tonumber(v[7]), dirty = {}}
    refill(B, now)
    used = B.p1 - B.t
  elseif ok == 9 and v[5] and oN > 0 and oper > 0 then
    -- GCRA: the TAT's lead over now, in units
    local em = math.ceil(oper / oN)
    local d = tonumber(v[5]) - now
    if d > 0 then used = math.ceil(d / em) end
  end
  -- its end a guess (Q 0) until a report names the server's, as a
  -- window the quota rolled to on its own (prepare)
  if used > 0 then redis.call('HSET', KEYS[1], 'R', now + per, 'B', math.max(N - used, 0), 'Q', 0) end
end
carry(KEYS[1], k, N, per, p1, ARGV[5])
redis.call('HSET', KEYS[1], 's', ARGV[5], 'S', '1')
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[12]) then redis.call('PEXPIRE', KEYS[1], ARGV[12]) end
redis.call('PEXPIRE', KEYS[4], ARGV[12], 'GT')
return 1
`)
