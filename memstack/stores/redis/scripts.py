"""Redis Lua scripts. Each runs atomically, so a crash can never split its steps.

The write script is the whole synchronous write path in one round trip: the window
push, trim and TTL, the state update, the idempotency mark and the ingest job either
all happen or none do (RPUSH and EXPIRE as two calls leave a key without a TTL when the
second is lost).
"""

from __future__ import annotations

# KEYS: window, state, idempotency mark, ingest stream
# ARGV: user_id, session_id, role, content, ts_ms, caller msg_id or "", window_max,
#       window_ttl_s, state_ttl_s, idempotency_ttl_s, author name or "", session tag,
#       fingerprint of the message
# An unnamed message gets no "name" in its window entry or job, so it is stored exactly
# as before names existed. The job carries the server's time of acceptance
# (accepted_us): an erasure refuses every job accepted before it, whatever the
# message's own ts says.
# A window that did not exist before this push (a new session, an expired window, a
# lost Redis) may be missing the session's history: the state loses "_complete" and
# the next read merges the ledger's recent messages in (REPAIR_WINDOW).
# A caller's msg_id marks "<msg_id> <fingerprint>" (ARGV[13], of role, name and
# content): a retry with the same message is a duplicate, one with another message under
# the same id is refused ("CONFLICT"). Marks written before fingerprints hold the id only.
# Returns {msg_id, duplicate(0/1)}.
WRITE = """
local caller_id = ARGV[6]
if caller_id ~= '' then
  local existing = redis.call('GET', KEYS[3])
  if existing then
    local id, print = string.match(existing, '^(%S+) (%S+)$')
    if not id then return {existing, 1} end
    if print ~= ARGV[13] then
      return redis.error_reply('CONFLICT msg_id was used for another message')
    end
    return {id, 1}
  end
end
local seq = redis.call('HINCRBY', KEYS[2], '_seq', 1)
local msg_id = caller_id
-- Zero-padded so that ids of one millisecond sort in sequence order.
if msg_id == '' then msg_id = ARGV[5] .. '-' .. ARGV[12] .. '-' .. string.format('%06d', seq) end
local name = ARGV[11] or ''
local fields = {msg_id = msg_id, user_id = ARGV[1], role = ARGV[3], content = ARGV[4],
                ts_ms = ARGV[5]}
if name ~= '' then fields.name = name end
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('HDEL', KEYS[2], '_complete') end
redis.call('RPUSH', KEYS[1], cjson.encode(fields))
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[7]), -1)
redis.call('EXPIRE', KEYS[1], ARGV[8])
if ARGV[3] == 'user' then redis.call('HINCRBY', KEYS[2], '_turns', 1) end
redis.call('HSET', KEYS[2], '_last_msg_id', msg_id, '_last_msg_at_ms', ARGV[5])
redis.call('EXPIRE', KEYS[2], ARGV[9])
if caller_id ~= '' then redis.call('SET', KEYS[3], msg_id .. ' ' .. ARGV[13], 'EX', ARGV[10]) end
local now = redis.call('TIME')
local job = {'msg_id', msg_id, 'user_id', ARGV[1], 'session_id', ARGV[2], 'role', ARGV[3],
             'content', ARGV[4], 'ts_ms', ARGV[5],
             'accepted_us', now[1] .. string.format('%06d', tonumber(now[2]))}
if name ~= '' then
  job[#job + 1] = 'name'
  job[#job + 1] = name
end
redis.call('XADD', KEYS[4], '*', unpack(job))
return {msg_id, 0}
"""

# KEYS: state. ARGV: state_ttl_s, n, then n pairs field, value to set, then the fields
# to delete (a null in a PATCH). One script, so a reader never sees half a change.
SET_STATE = """
local n = tonumber(ARGV[2])
if n > 0 then redis.call('HSET', KEYS[1], unpack(ARGV, 3, 2 + 2 * n)) end
if #ARGV > 2 + 2 * n then redis.call('HDEL', KEYS[1], unpack(ARGV, 3 + 2 * n)) end
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
"""

