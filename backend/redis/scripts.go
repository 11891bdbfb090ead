package redis

import goredis "github.com/redis/go-redis/v9"

// Every operation that changes state runs as one Lua script, so Redis
// executes it atomically: a claim, a settle or an append is either wholly
// applied or not at all, and no other client observes a half-done one.
//
// Calling convention: KEYS[1] is the stream's meta key (it routes the call
// to the node that owns the stream's hash slot); ARGV[1] is the stream's key
// base ("<prefix>{<stream>}:"), from which the scripts build every other key
// of the stream. All those keys carry the same hash tag, so they live in the
// same slot as KEYS[1]. Scripts of a group also get ARGV[2], the group's key
// base, and ARGV[3], the group name.
//
// Numbers become strings only through fmt (string.format %d): Lua prints
// large numbers in exponent form otherwise.

// common is prepended to every script.
const common = `
local base = ARGV[1]
-- Globals cost a lookup or two at each use: the hot loops use these.
local rcall, sformat = redis.call, string.format
local function fmt(n) return sformat('%d', n) end
local function skey(p) return base .. 's:' .. p end
local function bulk(head, list, step, tail)
  -- Lua's unpack has a small stack: send long argument lists in chunks.
  -- head is the command and its leading arguments; replies are returned.
  -- Heads of two to four arguments without a tail (most calls) pass the
  -- list's chunk straight to the command instead of copying it.
  local replies = {}
  local n = #list
  local h = #head
  local i = 1
  while i <= n do
    local j = math.min(i + step - 1, n)
    if tail == nil and h == 2 then
      replies[#replies + 1] = redis.call(head[1], head[2], unpack(list, i, j))
    elseif tail == nil and h == 3 then
      replies[#replies + 1] = redis.call(head[1], head[2], head[3], unpack(list, i, j))
    elseif tail == nil and h == 4 then
      replies[#replies + 1] = redis.call(head[1], head[2], head[3], head[4], unpack(list, i, j))
    else
      local args = {}
      for _, x in ipairs(head) do args[#args + 1] = x end
      for k = i, j do args[#args + 1] = list[k] end
      if tail then for _, t in ipairs(tail) do args[#args + 1] = t end end
      replies[#replies + 1] = redis.call(unpack(args))
    end
    i = j + 1
  end
  return replies
end
local function mget(key, list, a, b)
  -- HMGET of the fields list[a..b], as one flat list (false where missing).
  if b < a then return {} end
  if b - a < 1000 then return redis.call('HMGET', key, unpack(list, a, b)) end
  local out = {}
  local i = a
  while i <= b do
    local j = math.min(i + 999, b)
    for _, v in ipairs(redis.call('HMGET', key, unpack(list, i, j))) do out[#out + 1] = v end
    i = j + 1
  end
  return out
end
local function mrange(key, a, b) return mget(key, ARGV, a, b) end
-- The ID index maps an event ID to "p:sequence". A stream created with
-- idl = 2 in its meta hash keeps an ID shaped like a UUIDv7 (the IDs rheo
-- generates) in a hash per 4.096 s of the ID's timestamp, "ids:" and the
-- ID's first ten characters, and lists those buckets in the set "idb";
-- every other ID, and every ID of a stream created by an earlier version,
-- in the hash "ids". Appends so write to a hash holding the last seconds'
-- IDs, whatever the stream's length: one hash of every ID spends a third
-- of each doubling of its size rehashing, and outgrows the CPU's caches.
-- A UUIDv7 missing from its bucket is looked for in "ids" too when that
-- exists: a process of an earlier version appending to a stream with
-- buckets puts every ID there. Deleting a stream moves "idb" to "idgone",
-- whose buckets go a thousand per call after it (idCleanScript).
local idl = nil
local legacy = nil
local function has_legacy()
  if legacy == nil then legacy = redis.call('EXISTS', base .. 'ids') == 1 end
  return legacy
end
local function idbucket(id)
  -- The bucket of id, or false for the hash "ids".
  if idl == nil then idl = redis.call('HGET', KEYS[1], 'idl') == '2' end
  if idl and #id == 36 and string.byte(id, 15) == 55 and string.byte(id, 9) == 45 then
    return string.sub(id, 1, 10)
  end
  return false
end
local function idkey(bk)
  if bk then return base .. 'ids:' .. bk end
  return base .. 'ids'
end
local function idget(id)
  local bk = idbucket(id)
  local v = redis.call('HGET', idkey(bk), id)
  if not v and bk and has_legacy() then v = redis.call('HGET', base .. 'ids', id) end
  return v
end
local function idsplit(list, a, b, step)
  -- The buckets of the IDs list[a], list[a + step], ... up to list[b], in
  -- the order first seen, and per bucket the positions of its IDs; no
  -- positions when they all share one bucket (nearly always).
  local b1 = idbucket(list[a])
  local i = a + step
  if b1 then
    -- (idbucket inlined, a third of its time: sharing b1's first ten
    -- characters, an ID has the '-' at 9 too.)
    while i <= b do
      local id = list[i]
      if #id ~= 36 or string.byte(id, 15) ~= 55 or string.sub(id, 1, 10) ~= b1 then break end
      i = i + step
    end
  else
    while i <= b and not idbucket(list[i]) do i = i + step end
  end
  if i > b then return {b1}, nil end
  local bs, pos, at = {}, {}, {}
  for j = a, b, step do
    local bk = idbucket(list[j])
    local k = at[bk]
    if not k then
      k = #bs + 1
      bs[k], pos[k], at[bk] = bk, {}, k
    end
    local ps = pos[k]
    ps[#ps + 1] = j
  end
  return bs, pos
end
local function idlookup(list, a, b)
  -- The index's values of the IDs list[a..b], as one flat list (false
  -- where missing), and their bucket when they all share one ({bucket}:
  -- what idstore can be told of IDs among them).
  if b < a then return {} end
  local bs, pos = idsplit(list, a, b, 1)
  local out
  local one = nil
  if not pos then
    out = mget(idkey(bs[1]), list, a, b)
    one = bs
    if not bs[1] then return out, one end
  else
    out = {}
    for k, bk in ipairs(bs) do
      local ids = {}
      for j, q in ipairs(pos[k]) do ids[j] = list[q] end
      local r = mget(idkey(bk), ids, 1, #ids)
      for j, q in ipairs(pos[k]) do out[q - a + 1] = r[j] end
    end
  end
  -- UUIDv7s missing from their buckets are looked for in "ids" (see
  -- has_legacy), when there is one.
  local any = false
  for i = 1, b - a + 1 do
    if not out[i] then any = true; break end
  end
  if not any or not has_legacy() then return out, one end
  local miss, at = {}, {}
  local function add(i)
    if not out[i] then
      miss[#miss + 1] = list[a + i - 1]
      at[#at + 1] = i
    end
  end
  if not pos then
    for i = 1, b - a + 1 do add(i) end
  else
    for k, bk in ipairs(bs) do
      if bk then for _, q in ipairs(pos[k]) do add(q - a + 1) end end
    end
  end
  if #miss > 0 then
    local r = mget(base .. 'ids', miss, 1, #miss)
    for j, i in ipairs(at) do out[i] = r[j] end
  end
  return out, one
end
local function idstore(kv, m, one)
  -- Writes the pairs kv[1..m] (ID, "p:sequence") to the index; one, when
  -- given, is their bucket as idlookup returned it.
  if m == 0 then return end
  local bs, pos = one, nil
  if not bs then bs, pos = idsplit(kv, 1, m - 1, 2) end
  if not pos then
    bulk({'HSET', idkey(bs[1])}, kv, 1000)
  else
    for k, bk in ipairs(bs) do
      local flat = {}
      for _, q in ipairs(pos[k]) do
        flat[#flat + 1] = kv[q]
        flat[#flat + 1] = kv[q + 1]
      end
      bulk({'HSET', idkey(bk)}, flat, 1000)
    end
  end
  local reg = {}
  for _, bk in ipairs(bs) do
    if bk then reg[#reg + 1] = bk else legacy = true end
  end
  if #reg > 0 then bulk({'SADD', base .. 'idb'}, reg, 1000) end
end
local function iddel(ids)
  -- Removes the IDs from the index; an emptied bucket leaves "idb".
  if #ids == 0 then return end
  local bs, pos = idsplit(ids, 1, #ids, 1)
  for k, bk in ipairs(bs) do
    local key = idkey(bk)
    if pos then
      local some = {}
      for j, q in ipairs(pos[k]) do some[j] = ids[q] end
      bulk({'HDEL', key}, some, 1000)
    else
      bulk({'HDEL', key}, ids, 1000)
    end
    if bk and redis.call('EXISTS', key) == 0 then redis.call('SREM', base .. 'idb', bk) end
  end
  -- Where some are UUIDv7s, any of them an earlier version put in "ids"
  -- goes from there too.
  if (pos or bs[1]) and has_legacy() then bulk({'HDEL', base .. 'ids'}, ids, 1000) end
end
-- DUE_PIN is a member the fetch adds to every due set it writes (d:<p>),
-- scored +inf, so never due. It is longer than zset-max-listpack-value
-- (64 by default), which keeps the set in Redis's skiplist encoding: a
-- listpack takes a scan per insert and removal, so a fetch's run of ZADDs
-- cost time quadratic in the leases of the partition.
local DUE_PIN = '~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~'
local function unpin(dkey)
  -- A due set holding only DUE_PIN goes, like an empty one. Returns
  -- whether the set is gone.
  local n = redis.call('ZCARD', dkey)
  if n == 1 then redis.call('ZREM', dkey, DUE_PIN) end
  return n <= 1
end
-- Times (µs since 1970) pass through the scripts as decimal strings. Past
-- 2^53 µs (mid-2255; before 1685 below zero) a Lua number or a sorted
-- set's score, both doubles, no longer holds every microsecond, so times
-- are compared as strings (tcmp) and a due set keeps, beside each score
-- that is not exact, the exact due time (see due_range).
local BIG = 9007199254740992 -- 2^53
-- READY is the due time of a delivery made available at once by a replay
-- or a redrive: below every time a clock can read (-2^61 µs, as the SQL
-- stores' ready marker), so that it is due whatever the clock says, even
-- before 1970. A double holds it exactly: it never needs x:<p>.
local READY = '-2305843009213693952'
local function small(t)
  -- Whether the time t (a decimal string) is exact as a double.
  local n = tonumber(t)
  return n > -BIG and n < BIG
end
local function tcmp(a, b)
  -- -1, 0 or 1 as time a is before, at or after time b (canonical decimal
  -- strings: no leading zeros, no '-0').
  if a == b then return 0 end
  local na, nb = string.byte(a, 1) == 45, string.byte(b, 1) == 45
  if na ~= nb then
    if na then return -1 end
    return 1
  end
  if na then a, b = string.sub(b, 2), string.sub(a, 2) end
  if #a ~= #b then
    if #a < #b then return -1 end
    return 1
  end
  if a < b then return -1 end
  return 1
end
local function tstep(t, d)
  -- The time t plus d (1 or -1) microseconds, as a decimal string.
  if small(t) then return fmt(tonumber(t) + d) end
  local neg = string.byte(t, 1) == 45
  if neg then t, d = string.sub(t, 2), -d end
  local digits = {}
  for k = 1, #t do digits[k] = string.byte(t, k) - 48 end
  local i = #t
  while i > 0 do
    local v = digits[i] + d
    if v >= 0 and v <= 9 then digits[i] = v; break end
    digits[i] = (v + 10) % 10
    i = i - 1
  end
  local r = table.concat(digits)
  if i == 0 then r = '1' .. r end -- carried past the first digit
  r = string.gsub(r, '^0+', '')
  if neg then return '-' .. r end
  return r
end
local function need_stream()
  if redis.call('EXISTS', KEYS[1]) == 0 then
    return redis.error_reply('RHEO_NOSTREAM')
  end
  return nil
end
-- bad_partitions refuses a partition (ARGV[first], ARGV[first+step], ...,
-- n of them) the stream does not have: a client checks partitions against
-- a count it caches, which another client may have made out of date by
-- creating the stream again with fewer.
local function bad_partitions(first, step, n)
  local np = tonumber(redis.call('HGET', KEYS[1], 'partitions'))
  for i = 0, n - 1 do
    local p = tonumber(ARGV[first + i * step])
    if p < 0 or p >= np then
      return redis.error_reply('RHEO_NOPARTITION ' .. p .. ' ' .. np)
    end
  end
  return nil
end
`

