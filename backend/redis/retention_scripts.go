package redis

import goredis "github.com/redis/go-redis/v9"

// Scripts of deletion and retention. They follow the calling convention of
// scripts.go. A stream's retention policy and lease live in its meta hash
// (max_age in nanoseconds, max_events, interest, lease_owner, lease_until
// in µs); per partition trimmed sequences in the hash "<base>trimmed"; a
// group's skipped count in "<group base>sk".

// retentionCommon holds the helpers of the scripts below.
const retentionCommon = `
local PSHIFT = 4398046511104
local function esc(s)
  return (string.gsub(s, '[%%{}:]', function(c) return string.format('%%%02X', string.byte(c)) end))
end
local function gbase(g) return base .. 'g:' .. esc(g) .. ':' end
local function drop_group(g, n)
  local gb = gbase(g)
  for p = 0, n - 1 do
    pcall(redis.call, 'XGROUP', 'DESTROY', skey(p), g)
    redis.call('UNLINK', gb .. 'l:' .. p, gb .. 'd:' .. p, gb .. 'a:' .. p, gb .. 't:' .. p, gb .. 'r:' .. p, gb .. 'c:' .. p, gb .. 'x:' .. p)
  end
  redis.call('UNLINK', gb .. 'f', gb .. 'q', gb .. 'qh', gb .. 'sk', gb .. 'm', gb .. 'aw', gb .. 'ab', gb .. 'dk', gb .. 'rk')
  redis.call('HDEL', base .. 'groups', g)
end
-- gone_ids moves the list of the ID index's buckets to idgone, from which
-- idCleanScript unlinks them a thousand at a time: a stream of a year's
-- sparse appends has millions, too many to unlink in one script.
local function gone_ids()
  local idb, gone = base .. 'idb', base .. 'idgone'
  if redis.call('EXISTS', idb) == 0 then return end
  if redis.call('EXISTS', gone) == 0 then
    redis.call('RENAME', idb, gone)
  else
    redis.call('SUNIONSTORE', gone, gone, idb)
    redis.call('UNLINK', idb)
  end
end
-- uvarint reads a length prefix (IDs are at most 200 bytes: two bytes).
local function first_field(v)
  local b1 = string.byte(v, 1)
  if b1 < 128 then return string.sub(v, 2, 1 + b1) end
  local n = (b1 - 128) + string.byte(v, 2) * 128
  return string.sub(v, 3, 2 + n)
end
`

// deleteGroup: ARGV[2] group name.
var deleteGroupScript = goredis.NewScript(common + retentionCommon + `
local e = need_stream(); if e then return e end
if not redis.call('HGET', base .. 'groups', ARGV[2]) then return redis.error_reply('RHEO_NOGROUP') end
drop_group(ARGV[2], tonumber(redis.call('HGET', KEYS[1], 'partitions')))
redis.call('SPUBLISH', base .. 'wake', '1')
return 1
`)

// deleteStream removes every key of the stream.
var deleteStreamScript = goredis.NewScript(common + retentionCommon + `
local e = need_stream(); if e then return e end
local n = tonumber(redis.call('HGET', KEYS[1], 'partitions'))
for _, g in ipairs(redis.call('HKEYS', base .. 'groups')) do drop_group(g, n) end
for p = 0, n - 1 do redis.call('UNLINK', skey(p)) end
gone_ids()
redis.call('UNLINK', base .. 'groups', base .. 'hw', base .. 'ids', base .. 'trimmed', base .. 'ap', KEYS[1])
redis.call('SPUBLISH', base .. 'wake', '1')
return 1
`)

// idClean: ARGV[2] how many buckets to unlink. It unlinks that many of the
// buckets a deleted stream left in idgone (after moving there the list of
// a stream deleted by an earlier version, which left its buckets behind)
// and returns how many remain.
var idCleanScript = goredis.NewScript(common + retentionCommon + `
if redis.call('EXISTS', KEYS[1]) == 0 then gone_ids() end
local bks = redis.call('SPOP', base .. 'idgone', tonumber(ARGV[2]))
for i, bk in ipairs(bks) do bks[i] = idkey(bk) end
if #bks > 0 then bulk({'UNLINK'}, bks, 1000) end
return redis.call('SCARD', base .. 'idgone')
`)

// setRetention: ARGV[2] max age (ns), ARGV[3] max events, ARGV[4] interest.
var setRetentionScript = goredis.NewScript(common + `
local e = need_stream(); if e then return e end
redis.call('HSET', KEYS[1], 'max_age', ARGV[2], 'max_events', ARGV[3], 'interest', ARGV[4])
return 1
`)

// leaseRetention: ARGV[2] owner, ARGV[3] now (µs), ARGV[4] until (µs).
var leaseRetentionScript = goredis.NewScript(common + `
local e = need_stream(); if e then return e end
local m = redis.call('HMGET', KEYS[1], 'lease_owner', 'lease_until')
if m[1] and m[1] ~= '' and m[1] ~= ARGV[2] and tcmp(m[2] or '0', ARGV[3]) > 0 then
  return 0
end
redis.call('HSET', KEYS[1], 'lease_owner', ARGV[2], 'lease_until', ARGV[4])
return 1
`)

// retentionState returns {max_age, max_events, interest, trimmed-hash-flat}.
var retentionStateScript = goredis.NewScript(common + `
local e = need_stream(); if e then return e end
local m = redis.call('HMGET', KEYS[1], 'max_age', 'max_events', 'interest')
return {m[1] or '0', m[2] or '0', m[3] or '0', redis.call('HGETALL', base .. 'trimmed')}
`)

