"""Redis Lua scripts. Each runs atomically, so a crash can never split its steps.

The write script is the whole synchronous write path in one round trip: the window
push, trim and TTL, the state update, the idempotency mark and the ingest job either
all happen or none do (seed 002 §2.1 warns about RPUSH and EXPIRE as two calls).
"""

from __future__ import annotations

# KEYS: window, state, idempotency mark, ingest stream
# ARGV: user_id, session_id, role, content, ts_ms, caller msg_id or "", window_max,
#       window_ttl_s, state_ttl_s, idempotency_ttl_s, author name or ""
# An unnamed message gets no "name" in its window entry or job, so it is stored exactly
# as before names existed.
# Returns {msg_id, duplicate(0/1)} or an error reply "OWNER" when the session
# belongs to another user.
WRITE = """
local caller_id = ARGV[6]
if caller_id ~= '' then
  local existing = redis.call('GET', KEYS[3])
  if existing then return {existing, 1} end
end
local owner = redis.call('HGET', KEYS[2], '_user_id')
if owner and owner ~= ARGV[1] then
  return redis.error_reply('OWNER session belongs to another user')
end
local seq = redis.call('HINCRBY', KEYS[2], '_seq', 1)
local msg_id = caller_id
-- Zero-padded so that ids of one millisecond sort in sequence order.
if msg_id == '' then msg_id = ARGV[5] .. '-' .. ARGV[2] .. '-' .. string.format('%06d', seq) end
local name = ARGV[11] or ''
local fields = {msg_id = msg_id, user_id = ARGV[1], role = ARGV[3], content = ARGV[4],
                ts_ms = ARGV[5]}
if name ~= '' then fields.name = name end
redis.call('RPUSH', KEYS[1], cjson.encode(fields))
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[7]), -1)
redis.call('EXPIRE', KEYS[1], ARGV[8])
if ARGV[3] == 'user' then redis.call('HINCRBY', KEYS[2], '_turns', 1) end
redis.call('HSET', KEYS[2], '_user_id', ARGV[1], '_last_msg_id', msg_id,
           '_last_msg_at_ms', ARGV[5])
redis.call('EXPIRE', KEYS[2], ARGV[9])
if caller_id ~= '' then redis.call('SET', KEYS[3], msg_id, 'EX', ARGV[10]) end
local job = {'msg_id', msg_id, 'user_id', ARGV[1], 'session_id', ARGV[2], 'role', ARGV[3],
             'content', ARGV[4], 'ts_ms', ARGV[5]}
if name ~= '' then
  job[#job + 1] = 'name'
  job[#job + 1] = name
end
redis.call('XADD', KEYS[4], '*', unpack(job))
return {msg_id, 0}
"""

# KEYS: state. ARGV: user_id, state_ttl_s, field1, value1, field2, value2, ...
SET_STATE = """
local owner = redis.call('HGET', KEYS[1], '_user_id')
if owner and owner ~= ARGV[1] then
  return redis.error_reply('OWNER session belongs to another user')
end
redis.call('HSET', KEYS[1], '_user_id', ARGV[1], unpack(ARGV, 3))
redis.call('EXPIRE', KEYS[1], ARGV[2])
return 1
"""

# KEYS: window, state. ARGV: user_id, window_max, window_ttl_s, state_ttl_s, entry...
# Refills an emptied window from the ledger unless a writer got there first.
REBUILD_WINDOW = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('RPUSH', KEYS[1], unpack(ARGV, 5))
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)
redis.call('EXPIRE', KEYS[1], ARGV[3])
if redis.call('HGET', KEYS[2], '_user_id') == false then
  redis.call('HSET', KEYS[2], '_user_id', ARGV[1])
end
redis.call('EXPIRE', KEYS[2], ARGV[4])
return 1
"""

# KEYS: lock. ARGV: token. Deletes the lock only if we still own it.
RELEASE_LOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# KEYS: session knowledge cache (a JSON list), state. ARGV: user_id, capacity, ttl_s,
#       then hash1, item1_json, hash2, item2_json, ... (this turn's items >= threshold)
# Returns the number of items cached afterwards (-1: only the TTL was refreshed, 0: no
# cache). The read-modify-write is atomic, so concurrent turns of one session never
# lose each other's items (seed 000 reserves a "distributed lock" for this).
# An item whose hash is cached replaces the old entry and moves to the tail; the head
# is evicted past capacity (FIFO). Without new items the TTL is still refreshed.
KNOWLEDGE_TURN = """
local owner = redis.call('HGET', KEYS[2], '_user_id')
if owner and owner ~= ARGV[1] then
  return redis.error_reply('OWNER session belongs to another user')
end
local raw = redis.call('GET', KEYS[1])
if #ARGV < 5 then
  if not raw then return 0 end
  redis.call('EXPIRE', KEYS[1], ARGV[3])
  return -1
end
local items = {}
if raw then
  local ok, decoded = pcall(cjson.decode, raw)
  -- A corrupt value is dropped rather than failing every later turn of the session.
  if ok and type(decoded) == 'table' then items = decoded end
end
local fresh = {}
for i = 4, #ARGV, 2 do fresh[ARGV[i]] = true end
local kept = {}
for _, item in ipairs(items) do
  if type(item) == 'table' and not fresh[item['hash']] then kept[#kept + 1] = item end
end
for i = 5, #ARGV, 2 do kept[#kept + 1] = cjson.decode(ARGV[i]) end
local first = math.max(1, #kept - tonumber(ARGV[2]) + 1)
local out = {}
for i = first, #kept do out[#out + 1] = kept[i] end
redis.call('SET', KEYS[1], cjson.encode(out), 'EX', ARGV[3])
return #out
"""