// groupCommon holds the group helpers: the frontier bookkeeping and dead
// letters. It expects ARGV[2] (group key base) and ARGV[3] (group name).
const groupCommon = `
local gb = ARGV[2]
local group = ARGV[3]
local PSHIFT = 4398046511104 -- 2^42: dead-letter score = partition * 2^42 + sequence
local function need_group()
  if redis.call('EXISTS', KEYS[1]) == 0 then
    return nil, redis.error_reply('RHEO_NOSTREAM')
  end
  local gv = redis.call('HGET', base .. 'groups', group)
  if not gv then
    return nil, redis.error_reply('RHEO_NOGROUP')
  end
  return tonumber(string.match(gv, '^(%d+)')), nil
end

-- Frontier: F is the stored frontier of a partition; t:<p> holds terminal
-- sequences above F (they collapse into F once contiguous); r:<p> holds
-- sequences at or below F that were reopened (replay, redrive) and are not
-- terminal again yet. The effective frontier is min(F, min(r) - 1).
local F = {}
local term = {}
local function getF(p)
  local f = F[p]
  if f == nil then
    f = tonumber(redis.call('HGET', gb .. 'f', p) or '0')
    F[p] = f
  end
  return f
end
-- forget_claims removes the claim records (c:<p>, written only by earlier
-- versions) of the given sequences, if the partition has any.
local function forget_claims(p, list)
  local ckey = gb .. 'c:' .. p
  if redis.call('EXISTS', ckey) == 1 then bulk({'HDEL', ckey}, list, 1000) end
end
local function mark_terminal(p, seq)
  local t = term[p]
  if t == nil then t = {}; term[p] = t end
  t[#t + 1] = seq
end
local function flush_frontier()
  -- The frontiers of the partitions, read and written with one call each
  -- for all of them; the sets of terminal sequences are looked into only
  -- where some exist.
  local ps, tks = {}, {}
  for p in pairs(term) do
    if F[p] == nil then ps[#ps + 1] = p end
    tks[#tks + 1] = gb .. 't:' .. p
  end
  if #ps > 1 then
    local vs = mget(gb .. 'f', ps, 1, #ps)
    for i, p in ipairs(ps) do F[p] = tonumber(vs[i] or '0') end
  end
  local anyt = true
  if #tks > 1 then anyt = redis.call('EXISTS', unpack(tks)) > 0 end
  local setf = {}
  for p, list in pairs(term) do
    table.sort(list)
    local f0 = getF(p)
    local f = f0
    local rem, add = {}, {}
    for _, s in ipairs(list) do
      if s <= f0 then
        rem[#rem + 1] = fmt(s)
      elseif s == f + 1 then
        f = s
      else
        add[#add + 1] = s
        add[#add + 1] = fmt(s)
      end
    end
    if #rem > 0 then bulk({'ZREM', gb .. 'r:' .. p}, rem, 1000) end
    local tkey = gb .. 't:' .. p
    if #add > 0 then bulk({'ZADD', tkey}, add, 1000) end
    if f > f0 and (anyt or #add > 0) then
      while true do
        local m = redis.call('ZRANGE', tkey, 0, 255)
        local n = 0
        for i = 1, #m do
          if tonumber(m[i]) == f + 1 then f = f + 1; n = i else break end
        end
        if n > 0 then redis.call('ZREMRANGEBYRANK', tkey, 0, n - 1) end
        if n < 256 then break end
      end
    end
    if f > f0 then
      setf[#setf + 1] = p
      setf[#setf + 1] = fmt(f)
      F[p] = f
    end
  end
  if #setf > 0 then bulk({'HSET', gb .. 'f'}, setf, 1000) end
  term = {}
end
local function dead(p, seq, attempt, reason, now)
  local m = p .. ':' .. fmt(seq)
  redis.call('ZADD', gb .. 'q', p * PSHIFT + seq, m)
  redis.call('HSET', gb .. 'qh', m, fmt(attempt) .. ':' .. now .. ':' .. reason)
  mark_terminal(p, seq)
end
local function cursor(p)
  local ok, gs = pcall(redis.call, 'XINFO', 'GROUPS', skey(p))
  if not ok then return 0 end
  for _, g in ipairs(gs) do
    local name, last
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] elseif g[i] == 'last-delivered-id' then last = g[i + 1] end
    end
    if name == group then return tonumber(string.match(last, '^(%d+)')) end
  end
  return 0
end
-- Exact due times: a due time written to d:<p> that its score cannot hold
-- exactly (see small) is written to the hash x:<p> too, field the
-- sequence. A score stands for the time in x:<p> only when that time
-- rounds to it, so a field left by an earlier due time of the delivery
-- (or none, from a version that wrote none) leaves the score as it is.
local function keep_exact(p, at, seqs)
  if at == READY or small(at) then return end
  local kv = {}
  for _, ss in ipairs(seqs) do kv[#kv + 1] = ss; kv[#kv + 1] = at end
  bulk({'HSET', gb .. 'x:' .. p}, kv, 1000)
end
local function forget_exact(p, list)
  local xkey = gb .. 'x:' .. p
  if redis.call('EXISTS', xkey) == 1 then bulk({'HDEL', xkey}, list, 1000) end
end
-- exact_due is the due time of sequence ss of partition p, scored sc in
-- d:<p> (sc a number), as a decimal string; xv is its field of x:<p>, if
-- read already (nil: not read yet).
local function exact_due(p, ss, sc, xv)
  if sc > -BIG and sc < BIG then return fmt(sc) end
  if xv == nil then xv = redis.call('HGET', gb .. 'x:' .. p, ss) end
  if xv and tonumber(xv) == sc then return xv end
  return fmt(sc)
end
-- due_range returns the members of d:<p> due after lo (at or after it if
-- not lox; lo may be '-inf') and at or before hi, by exact due time.
-- Rounding keeps order, so the scores of those members are in the range
-- of the rounded bounds; what else shares a rounded bound is dropped on
-- its exact time.
local function due_range(p, lo, lox, hi)
  local dkey = gb .. 'd:' .. p
  if (lo == '-inf' or small(lo)) and small(hi) then
    if lox then lo = '(' .. lo end
    return redis.call('ZRANGEBYSCORE', dkey, lo, hi)
  end
  local r = redis.call('ZRANGEBYSCORE', dkey, lo, hi, 'WITHSCORES')
  local big = {}
  for i = 1, #r, 2 do
    local sc = tonumber(r[i + 1])
    if not (sc > -BIG and sc < BIG) then big[#big + 1] = r[i] end
  end
  local xs = {}
  if #big > 0 then
    local vals = bulk({'HMGET', gb .. 'x:' .. p}, big, 1000)
    local k = 0
    for _, chunk in ipairs(vals) do
      for _, v in ipairs(chunk) do k = k + 1; xs[big[k]] = v end
    end
  end
  local out = {}
  for i = 1, #r, 2 do
    local t = exact_due(p, r[i], tonumber(r[i + 1]), xs[r[i]] or false)
    local c = 1
    if lo ~= '-inf' then c = tcmp(t, lo) end
    if (c > 0 or (c == 0 and not lox)) and tcmp(t, hi) <= 0 then out[#out + 1] = r[i] end
  end
  return out
end
-- Ready sets: a:<p> holds, scored by sequence, exactly the members of the
-- due set d:<p> whose due time is at or below the partition's watermark,
-- field p of the hash m (µs; the now of a past fetch), so that a fetch
-- claims the lowest sequences due with a ZRANGE of the first few instead of
-- reading and sorting every due delivery. Whatever writes a due time keeps
-- that true (set_due); a fetch moves what became due since the watermark
-- and buries the poison among it, so no lease at its attempt limit is ever
-- ready. A partition without a watermark (a store written by earlier
-- versions) has no ready set yet: its next fetch builds one from d:<p>.
local M = {}
local function getM(p)
  local m = M[p]
  if m == nil then
    m = redis.call('HGET', gb .. 'm', p) or false
    M[p] = m
  end
  return m
end
-- lower moves partition p's watermark below s: the members due in
-- [s, watermark] leave the ready set. A lease is about to be given the due
-- time s (a renewal on a clock behind the watermark): it must not be ready
-- before a fetch has checked it for poison.
local function lower(p, s)
  local m = getM(p)
  if not m or tcmp(s, m) > 0 then return end
  local back = due_range(p, s, false, m)
  if #back > 0 then bulk({'ZREM', gb .. 'a:' .. p}, back, 1000) end
  m = tstep(s, -1)
  redis.call('HSET', gb .. 'm', p, m)
  M[p] = m
end
-- set_due gives sequence ss of partition p the due time at (µs, a decimal
-- string; READY: at once) in d:<p>, and keeps a:<p> in step: a delivery
-- waiting to be claimed again due by the watermark is ready at once; a
-- lease never is.
local function set_due(p, ss, at, leased)
  local m = getM(p)
  if m then
    local akey = gb .. 'a:' .. p
    if tcmp(at, m) > 0 then
      redis.call('ZREM', akey, ss)
    elseif leased then
      lower(p, at)
      redis.call('ZREM', akey, ss)
    else
      redis.call('ZADD', akey, ss, ss)
    end
  end
  redis.call('ZADD', gb .. 'd:' .. p, at, ss)
  redis.call('SADD', gb .. 'dk', p)
  keep_exact(p, at, {ss})
end
-- reopen makes an offered delivery available now with attempts reset,
-- wherever it was: leased or waiting, acked or dead-lettered.
local function reopen(p, seq)
  local ss = fmt(seq)
  local lkey = gb .. 'l:' .. p
  if not redis.call('HGET', lkey, ss) then
    local m = p .. ':' .. ss
    if redis.call('ZREM', gb .. 'q', m) == 1 then redis.call('HDEL', gb .. 'qh', m) end
    if seq <= getF(p) then
      redis.call('ZADD', gb .. 'r:' .. p, seq, ss)
      redis.call('SADD', gb .. 'rk', p)
    else
      redis.call('ZREM', gb .. 't:' .. p, ss)
    end
  end
  redis.call('HSET', lkey, ss, ':0')
  set_due(p, ss, READY, false)
end
local function wake()
  redis.call('SPUBLISH', base .. 'wake', '1')
end
`