// trim: ARGV[2] partition, ARGV[3] through, ARGV[4] limit, ARGV[5] "1" to
// force. Returns {removed, trimmed through, skipped, dead letters}. See
// rheo.TrimRequest: unless forced, through is capped at every group's
// frontier (min(F, lowest reopened - 1)); every group's state at or below
// the new trimmed sequence goes, unacked events counted as skipped.
var trimScript = goredis.NewScript(common + retentionCommon + `
local e = need_stream(); if e then return e end
local bad = bad_partitions(2, 1, 1); if bad then return bad end
local p = ARGV[2]
local pn = tonumber(p)
local sk = skey(p)
local trimmed = tonumber(redis.call('HGET', base .. 'trimmed', p) or '0')
local hw = tonumber(redis.call('HGET', base .. 'hw', p) or '0')
local through = math.min(tonumber(ARGV[3]), hw, trimmed + tonumber(ARGV[4]))
local force = ARGV[5] == '1'
local cur = {}
local ok, xg = pcall(redis.call, 'XINFO', 'GROUPS', sk)
if ok then
  for _, g in ipairs(xg) do
    local name, last
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] elseif g[i] == 'last-delivered-id' then last = g[i + 1] end
    end
    if name then cur[name] = tonumber(string.match(last, '^(%d+)')) end
  end
end
local gs = {}
for _, g in ipairs(redis.call('HKEYS', base .. 'groups')) do
  local gb = gbase(g)
  local f = tonumber(redis.call('HGET', gb .. 'f', p) or '0')
  local front = f
  local r = redis.call('ZRANGE', gb .. 'r:' .. p, 0, 0)
  if r[1] then front = math.min(front, tonumber(r[1]) - 1) end
  gs[#gs + 1] = {name = g, gb = gb, f = f, cur = cur[g] or 0}
  if not force then through = math.min(through, front) end
end
if through <= trimmed then return {0, trimmed, 0, 0} end
local skipped_all, dead_all = 0, 0
for _, g in ipairs(gs) do
  local gb = g.gb
  local lkey, qkey = gb .. 'l:' .. p, gb .. 'q'
  local skipped, dead = 0, 0
  local seqs, acks = {}, {}
  for s = trimmed + 1, through do
    local ss = fmt(s)
    local isdead = redis.call('ZSCORE', qkey, p .. ':' .. ss)
    local open = redis.call('HEXISTS', lkey, ss) == 1
    if isdead then dead = dead + 1 end
    if isdead or open or s > g.cur then skipped = skipped + 1 end
    if open then
      seqs[#seqs + 1] = ss
      acks[#acks + 1] = ss .. '-0'
    end
  end
  if #seqs > 0 then
    bulk({'HDEL', lkey}, seqs, 1000)
    bulk({'HDEL', gb .. 'c:' .. p}, seqs, 1000)
    bulk({'HDEL', gb .. 'x:' .. p}, seqs, 1000)
    bulk({'ZREM', gb .. 'd:' .. p}, seqs, 1000)
    unpin(gb .. 'd:' .. p)
    bulk({'ZREM', gb .. 'a:' .. p}, seqs, 1000)
    bulk({'XACK', sk, g.name}, acks, 1000)
  end
  redis.call('ZREMRANGEBYSCORE', gb .. 't:' .. p, '-inf', fmt(through))
  redis.call('ZREMRANGEBYSCORE', gb .. 'r:' .. p, '-inf', fmt(through))
  local lo, hi = fmt(pn * PSHIFT + trimmed + 1), fmt(pn * PSHIFT + through)
  local dl = redis.call('ZRANGEBYSCORE', qkey, lo, hi)
  if #dl > 0 then
    bulk({'HDEL', gb .. 'qh'}, dl, 1000)
    redis.call('ZREMRANGEBYSCORE', qkey, lo, hi)
  end
  if g.cur < through then
    redis.call('XGROUP', 'SETID', sk, g.name, fmt(through) .. '-0')
  end
  if g.f < through then
    -- The group skips the range: its frontier moves to the trimmed point
    -- and absorbs the terminal sequences just above it.
    local f = through
    local tkey = gb .. 't:' .. p
    while true do
      local m = redis.call('ZRANGE', tkey, 0, 255)
      local n = 0
      for i = 1, #m do
        if tonumber(m[i]) == f + 1 then f = f + 1; n = i else break end
      end
      if n > 0 then redis.call('ZREMRANGEBYRANK', tkey, 0, n - 1) end
      if n < 256 then break end
    end
    redis.call('HSET', gb .. 'f', p, fmt(f))
  end
  if skipped > 0 then redis.call('INCRBY', gb .. 'sk', skipped) end
  skipped_all = skipped_all + skipped
  dead_all = dead_all + dead
end
local ents = redis.call('XRANGE', sk, fmt(trimmed + 1) .. '-0', fmt(through) .. '-0')
local ids = {}
for _, en in ipairs(ents) do
  local fields = en[2]
  for i = 1, #fields, 2 do
    if fields[i] == 'e' then ids[#ids + 1] = first_field(fields[i + 1]) end
  end
end
iddel(ids)
redis.call('XTRIM', sk, 'MINID', fmt(through + 1) .. '-0')
redis.call('HSET', base .. 'trimmed', p, fmt(through))
if force then redis.call('SPUBLISH', base .. 'wake', '1') end
return {#ents, through, skipped_all, dead_all}
`)

func init() {
	allScripts = append(allScripts, deleteGroupScript, deleteStreamScript, idCleanScript, setRetentionScript,
		leaseRetentionScript, retentionStateScript, trimScript)
}