# KEYS: window, state. ARGV: window_max, window_ttl_s, state_ttl_s, then the ledger's
# recent messages of the session as window entries, oldest first.
# Merges them with what the window holds now (messages pushed since it was lost, some
# of which may be in the ledger already), in message order, and marks the window
# complete. Atomic, so a message pushed while the ledger was read is kept.
REPAIR_WINDOW = """
local merged = {}
local seen = {}
local function add(raw)
  local ok, e = pcall(cjson.decode, raw)
  if ok and type(e) == 'table' and e.msg_id and not seen[e.msg_id] then
    seen[e.msg_id] = true
    merged[#merged + 1] = {tonumber(e.ts_ms) or 0, e.msg_id, raw}
  end
end
for i = 4, #ARGV do add(ARGV[i]) end
for _, raw in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do add(raw) end
table.sort(merged, function(a, b)
  if a[1] ~= b[1] then return a[1] < b[1] end
  return a[2] < b[2]
end)
if #merged > 0 then
  local raws = {}
  for i = math.max(1, #merged - tonumber(ARGV[1]) + 1), #merged do
    raws[#raws + 1] = merged[i][3]
  end
  redis.call('DEL', KEYS[1])
  redis.call('RPUSH', KEYS[1], unpack(raws))
  redis.call('EXPIRE', KEYS[1], ARGV[2])
end
redis.call('HSET', KEYS[2], '_complete', '1')
redis.call('EXPIRE', KEYS[2], ARGV[3])
return #merged
"""

# KEYS: window. ARGV: msg_id, user_id. Removes the message's entries from the window
# (delete_message); returns how many. One script, so no push between the read and the
# removal can be lost or kept by mistake.
REMOVE_FROM_WINDOW = """
local removed = 0
for _, raw in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  local ok, e = pcall(cjson.decode, raw)
  if ok and type(e) == 'table' and e.msg_id == ARGV[1] and e.user_id == ARGV[2] then
    removed = removed + redis.call('LREM', KEYS[1], 0, raw)
  end
end
return removed
"""

# KEYS: lock. ARGV: token. Deletes the lock only if we still own it.
RELEASE_LOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# KEYS: session knowledge cache (a JSON list). ARGV: capacity, ttl_s,
#       then hash1, item1_json, hash2, item2_json, ... (this turn's items >= threshold)
# Returns the number of items cached afterwards (-1: only the TTL was refreshed, 0: no
# cache). The read-modify-write is atomic, so concurrent turns of one session never
# lose each other's items (the knowledge cache specification asks for a distributed lock here).
# An item whose hash is cached replaces the old entry and moves to the tail; the head
# is evicted past capacity (FIFO). Without new items the TTL is still refreshed.
KNOWLEDGE_TURN = """
local raw = redis.call('GET', KEYS[1])
if #ARGV < 4 then
  if not raw then return 0 end
  redis.call('EXPIRE', KEYS[1], ARGV[2])
  return -1
end
local items = {}
if raw then
  local ok, decoded = pcall(cjson.decode, raw)
  -- A corrupt value is dropped rather than failing every later turn of the session.
  if ok and type(decoded) == 'table' then items = decoded end
end
local fresh = {}
for i = 3, #ARGV, 2 do fresh[ARGV[i]] = true end
local kept = {}
for _, item in ipairs(items) do
  if type(item) == 'table' and not fresh[item['hash']] then kept[#kept + 1] = item end
end
for i = 4, #ARGV, 2 do kept[#kept + 1] = cjson.decode(ARGV[i]) end
local first = math.max(1, #kept - tonumber(ARGV[1]) + 1)
local out = {}
for i = first, #kept do out[#out + 1] = kept[i] end
redis.call('SET', KEYS[1], cjson.encode(out), 'EX', ARGV[2])
return #out
"""