// Stream entries carry one field, e, holding the packed event (see
// appendEntry); Redis stores the field name once per listpack node.
//
// createStream: ARGV[2] partitions, ARGV[3] created (µs).
var createStreamScript = goredis.NewScript(common + `
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.error_reply('RHEO_EXISTS')
end
-- The ID index of a stream deleted under the name is still being removed
-- (or was left by an earlier version's delete): idCleanScript first.
if redis.call('EXISTS', base .. 'idgone', base .. 'idb') > 0 then
  return redis.error_reply('RHEO_IDGONE')
end
redis.call('HSET', KEYS[1], 'partitions', ARGV[2], 'created', ARGV[3], 'idl', '2', 'ac', '0')
return 1
`)

// streamState returns {partitions, created, hw-hash-flat}.
var streamStateScript = goredis.NewScript(common + `
local e = need_stream(); if e then return e end
local m = redis.call('HMGET', KEYS[1], 'partitions', 'created')
return {m[1], m[2], redis.call('HGETALL', base .. 'hw')}
`)

// appendScript: ARGV[2] g, the number of partition groups; then g pairs
// (partition, count); then the n event IDs; then the n packed entries
// (see appendEntry). Events arrive grouped by partition, in input order
// within a partition, so each group is one HINCRBY and a run of XADDs, and
// the IDs form one contiguous ARGV range that HMGET takes as it is. Returns,
// when no ID was there already, the first new sequence of each group (its
// events have that one and the next ones, in order); otherwise, per event in
// that grouped order, its new sequence (integer) or the stored event
// {partition, seq, fields} when the ID was already there. A
// partition outside the stream's writes nothing: RHEO_NOPARTITION p n.
//
// The loop is kept lean on purpose: one XADD and three short strings per
// event, no per-event tables.
var appendScript = goredis.NewScript(common + `
local meta = redis.call('HMGET', KEYS[1], 'partitions', 'idl', 'ac')
if not meta[1] then return redis.error_reply('RHEO_NOSTREAM') end
local np = tonumber(meta[1])
idl = meta[2] == '2'
local g = tonumber(ARGV[2])
for gi = 1, g do
  local p = tonumber(ARGV[1 + 2 * gi])
  if p < 0 or p >= np then
    return redis.error_reply('RHEO_NOPARTITION ' .. p .. ' ' .. np)
  end
end
local ib = 3 + 2 * g
local n = (#ARGV - ib + 1) / 2
local eb = ib + n
local found, one = idlookup(ARGV, ib, ib + n - 1)
local dup = false
for k = 1, n do
  if found[k] then dup = true; break end
end
local out = {}
local firsts = {}
local idx = {}
local m = 0
local hwk = base .. 'hw'
local q = 0
local touched = {}
for gi = 1, g do
  local p = ARGV[1 + 2 * gi]
  local c = tonumber(ARGV[2 + 2 * gi])
  local fresh = c
  if dup then
    for k = q + 1, q + c do if found[k] then fresh = fresh - 1 end end
  end
  local seq = 0
  if fresh > 0 then
    seq = redis.call('HINCRBY', hwk, p, fresh) - fresh
    touched[#touched + 1] = p
  end
  firsts[gi] = seq + 1
  local sk = skey(p)
  local pp = p .. ':'
  for k = q + 1, q + c do
    local f = found[k]
    if f then
      local fp, fs = string.match(f, '^(%d+):(%d+)$')
      local r = redis.call('XRANGE', skey(fp), fs .. '-0', fs .. '-0')
      out[k] = {tonumber(fp), tonumber(fs), r[1] and r[1][2] or {}}
    else
      seq = seq + 1
      local ss = sformat('%d', seq)
      rcall('XADD', sk, ss, 'e', ARGV[eb + k - 1])
      idx[m + 1] = ARGV[ib + k - 1]
      idx[m + 2] = pp .. ss
      m = m + 2
      if dup then out[k] = seq end
    end
  end
  q = q + c
end
idstore(idx, m, one)
if m > 0 then
  -- The append counter and the partitions it appended to (see appended in
  -- fetchSource), on streams that keep them.
  if meta[3] then
    local c = fmt(redis.call('HINCRBY', KEYS[1], 'ac', 1))
    local za = {}
    for i, p in ipairs(touched) do za[2 * i - 1] = c; za[2 * i] = p end
    bulk({'ZADD', base .. 'ap'}, za, 1000)
  end
  redis.call('SPUBLISH', base .. 'wake', '1')
end
if dup then return out end
return firsts
`)

