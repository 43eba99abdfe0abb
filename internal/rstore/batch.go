package rstore

import (
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// batchScript runs, in one EVALSHA, several ends (releases, settlements)
// and then several admissions, all of one scope (their keys share the
// scope's hash tag, so one Redis Cluster slot), in order, each as
// releaseScript or admitScript would run alone, with one TIME for the
// whole script (every one decides at the same instant). Their fast paths
// read each limiter's hash once for the whole batch and write it back
// once (a full path writes the cache back before it runs).
//
// KEYS: the KEYS of each one, in order. ARGV[1]: the instant in µs, or ""
// for the server's TIME; ARGV[2] the number of ends NE; ARGV[3] the
// number of admissions NA; then, for each of the NE + NA, the number of
// its KEYS and of its ARGV; then the ARGV of each, in order (its ARGV[1],
// the instant, is replaced by the script's).
//
// Strict FIFO per limiter: once an admission is refused (not late), every
// later admission of the batch that names one of its limiters is refused
// too, changing nothing: it may not start before the one ahead of it on
// that limiter. Such an admission is answered {0, now, wait, refuser,
// flags, ""}: the wait of the one ahead (its own could be shorter, but it
// starts after that one), the refuser its first charge on a blocked
// limiter, flags the "only a release can help" bit of the one ahead; or
// as late when its deadline passed.
//
// Reply: one element per end and admission, in order: the reply its own
// script would give, or a string (an error raised while it ran: its
// effects up to the error stay, as they would alone).
var batchScript = goredis.NewScript(batchSource)

// batchSource is the batch script's text: the release and admission
// scripts as functions of their KEYS and ARGV, and the driver.
const batchSource = `
local now
if ARGV[1] ~= '' then now = tonumber(ARGV[1]) else
  local t = redis.call('TIME'); now = t[1] * 1000000 + t[2] end
-- The fast paths' helpers over a cache: a limiter's hash read once
-- and written once (its changed fields), at FLUSH, which the
-- full paths call first (they read and write Redis) and the batch last;
-- the epoch key read once (only a full path sets it).
local HC, EKM = {}, {}
-- HF: the fields the fast paths read, all read at once (not HGETALL: a
-- sub-window counter's hash holds up to 1000 blocks); another field is
-- read alone when asked for.
local HF = {'s', 'p', 'h', 'x', 'g', 'f', 'fc', 't', 'a', 'E', 'o', 'm', 'z', 'zc', 'w', 'u', 'd', 'c', 'v', 'r', 'l'}
local function hget(H, ...)
  local c = HC[H]
  if c == nil then
    local all = redis.call('HMGET', H, unpack(HF))
    c = {v = {}, d = {}}
    for i = 1, #HF do c.v[HF[i]] = all[i] end
    HC[H] = c
  end
  local fs, out = {...}, {}
  for i = 1, #fs do
    local x = c.v[fs[i]]
    if x == nil then x = redis.call('HGET', H, fs[i]); c.v[fs[i]] = x end
    out[i] = x
  end
  return out
end
local function hset(H, ...)
  local c = HC[H]
  if c == nil then redis.call('HSET', H, ...); return end
  local a = {...}
  for i = 1, #a, 2 do
    local x = a[i + 1]
    -- as Redis stores a number (exact digits below 2^53)
    if type(x) == 'number' then x = string.format('%.17g', x) end
    c.v[a[i]] = x; c.d[a[i]] = true
  end
end
local function RC(cmd, k, ...)
  if cmd == 'HMGET' then return hget(k, ...) end
  if cmd == 'HSET' then return hset(k, ...) end
  if cmd == 'GET' then
    local v = EKM[k]
    if v == nil then v = redis.call('GET', k); EKM[k] = v end
    return v
  end
  return redis.call(cmd, k, ...)
end
local function FLUSH()
  for H, c in pairs(HC) do
    local a = {}
    for f, _ in pairs(c.d) do a[#a + 1] = f; a[#a + 1] = c.v[f] end
    if #a > 0 then redis.call('HSET', H, unpack(a)) end
  end
  HC, EKM = {}, {}
end
local function END(KEYS, ARGV)
` + releaseBody + `
end
local function ADMIT(KEYS, ARGV)
` + admitBody + `
end
local function failed(e)
  if type(e) == 'table' and e.err then return 'E' .. e.err end
  return 'E' .. tostring(e)
end
local NE, NA = tonumber(ARGV[2]), tonumber(ARGV[3])
local ki, ai = 0, 3 + 2 * (NE + NA)
local out, blocked = {}, {}
for j = 1, NE + NA do
  local nk, na = tonumber(ARGV[2 + 2 * j]), tonumber(ARGV[3 + 2 * j])
  local K, A = {}, {}
  for x = 1, nk do K[x] = KEYS[ki + x] end
  for x = 1, na do A[x] = ARGV[ai + x] end
  ki, ai = ki + nk, ai + na
  A[1] = now
  local ok, r
  if j <= NE then
    ok, r = pcall(END, K, A)
    if not ok then r = failed(r) end
  else
    local NC = tonumber(A[4])
    local bi, bw, bf = 0, 0, 0
    for i = 1, NC do
      local b = blocked[K[3 * i - 2]]
      if b and (bi == 0 or b[1] > bw) then bi, bw, bf = i, b[1], b[2] end
    end
    if bi > 0 then
      local DL = A[4 + 8 * NC + 3]
      if DL ~= nil and DL ~= '' and now > tonumber(DL) then r = {0, now, 0, 1, 16, ''}
      else r = {0, now, bw, bi, bf, ''} end
    else
      ok, r = pcall(ADMIT, K, A)
      if not ok then r = failed(r) end
    end
    if type(r) == 'table' and r[1] == 0 and bit.band(r[5], 16) == 0 then
      for i = 1, NC do
        local H = K[3 * i - 2]
        local b = blocked[H]
        if b == nil or r[3] > b[1] then blocked[H] = {r[3], bit.band(r[5], 1)} end
      end
    end
  end
  out[j] = r
end
FLUSH()
return out
`

// Carried returns how many ends and admissions a script command carries,
// given its arguments (a go-redis Cmder's Args): the batch script's ends
// and admissions, 1 for any other script, 0 for a command that runs none
// (round-trip counters of tests and benchmarks).
func Carried(args []any) int {
	if len(args) < 3 {
		return 0
	}
	name, _ := args[0].(string)
	body, _ := args[1].(string)
	switch strings.ToLower(name) {
	case "evalsha", "eval":
	default:
		return 0
	}
	if body != batchScript.Hash() && body != batchSource {
		return 1
	}
	nk, ok := args[2].(int)
	if !ok || len(args) < 3+nk+3 {
		return 1
	}
	ne, _ := args[3+nk+1].(int)
	na, _ := args[3+nk+2].(int)
	return ne + na
}