// readScript: ARGV[2] partition, ARGV[3] first entry id, ARGV[4] count.
var readScript = goredis.NewScript(common + `
local e = need_stream(); if e then return e end
local bad = bad_partitions(2, 1, 1); if bad then return bad end
return redis.call('XRANGE', skey(ARGV[2]), ARGV[3], '+', 'COUNT', ARGV[4])
`)

// rangeScript reads entries of one partition in either direction:
// ARGV[2] partition, ARGV[3] lo id, ARGV[4] hi id, ARGV[5] count, ARGV[6]
// "rev" for descending. It does not check the stream (Query does first).
var rangeScript = goredis.NewScript(common + `
if ARGV[6] == 'rev' then
  return redis.call('XREVRANGE', skey(ARGV[2]), ARGV[4], ARGV[3], 'COUNT', ARGV[5])
end
return redis.call('XRANGE', skey(ARGV[2]), ARGV[3], ARGV[4], 'COUNT', ARGV[5])
`)

// eventsScript: ARGV[2..] event IDs. Returns {partition, seq, fields} rows.
var eventsScript = goredis.NewScript(common + `
local e = need_stream(); if e then return e end
local out = {}
for i = 2, #ARGV do
  local v = idget(ARGV[i])
  if v then
    local p, s = string.match(v, '^(%d+):(%d+)$')
    local r = redis.call('XRANGE', skey(p), s .. '-0', s .. '-0')
    if r[1] then out[#out + 1] = {tonumber(p), tonumber(s), r[1][2]} end
  end
end
return out
`)

// createGroup: ARGV[4] "max:created", ARGV[5] n, ARGV[6..] start per partition.
var createGroupScript = goredis.NewScript(common + groupCommon + `
if redis.call('EXISTS', KEYS[1]) == 0 then return redis.error_reply('RHEO_NOSTREAM') end
if redis.call('HSETNX', base .. 'groups', group, ARGV[4]) == 0 then
  return redis.error_reply('RHEO_EXISTS')
end
local n = tonumber(ARGV[5])
redis.call('UNLINK', gb .. 'f', gb .. 'q', gb .. 'qh', gb .. 'm', gb .. 'dk', gb .. 'rk')
-- The group lists in dk the partitions that may have a due set (see the
-- fetch), and in rk those that may have reopened sequences (see lag);
-- groups created by earlier versions have no such field.
redis.call('HSET', gb .. 'm', 'dk', '1')
for p = 0, n - 1 do
  local s = ARGV[6 + p]
  redis.call('UNLINK', gb .. 'l:' .. p, gb .. 'd:' .. p, gb .. 'a:' .. p, gb .. 't:' .. p, gb .. 'r:' .. p, gb .. 'c:' .. p, gb .. 'x:' .. p)
  local ok = pcall(redis.call, 'XGROUP', 'CREATE', skey(p), group, s .. '-0', 'MKSTREAM')
  if not ok then
    redis.call('XGROUP', 'DESTROY', skey(p), group)
    redis.call('XGROUP', 'CREATE', skey(p), group, s .. '-0', 'MKSTREAM')
  end
  redis.call('HSET', gb .. 'f', p, s)
end
return 1
`)

// fetch: ARGV[4] now (µs), ARGV[5] expires (µs), ARGV[6] limit, ARGV[7]
// number of partitions k, ARGV[8..7+k] partitions in fetch order, then
// limit fresh lease IDs, then the consumer ID. A fetch from the partitions
// 0 to k-1 sends -k and then, in ARGV[8], the first of them in fetch order
// (the others follow it, wrapping around), instead of the list. Returns flat triples, one
// per run of claims from one partition: partition, then either the index
// (1-based) of the first fresh lease ID the run used and flat pairs (seq,
// entry fields as XREADGROUP returned them) for events not offered before
// (attempt 1, lease IDs in entry order), or 0 and flat rows of 4 (seq,
// lease ID, attempt, entry fields) for deliveries claimed again. The flat
// pairs spare the interpreter a row per event, and Redis the conversion of
// a table per entry back into a reply.
//
// A lease is the field of its sequence in l:<p>, valued "<lease ID>:<attempt>
// :<claimed at (µs)>:<consumer ID>" (one write per claim; what ListLeases
// reads); a delivery waiting to be claimed again is ":<attempt>". Stores
// written by earlier versions may hold leases as "<lease ID>:<attempt>" with
// the claim record "<lease ID>:<claimed at>:<consumer ID>" in c:<p>: every
// script reads both, and removes c:<p> fields with the lease.
var fetchScript = goredis.NewScript(fetchSource)

const fetchSource = common + groupCommon + `
local maxA, err = need_group(); if err then return err end
local nowS = ARGV[4]
local exp = ARGV[5]
local limit = tonumber(ARGV[6])
local k = tonumber(ARGV[7])
local parts = {}
local idbase -- ARGV[idbase + i] is the i-th fresh lease ID
local every = nil -- whether the fetch is from every partition (nil: not known yet)
local ranged = k < 0 -- (parts are 0 to k-1)
local MX, DK = unpack(redis.call('HMGET', gb .. 'm', '*', 'dk'))
-- cand: the partitions that can have events not offered yet, when known
-- (see "Which partitions can have events not offered yet" below).
local AC = redis.call('HGET', KEYS[1], 'ac')
local cand = nil
if AC then
  local aw = redis.call('GET', gb .. 'aw')
  if aw then
    cand = {}
    for _, p in ipairs(redis.call('ZRANGEBYSCORE', base .. 'ap', '(' .. aw, '+inf')) do cand[p] = true end
    for _, p in ipairs(redis.call('SMEMBERS', gb .. 'ab')) do cand[p] = true end
  end
end
-- sparse: a fetch from partitions 0 to k-1 (k > 8) of a group that lists
-- the partitions with due sets (dk), whose candidates are known, serves
-- only those that can have anything to claim, the candidates and the
-- listed ones, in fetch order; the others would take nothing. (Their
-- quota stays a share of all of them: served.)
local sparse = false
if k < 0 then
  k = -k
  local np = tonumber(redis.call('HGET', KEYS[1], 'partitions'))
  if k > np then return redis.error_reply('RHEO_NOPARTITION ' .. fmt(k - 1) .. ' ' .. fmt(np)) end
  every = k == np
  local first = tonumber(ARGV[8])
  sparse = k > 8 and DK and cand and true or false
  if sparse then
    -- In fetch order: by place after first, numbers that table.sort
    -- orders without a Lua comparator (one cost more than the rest of
    -- the list's making).
    local at, places = {}, {}
    local function add(p)
      local n = tonumber(p)
      if n < k then
        local x = (n - first) % k
        if not at[x] then at[x] = p; places[#places + 1] = x end
      end
    end
    for p in pairs(cand) do add(p) end
    for _, p in ipairs(redis.call('SMEMBERS', gb .. 'dk')) do add(p) end
    table.sort(places)
    for i, x in ipairs(places) do parts[i] = at[x] end
  else
    for i = 1, k do parts[i] = fmt((first + i - 1) % k) end
  end
  idbase = 8
else
  local bad = bad_partitions(8, 1, k); if bad then return bad end
  for i = 1, k do parts[i] = ARGV[7 + i] end
  idbase = 7 + k
end
local served = k -- the partitions the fetch is from
k = #parts -- (fewer when sparse)
local lp, lk = parts, k -- the partitions the share loop visits (see live)
local claimed = ':' .. nowS .. ':' .. ARGV[idbase + limit + 1]
local used = 0
local out = {}
local nout = 0
local ready = {} -- partition -> how many deliveries its ready set holds (false: not known yet)
local dkadd = {} -- the partitions lease_fresh wrote a due set of, for dk
local newdone = {}
local setm = {}
-- Field '*' of m bounds every watermark from above (only a fetch raises
-- one, to its own now). A lease due at or below a watermark would never be
-- moved into the ready set (a fetch moves only what became due after it),
-- so where a lease's expiry is at or below the bound (a clock behind one
-- that fetched earlier) its partition's watermark is lowered below it
-- first: see due_lease.
local function due_lease(p)
  if not MX or tcmp(exp, MX) <= 0 then -- (no bound yet: look)
    local m = getM(p)
    if m and tcmp(exp, m) <= 0 then lower(p, exp) end
  end
end
-- prepare brings partition p's ready set (see set_due) to now, m being its
-- watermark (false: none yet, so the set is built from the whole due set).
-- Deliveries that became due since the watermark (available with any nack
-- delay passed, or leased and expired) join the ready set; expired leases
-- at the attempt limit are dead-lettered instead (R6): a fetch buries all
-- the poison of the partitions it serves before it claims, on every
-- backend. A clock behind the watermark takes back what is not due by it.
-- Each delivery is moved once per time it becomes due, so a fetch does not
-- read the backlog of ready deliveries, only its first few (take). The
-- watermark moves to now only when that changes what it means: when
-- something moved, when the clock is behind it, or when there was none.
local function prepare(p, m)
  local lkey = gb .. 'l:' .. p
  local dkey = gb .. 'd:' .. p
  local akey = gb .. 'a:' .. p
  local lo = nil
  local moved = false
  if not m then
    redis.call('DEL', akey)
    lo = '-inf'
    moved = true
  elseif tcmp(nowS, m) > 0 then
    lo = m
  elseif tcmp(nowS, m) < 0 then
    local back = due_range(p, nowS, true, m)
    if #back > 0 then bulk({'ZREM', akey}, back, 1000) end
    moved = true
  end
  if lo then
    local lst = due_range(p, lo, lo ~= '-inf', nowS)
    if #lst > 0 then moved = true end
    local drop, poison, acks, add = {}, {}, {}, {}
    local i = 1
    while i <= #lst do
      local j = math.min(i + 999, #lst)
      local vals = redis.call('HMGET', lkey, unpack(lst, i, j))
      for x = 1, #vals do
        local ss = lst[i + x - 1]
        local v = vals[x]
        if not v then
          drop[#drop + 1] = ss
        else
          local lid, att = string.match(v, '^([^:]*):(%d+)')
          att = tonumber(att)
          if lid ~= '' and att >= maxA then
            drop[#drop + 1] = ss
            poison[#poison + 1] = ss
            acks[#acks + 1] = ss .. '-0'
            dead(p, tonumber(ss), att, 'max_attempts: lease expired', nowS)
          else
            add[#add + 1] = ss
            add[#add + 1] = ss
          end
        end
      end
      i = j + 1
    end
    if #drop > 0 then
      bulk({'ZREM', dkey}, drop, 1000)
      unpin(dkey)
      forget_exact(p, drop)
    end
    if #poison > 0 then
      bulk({'HDEL', lkey}, poison, 1000)
      forget_claims(p, poison)
      bulk({'XACK', skey(p), group}, acks, 1000)
    end
    if #add > 0 then bulk({'ZADD', akey}, add, 1000) end
  end
  if moved then
    setm[#setm + 1] = p
    setm[#setm + 1] = nowS
    M[p] = nowS
  end
end
-- prepare_list prepares the partitions ps, then asks in one EXISTS whether
-- any of them has a ready set (usually none does).
local function prepare_list(ps)
  local ks = {}
  for x = 1, #ps do ks[x] = gb .. 'a:' .. ps[x] end
  local ms = redis.call('HMGET', gb .. 'm', unpack(ps))
  for x = 1, #ps do prepare(ps[x], ms[x]) end
  local any = redis.call('EXISTS', unpack(ks)) > 0
  for x = 1, #ps do
    if any then ready[ps[x]] = false else ready[ps[x]] = 0 end
  end
end
local function prepare_run(i, j) prepare_list({unpack(parts, i, j)}) end
-- A partition without a due set has nothing to claim again. A group
-- created by this version (field dk of m) lists in dk every partition
-- that may have one (each writer of a due set adds its partition; a fetch
-- drops those whose set is gone): a fetch from many partitions prepares
-- those of dk it serves. For other groups it asks which of a run of 32
-- have one in one EXISTS, and prepares only the runs where some do.
if k <= 8 and not sparse then
  prepare_run(1, k)
elseif DK then
  local asked = nil -- the partitions served, when not 0 to served-1
  if not ranged then
    asked = {}
    for x = 1, k do asked[parts[x]] = true end
  end
  for x = 1, k do ready[parts[x]] = 0 end
  local has, gone = {}, {}
  for _, p in ipairs(redis.call('SMEMBERS', gb .. 'dk')) do
    local n = tonumber(p)
    if (asked and asked[p]) or (not asked and n < served) then
      if redis.call('EXISTS', gb .. 'd:' .. p) == 1 then has[#has + 1] = p else gone[#gone + 1] = p end
    end
  end
  if #gone > 0 then bulk({'SREM', gb .. 'dk'}, gone, 1000) end
  if #has > 0 then prepare_list(has) end
else
  for i = 1, k, 32 do
    local j = math.min(i + 31, k)
    local ks = {}
    for x = i, j do ks[#ks + 1] = gb .. 'd:' .. parts[x] end
    if redis.call('EXISTS', unpack(ks)) > 0 then
      prepare_run(i, j)
    else
      for x = i, j do ready[parts[x]] = 0 end
    end
  end
end
if #setm > 0 then
  if not MX or tcmp(nowS, MX) > 0 then
    setm[#setm + 1] = '*'
    setm[#setm + 1] = nowS
  end
  bulk({'HSET', gb .. 'm'}, setm, 1000)
end

-- flat_seqs is the sequences of a flat list of (sequence, value) pairs.
local function flat_seqs(kv)
  local out = {}
  for i = 1, #kv, 2 do out[#out + 1] = kv[i] end
  return out
end
-- packed is what a fetch returns of an entry's fields: the packed event
-- alone when that is all the entry holds (so that Redis converts one string
-- back into the reply instead of a table), else the fields as they are.
local function packed(f)
  if f[3] == nil and f[1] == 'e' then return f[2] end
  return f
end
-- lease_fresh leases entries ents of partition p, just read with
-- XREADGROUP (offered now): attempt 1, the next fresh lease IDs in entry
-- order. Returns how many.
local function lease_fresh(p, ents)
  local n = #ents
  if n == 0 then return 0 end
  due_lease(p)
  local hset, zadd, flat, nh = {}, {}, {}, 0
  local first = used + 1
  for x = 1, n do
    local ent = ents[x]
    local ss = string.match(ent[1], '^(%d+)')
    used = used + 1
    hset[nh + 1] = ss
    hset[nh + 2] = ARGV[idbase + used] .. ':1' .. claimed
    zadd[nh + 1] = exp
    zadd[nh + 2] = ss
    flat[nh + 1] = ss
    flat[nh + 2] = packed(ent[2])
    nh = nh + 2
  end
  bulk({'HSET', gb .. 'l:' .. p}, hset, 1000)
  bulk({'ZADD', gb .. 'd:' .. p, 'inf', DUE_PIN}, zadd, 1000)
  dkadd[#dkadd + 1] = p -- (added to dk at the end of the fetch)
  if not small(exp) then keep_exact(p, exp, flat_seqs(hset)) end
  out[nout + 1] = p; out[nout + 2] = first; out[nout + 3] = flat
  nout = nout + 3
  return n
end

local function take(p, want)
  local got = 0
  local lkey = gb .. 'l:' .. p
  local dkey = gb .. 'd:' .. p
  local akey = gb .. 'a:' .. p
  local sk = skey(p)
  -- Claimable deliveries already offered, lowest sequence first: the first
  -- of the ready set.
  while got < want and ready[p] ~= 0 do
    local n = math.min(want - got, 1000)
    local lst = redis.call('ZRANGE', akey, 0, n - 1)
    if #lst < n then
      ready[p] = 0
    elseif ready[p] then
      ready[p] = ready[p] - #lst
    end
    if #lst == 0 then break end
    redis.call('ZREM', akey, unpack(lst))
    local vals = redis.call('HMGET', lkey, unpack(lst))
    local hset, zadd, claim, rows, drop = {}, {}, {}, {}, {}
    for x = 1, #lst do
      local ss, v = lst[x], vals[x]
      if not v then
        -- A due time without a delivery goes, as in prepare.
        drop[#drop + 1] = ss
      else
        local att = tonumber(string.match(v, '^[^:]*:(%d+)'))
        used = used + 1
        local id = ARGV[idbase + used]
        hset[#hset + 1] = ss
        hset[#hset + 1] = id .. ':' .. fmt(att + 1) .. claimed
        zadd[#zadd + 1] = exp
        zadd[#zadd + 1] = ss
        claim[#claim + 1] = ss .. '-0'
        rows[#rows + 1] = {tonumber(ss), id, att + 1}
        got = got + 1
      end
    end
    if #drop > 0 then
      bulk({'ZREM', dkey}, drop, 1000)
      unpin(dkey)
      forget_exact(p, drop)
    end
    if #claim > 0 then
      due_lease(p)
      bulk({'HSET', lkey}, hset, 1000)
      bulk({'ZADD', dkey, 'inf', DUE_PIN}, zadd, 1000)
      redis.call('SADD', gb .. 'dk', p)
      if not small(exp) then keep_exact(p, exp, flat_seqs(hset)) end
      -- Each entry is read by its ID (a trimmed one is not there); the
      -- group's pending-entries list is not involved (see XREADGROUP below).
      local red = {}
      for x, eid in ipairs(claim) do
        local ent = redis.call('XRANGE', sk, eid, eid)[1]
        local row = rows[x]
        if ent then
          red[#red + 1] = row[1]; red[#red + 1] = row[2]; red[#red + 1] = row[3]; red[#red + 1] = packed(ent[2])
        end
      end
      if #red > 0 then
        out[nout + 1] = p; out[nout + 2] = 0; out[nout + 3] = red
        nout = nout + 3
      end
    end
  end
  -- Events not offered yet. NOACK: the lease table l:<p> is the record of
  -- what is offered; the group's pending-entries list would only repeat it
  -- (adding and acking its entries was a third of a fetch and settle's
  -- time). XREADGROUP still moves the group's last-delivered ID, the
  -- cursor.
  if got < want and not newdone[p] then
    local r = redis.call('XREADGROUP', 'GROUP', group, 'rheo', 'COUNT', want - got, 'NOACK', 'STREAMS', sk, '>')
    local ents = (r and r[1] and r[1][2]) or {}
    if #ents < want - got then newdone[p] = true end
    got = got + lease_fresh(p, ents)
  end
  return got
end

-- take_fresh_run is the first pass of take over the run of partitions
-- parts[i..j] (in fetch order) that have no claimable deliveries, each
-- wanting quota events not offered yet, with one XREADGROUP across their
-- streams instead of one each. The caller keeps the run within what is
-- left of the limit, so every partition gets exactly what take would have
-- given it. Returns how many it leased, how many of each partition, and
-- the sequence of the last event it leased of each.
local function take_fresh_run(i, j, quota)
  local cmd = {'XREADGROUP', 'GROUP', group, 'rheo', 'COUNT', quota, 'NOACK', 'STREAMS'}
  local at = {}
  for x = i, j do
    local sk = skey(lp[x])
    cmd[#cmd + 1] = sk
    at[sk] = lp[x]
  end
  for x = i, j do cmd[#cmd + 1] = '>' end
  local got, n, last = 0, {}, {}
  for _, r in ipairs(redis.call(unpack(cmd)) or {}) do
    local p = at[r[1]]
    local ents = r[2]
    n[p] = lease_fresh(p, ents)
    got = got + n[p]
    if n[p] > 0 then last[p] = tonumber(string.match(ents[n[p]][1], '^(%d+)')) end
  end
  return got, n, last
end

-- Which partitions can have events not offered yet. A stream created by
-- this version keeps an append counter (field ac of its meta hash) and the
-- partitions each append wrote to (the sorted set ap, scored by the
-- counter after the append); a group keeps aw, the counter as its last
-- fetch from every partition found it, and ab, the partitions that fetch
-- left with events not offered (it did not reach them, or took only some).
-- Every partition with events past the group's cursor is then in ab or
-- was appended to since aw (a script runs alone: no append comes between
-- its reads), and a fetch reads the streams of no other partition, so a
-- fetch from 1,024 partitions of which a few have new events reads those
-- few. Without aw (a new group, one whose cursors a replay or a reset
-- moved back, a stream of an earlier version) it reads them all. (cand,
-- read first, holds the union of ab and the partitions appended to since
-- aw.)
local hinted = false
if cand then
  hinted = true
  -- The share loop visits only the partitions with something to take
  -- (live), in the same order: the others would take nothing. Their
  -- quota stays a share of all served.
  lp = {}
  for i = 1, k do
    local p = parts[i]
    if not cand[p] then newdone[p] = true end
    if not newdone[p] or ready[p] ~= 0 then lp[#lp + 1] = p end
  end
  lk = #lp
end

-- Share the limit fairly: a first pass gives each partition its quota,
-- later passes hand what is left to whoever still has work.
local remaining = limit
local exhausted = {}
local quota = math.ceil(limit / served)
local pass = 0
local function idle(x)
  local p = lp[x]
  if ready[p] == false then ready[p] = redis.call('ZCARD', gb .. 'a:' .. p) end
  return ready[p] == 0
end
while remaining > 0 do
  local progress = false
  local i = 1
  while i <= lk do
    if remaining <= 0 then break end
    -- In the first pass, a run of partitions with nothing to claim again,
    -- each of which can have its whole quota, reads in one call.
    local j = i - 1
    local fit = math.floor(remaining / quota)
    if pass == 0 and i < lk and fit >= 2 then
      while j + 1 <= lk and j + 1 - i < fit and idle(j + 1) and not newdone[lp[j + 1]] do j = j + 1 end
    end
    if j > i then
      local got, n, last = take_fresh_run(i, j, quota)
      remaining = remaining - got
      -- A partition that gave its whole quota may have no more either:
      -- when its last event leased is its last appended (hw), it is
      -- done too, and a later pass does not read its stream again for
      -- nothing (with 1,024 partitions a quota is 1 event, which most
      -- partitions a cycle appends to have).
      local full = {}
      for x = i, j do
        if (n[lp[x]] or 0) >= quota then full[#full + 1] = lp[x] end
      end
      local hw = {}
      if #full > 0 then
        for y, v in ipairs(redis.call('HMGET', base .. 'hw', unpack(full))) do hw[full[y]] = tonumber(v) end
      end
      for x = i, j do
        local p = lp[x]
        if (n[p] or 0) < quota or (hw[p] and last[p] and last[p] >= hw[p]) then
          exhausted[x], newdone[p] = true, true
        else
          progress = true
        end
      end
      i = j + 1
    else
      if not exhausted[i] then
        local want = remaining
        if pass == 0 then want = math.min(quota, remaining) end
        local got = take(lp[i], want)
        remaining = remaining - got
        if got < want then exhausted[i] = true elseif got > 0 then progress = true end
      end
      i = i + 1
    end
  end
  pass = pass + 1
  if not progress then break end
end
-- A partition is left with events not offered unless its last read
-- returned less than it asked for (newdone). A fetch from every partition
-- records which, and the counter; one from some of them can only take
-- from ab those it emptied.
if AC then
  if every == nil then
    local n, seen = 0, {}
    for i = 1, k do
      if not seen[parts[i]] then seen[parts[i]] = true; n = n + 1 end
    end
    every = n == tonumber(redis.call('HGET', KEYS[1], 'partitions'))
  end
  local left = {}
  if every then
    for i = 1, k do
      if not newdone[parts[i]] then left[#left + 1] = parts[i] end
    end
    redis.call('DEL', gb .. 'ab')
    if #left > 0 then bulk({'SADD', gb .. 'ab'}, left, 1000) end
    redis.call('SET', gb .. 'aw', AC)
  elseif hinted then
    for i = 1, k do
      if newdone[parts[i]] then left[#left + 1] = parts[i] end
    end
    if #left > 0 then bulk({'SREM', gb .. 'ab'}, left, 1000) end
  end
end
if #dkadd > 0 then bulk({'SADD', gb .. 'dk'}, dkadd, 1000) end
flush_frontier()
return out
`

// settle: ARGV[4] now, ARGV[5] n, ARGV[6] g, the number of partition
// groups; then g triples (partition, count, repeats: 1 if a position comes
// twice in the group, else 0); then the n sequences, the n lease IDs and
// the n event IDs, each list in the same order: grouped by partition in
// order of first appearance, in request order within a partition (see
// Settle). Then, for each request that is not an ack, in that order: its
// index in that order (1-based) and its kind (n, r, l for a release; x for
// a request whose receipt is not its position's entry ID, which the client
// checks), and for a nack its available-at (µs) and reason, for a reject its
// reason; a release carries nothing more (it is due at now, its attempt
// goes back by one, the claim not counting, and it never dead-letters, so
// its reason is not sent). An ack, the usual request, carries its three fields and nothing more, and each
// list is one ARGV range that HMGET takes as it is. A lease settles only if
// its lease ID is current and its event ID is the event stored at its
// position (fencing on both, like every backend). Returns one code per
// request in that order: 0 settled, 1 stale lease, 2 receipt mismatch
// (after the fence, as on every backend).
var settleScript = goredis.NewScript(common + groupCommon + `
local maxA, err = need_group(); if err then return err end
local now = ARGV[4]
local n = tonumber(ARGV[5])
local g = tonumber(ARGV[6])
local sb = 6 + 3 * g -- ARGV[sb + i]: sequence of request i
local lb = sb + n    -- ARGV[lb + i]: its lease ID
local eb = lb + n    -- ARGV[eb + i]: its event ID
local kinds, avails, reasons = {}, {}, {}
local x = eb + n + 1
while x <= #ARGV do
  local i, k = tonumber(ARGV[x]), ARGV[x + 1]
  kinds[i] = k
  if k == 'n' then
    avails[i], reasons[i] = ARGV[x + 2], ARGV[x + 3]
    x = x + 4
  elseif k == 'r' then
    reasons[i] = ARGV[x + 2]
    x = x + 3
  else
    x = x + 2
  end
end
local at = idlookup(ARGV, eb + 1, eb + n)
local res = {}
local unready = {} -- {partition, sequences settled for good}
local dgone = {} -- the partitions whose due set the settle emptied, which leave dk
local woke = false
-- A batch over several partitions asks once whether any of them has claim
-- records (c:<p>, written only by earlier versions) or exact due times
-- (x:<p>), instead of once per partition; a nack or release in the batch
-- may write exact due times, after which each partition is asked again.
local anyc, anyx = true, true
-- Only earlier versions' fetches (XREADGROUP without NOACK) left entries
-- in the group's pending-entries list: a group this version created
-- (field dk of m; one version per store) has none to remove.
local pel = not redis.call('HGET', gb .. 'm', 'dk')
if g > 1 then
  local cks, xks = {}, {}
  for gi = 1, g do
    local p = ARGV[4 + 3 * gi]
    cks[gi] = gb .. 'c:' .. p
    xks[gi] = gb .. 'x:' .. p
  end
  anyc = redis.call('EXISTS', unpack(cks)) > 0
  anyx = redis.call('EXISTS', unpack(xks)) > 0
end
local q = 0
for gi = 1, g do
  local p = ARGV[4 + 3 * gi]
  local c = tonumber(ARGV[5 + 3 * gi])
  local lkey = gb .. 'l:' .. p
  -- The group's leases are read at once; written follows what this script
  -- writes when a position comes twice, so that it is settled once.
  local vals = mrange(lkey, sb + q + 1, sb + q + c)
  local written = nil
  if ARGV[6 + 3 * gi] == '1' then written = {} end
  local rm = {}
  for k = 1, c do
    local i = q + k
    local ss, lid = ARGV[sb + i], ARGV[lb + i]
    local v = vals[k]
    if written then
      local w = written[ss]
      if w ~= nil then v = w end
    end
    -- v is current if it starts with "<lid>:" (lid not empty, without ':').
    if not v or lid == '' or string.find(v, lid, 1, true) ~= 1 or string.byte(v, #lid + 1) ~= 58
      or string.find(lid, ':', 1, true) or at[i] ~= p .. ':' .. ss then
      res[i] = 1
    else
      local kind = kinds[i] or 'a'
      if kind == 'x' then
        res[i] = 2
      else
        res[i] = 0
        local seq = tonumber(ss)
        local att
        if kind ~= 'a' then att = tonumber(string.match(v, '^[^:]*:(%d+)')) end
        if kind == 'l' or (kind == 'n' and att < maxA) then
          -- Available again: a nack at its available-at, a release at now
          -- with the claim not counted (whatever the attempt limit).
          local due = avails[i]
          if kind == 'l' then
            att = math.max(att - 1, 0)
            due = now
          end
          local w = ':' .. fmt(att)
          if written then written[ss] = w end
          redis.call('HSET', lkey, ss, w)
          set_due(p, ss, due, false)
          woke = true
          anyx = true
        else
          if written then written[ss] = false end
          rm[#rm + 1] = ss
          if kind == 'a' then
            mark_terminal(p, seq)
          elseif kind == 'r' then
            dead(p, seq, att, reasons[i], now)
          else
            dead(p, seq, att, 'max_attempts: ' .. reasons[i], now)
          end
        end
      end
    end
  end
  if #rm > 0 then
    bulk({'HDEL', lkey}, rm, 1000)
    if anyc then forget_claims(p, rm) end
    local dkey = gb .. 'd:' .. p
    bulk({'ZREM', dkey}, rm, 1000)
    if unpin(dkey) then dgone[#dgone + 1] = p end
    if anyx then forget_exact(p, rm) end
    unready[#unready + 1] = {p, rm}
    -- Only leases of groups written by earlier versions, which kept the
    -- group's pending-entries list, have an entry there to remove (XACK
    -- reads a bare sequence as the entry ID <sequence>-0).
    if pel then bulk({'XACK', skey(p), group}, rm, 1000) end
  end
  q = q + c
end
-- What was settled for good leaves the ready sets too. Only expired leases
-- are ready, so a batch over many partitions first asks whether any of
-- them has a ready set at all.
if #unready == 1 then
  bulk({'ZREM', gb .. 'a:' .. unready[1][1]}, unready[1][2], 1000)
elseif #unready > 1 then
  local ks = {}
  for i, u in ipairs(unready) do ks[i] = gb .. 'a:' .. u[1] end
  if redis.call('EXISTS', unpack(ks)) > 0 then
    for _, u in ipairs(unready) do bulk({'ZREM', gb .. 'a:' .. u[1]}, u[2], 1000) end
  end
end
if #dgone > 0 then bulk({'SREM', gb .. 'dk'}, dgone, 1000) end
flush_frontier()
if woke then wake() end
return res
`)

// renew: ARGV[4] partition, ARGV[5] seq, ARGV[6] lease ID, ARGV[7] receipt,
// ARGV[8] new expiry (µs), ARGV[9] event ID. Returns 0, 1 (stale) or 2
// (receipt mismatch).
var renewScript = goredis.NewScript(common + groupCommon + `
local maxA, err = need_group(); if err then return err end
local p, ss = ARGV[4], ARGV[5]
local v = redis.call('HGET', gb .. 'l:' .. p, ss)
local cur
if v then cur = string.match(v, '^([^:]*):') end
if not v or cur == '' or cur ~= ARGV[6] then return 1 end
if idget(ARGV[9]) ~= p .. ':' .. ss then return 1 end
if ARGV[7] ~= ss .. '-0' then return 2 end
set_due(p, ss, ARGV[8], true)
return 0
`)

// lag returns {partitions, (partition, lowest reopened sequence) pairs for
// the partitions that have reopened ones} (Lag reads the high watermarks
// and frontiers beside it, in the same transaction).
// Few partitions have any: for a group that keeps rk (see createGroup) it
// reads those rk lists; for others, it asks which of each 64 have any with
// one EXISTS.
var lagScript = goredis.NewScript(common + groupCommon + `
local maxA, err = need_group(); if err then return err end
local n = tonumber(redis.call('HGET', KEYS[1], 'partitions'))
local rows = {}
if redis.call('HGET', gb .. 'm', 'dk') then
  -- A group created by this version lists in rk every partition that may
  -- have reopened sequences (reopen adds it); those whose set is gone
  -- leave the list here.
  local gone = {}
  for _, p in ipairs(redis.call('SMEMBERS', gb .. 'rk')) do
    local r = redis.call('ZRANGE', gb .. 'r:' .. p, 0, 0)
    if r[1] then rows[#rows + 1] = tonumber(p); rows[#rows + 1] = r[1] else gone[#gone + 1] = p end
  end
  if #gone > 0 then bulk({'SREM', gb .. 'rk'}, gone, 1000) end
else
  for i = 0, n - 1, 64 do
    local ks = {}
    for p = i, math.min(i + 63, n - 1) do ks[#ks + 1] = gb .. 'r:' .. p end
    if redis.call('EXISTS', unpack(ks)) > 0 then
      for x, key in ipairs(ks) do
        local r = redis.call('ZRANGE', key, 0, 0)
        if r[1] then rows[#rows + 1] = i + x - 1; rows[#rows + 1] = r[1] end
      end
    end
  end
end
return {n, rows}
`)

// leases: ARGV[4] limit, ARGV[5] number of event IDs m, then m event IDs
// (m = -1: every lease of the group; m = 0: none). An ID that comes twice
// lists its lease once. Returns rows of (partition, seq, lease
// value (see fetch), expiry (µs), claim record from c:<p> or empty, entry
// fields) ordered by (partition, seq), at most limit of them.
var leasesScript = goredis.NewScript(common + groupCommon + `
local maxA, err = need_group(); if err then return err end
local limit = tonumber(ARGV[4])
local m = tonumber(ARGV[5])
local picks = {} -- {p, seq, value}
local function leased(v) return v and string.sub(v, 1, 1) ~= ':' end
if m < 0 then
  local n = tonumber(redis.call('HGET', KEYS[1], 'partitions'))
  for p = 0, n - 1 do
    local kv = redis.call('HGETALL', gb .. 'l:' .. p)
    local here = {}
    for i = 1, #kv, 2 do
      if leased(kv[i + 1]) then here[#here + 1] = {p, tonumber(kv[i]), kv[i + 1]} end
    end
    table.sort(here, function(a, b) return a[2] < b[2] end)
    for _, r in ipairs(here) do
      if #picks >= limit then break end
      picks[#picks + 1] = r
    end
    if #picks >= limit then break end
  end
else
  local seen = {}
  for i = 1, m do
    local at = idget(ARGV[5 + i])
    if at and not seen[at] then
      seen[at] = true
      local p, s = string.match(at, '^(%d+):(%d+)$')
      local v = redis.call('HGET', gb .. 'l:' .. p, s)
      if leased(v) then picks[#picks + 1] = {tonumber(p), tonumber(s), v} end
    end
  end
  table.sort(picks, function(a, b)
    if a[1] ~= b[1] then return a[1] < b[1] end
    return a[2] < b[2]
  end)
end
local out = {}
for i, r in ipairs(picks) do
  if i > limit then break end
  local p, ss = r[1], fmt(r[2])
  local e = redis.call('XRANGE', skey(p), ss .. '-0', ss .. '-0')
  local sc = redis.call('ZSCORE', gb .. 'd:' .. p, ss)
  if sc then sc = exact_due(p, ss, tonumber(sc)) else sc = '0' end
  out[#out + 1] = {p, r[2], r[3], sc,
    redis.call('HGET', gb .. 'c:' .. p, ss) or '', e[1] and e[1][2] or {}}
end
return out
`)

// groupStats returns {inflight, available, dead letters, max attempts}.
var groupStatsScript = goredis.NewScript(common + groupCommon + `
local maxA, err = need_group(); if err then return err end
local n = tonumber(redis.call('HGET', KEYS[1], 'partitions'))
local inflight, avail = 0, 0
for p = 0, n - 1 do
  local vals = redis.call('HVALS', gb .. 'l:' .. p)
  for _, v in ipairs(vals) do
    if string.sub(v, 1, 1) == ':' then avail = avail + 1 else inflight = inflight + 1 end
  end
  local hw = tonumber(redis.call('HGET', base .. 'hw', p) or '0')
  local c = cursor(p)
  if hw > c then avail = avail + hw - c end
end
return {inflight, avail, redis.call('ZCARD', gb .. 'q'), maxA}
`)

// deadLetters: ARGV[4] after event ID (or ""), ARGV[5] limit. Returns rows
// {partition, seq, "attempts:at:reason", fields}.
var deadLettersScript = goredis.NewScript(common + groupCommon + `
local maxA, err = need_group(); if err then return err end
local lo = '-inf'
if ARGV[4] ~= '' then
  local v = idget(ARGV[4])
  local sc = v and redis.call('ZSCORE', gb .. 'q', v)
  if not sc then return redis.error_reply('RHEO_NOCURSOR') end
  lo = '(' .. sc
end
local ms = redis.call('ZRANGEBYSCORE', gb .. 'q', lo, '+inf', 'LIMIT', 0, tonumber(ARGV[5]))
local out = {}
for _, m in ipairs(ms) do
  local p, s = string.match(m, '^(%d+):(%d+)$')
  local r = redis.call('XRANGE', skey(p), s .. '-0', s .. '-0')
  out[#out + 1] = {tonumber(p), tonumber(s), redis.call('HGET', gb .. 'qh', m) or '0:0:', r[1] and r[1][2] or {}}
end
return out
`)

// replay: ARGV[4] number of (partition, from) pairs, the pairs, then the
// number of (partition, seq) event refs and the refs.
var replayScript = goredis.NewScript(common + groupCommon + `
local maxA, err = need_group(); if err then return err end
local nf = tonumber(ARGV[4])
local bad = bad_partitions(5, 2, nf); if bad then return bad end
bad = bad_partitions(6 + 2 * nf, 2, tonumber(ARGV[5 + 2 * nf])); if bad then return bad end
local o = 5
local reopened = 0
for i = 1, nf do
  local p, s = ARGV[o], tonumber(ARGV[o + 1])
  o = o + 2
  local lkey, dkey = gb .. 'l:' .. p, gb .. 'd:' .. p
  local c = cursor(p)
  local newc = math.min(c, s)
  reopened = reopened + c - newc
  local drop, acks = {}, {}
  for _, ss in ipairs(redis.call('HKEYS', lkey)) do
    if tonumber(ss) > s then
      drop[#drop + 1] = ss
      acks[#acks + 1] = ss .. '-0'
    end
  end
  if #drop > 0 then
    bulk({'HDEL', lkey}, drop, 1000)
    forget_claims(p, drop)
    bulk({'ZREM', dkey}, drop, 1000)
    unpin(dkey)
    forget_exact(p, drop)
    bulk({'ZREM', gb .. 'a:' .. p}, drop, 1000)
    bulk({'XACK', skey(p), group}, acks, 1000)
  end
  redis.call('ZREMRANGEBYSCORE', gb .. 't:' .. p, '(' .. fmt(s), '+inf')
  redis.call('ZREMRANGEBYSCORE', gb .. 'r:' .. p, '(' .. fmt(s), '+inf')
  local pn = tonumber(p)
  local lo, hi = '(' .. fmt(pn * PSHIFT + s), fmt(pn * PSHIFT + PSHIFT - 1)
  local dl = redis.call('ZRANGEBYSCORE', gb .. 'q', lo, hi)
  if #dl > 0 then
    bulk({'HDEL', gb .. 'qh'}, dl, 1000)
    redis.call('ZREMRANGEBYSCORE', gb .. 'q', lo, hi)
  end
  if getF(p) > s then
    redis.call('HSET', gb .. 'f', p, fmt(s))
    F[p] = s
  end
  redis.call('XGROUP', 'SETID', skey(p), group, fmt(newc) .. '-0')
end
-- (The cursors moved back: the next fetch reads every partition.)
redis.call('DEL', gb .. 'aw')
local ne = tonumber(ARGV[o])
o = o + 1
local cur = {}
for i = 1, ne do
  local p, seq = ARGV[o], tonumber(ARGV[o + 1])
  o = o + 2
  if cur[p] == nil then cur[p] = cursor(p) end
  if seq <= cur[p] then
    reopen(p, seq)
    reopened = reopened + 1
  end
end
wake()
return reopened
`)

// redrive: ARGV[4] "all" or "ids", then event IDs. In "all" mode it reopens
// at most 1000 dead letters per call. Returns how many it reopened.
var redriveScript = goredis.NewScript(common + groupCommon + `
local maxA, err = need_group(); if err then return err end
local ms = {}
if ARGV[4] == 'all' then
  ms = redis.call('ZRANGE', gb .. 'q', 0, 999)
else
  for i = 5, #ARGV do
    local v = idget(ARGV[i])
    if v and redis.call('ZSCORE', gb .. 'q', v) then ms[#ms + 1] = v end
  end
end
local n = 0
for _, m in ipairs(ms) do
  local p, s = string.match(m, '^(%d+):(%d+)$')
  if redis.call('ZSCORE', gb .. 'q', m) then
    reopen(p, tonumber(s))
    n = n + 1
  end
end
if n > 0 then wake() end
return n
`)

// reset: ARGV[4] number of (partition, start) pairs, then the pairs.
var resetScript = goredis.NewScript(common + groupCommon + `
local maxA, err = need_group(); if err then return err end
local n = tonumber(ARGV[4])
local bad = bad_partitions(5, 2, n); if bad then return bad end
local reopened = 0
for i = 0, n - 1 do
  local p, s = ARGV[5 + 2 * i], ARGV[6 + 2 * i]
  local pn = tonumber(p)
  reopened = reopened + math.max(cursor(p) - tonumber(s), 0)
  redis.call('UNLINK', gb .. 'l:' .. p, gb .. 'd:' .. p, gb .. 'a:' .. p, gb .. 't:' .. p, gb .. 'r:' .. p, gb .. 'c:' .. p, gb .. 'x:' .. p)
  local lo, hi = fmt(pn * PSHIFT), fmt(pn * PSHIFT + PSHIFT - 1)
  local dl = redis.call('ZRANGEBYSCORE', gb .. 'q', lo, hi)
  if #dl > 0 then
    bulk({'HDEL', gb .. 'qh'}, dl, 1000)
    redis.call('ZREMRANGEBYSCORE', gb .. 'q', lo, hi)
  end
  pcall(redis.call, 'XGROUP', 'DESTROY', skey(p), group)
  redis.call('XGROUP', 'CREATE', skey(p), group, s .. '-0', 'MKSTREAM')
  redis.call('HSET', gb .. 'f', p, s)
end
redis.call('DEL', gb .. 'aw') -- (the next fetch reads every partition)
wake()
return reopened
`)

// allScripts are loaded by Migrate so the first calls go by SHA.
var allScripts = []*goredis.Script{
	createStreamScript, streamStateScript, appendScript, readScript, rangeScript, eventsScript,
	createGroupScript, fetchScript, settleScript, renewScript, lagScript, groupStatsScript,
	deadLettersScript, replayScript, redriveScript, resetScript, leasesScript,
}

// listGroups returns the stream's group names.
var listGroupsScript = goredis.NewScript(common + `
local e = need_stream(); if e then return e end
return redis.call('HKEYS', base .. 'groups')
`)

func init() { allScripts = append(allScripts, listGroupsScript) }
