-- Release a read-write lock's read hold (mode 'r') or write hold (mode
-- 'w'): release.lua for the hash key described in rwlib.lua. The next in
-- line is told once nobody holds the key, or, while only readers hold it,
-- when the caller leaving the queue was first in it.
--
-- KEYS and ARGV as release.lua's. Returns {status, head} as release.lua,
-- with status -1 when another owner holds the key in the other mode (or
-- another writer; 3 if a tombstone shows our earlier release), and head "" while others still hold the key. lib.lua and
-- rwlib.lua come first. A key of another type fails with WRONGTYPE.

-- The uncontended release first, before the helpers are made: the caller's
-- hold alone on the key, no queue; as the general path below would do it.
if ARGV[3] == 'release' and tonumber(ARGV[7]) and redis.call('EXISTS', KEYS[2]) == 0 and redis.call('HLEN', KEYS[1]) == 1 then
  local field = 'w'
  if mode == 'r' then
    field = 'r:' .. ARGV[1]
  end
  local value = redis.call('HGET', KEYS[1], field)
  local mine = value == ARGV[1]
  if mode == 'r' and value then
    local t = redis.call('TIME')
    mine = tonumber(value) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  if mine then
    redis.call('DEL', KEYS[1])
    if tonumber(ARGV[7]) > 0 then
      redis.call('SET', KEYS[4] .. ':' .. ARGV[1], '1', 'PX', ARGV[7])
    end
    if ARGV[2] ~= '' then
      redis.pcall('PUBLISH', ARGV[2], 'r ' .. ARGV[1] .. ' ')
    end
    return {1, ''}
  end
end
-- lib.lua
local key, queue, expiries, tombs = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, channel, how, id = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local tomb, mark = tombstone(ARGV[7])

local status
local writer = redis.call('HGET', key, 'w')
local mine
if mode == 'w' then
  mine = writer == token
else
  mine = reading(key, token)
end
if mine then
  if mode == 'w' then
    redis.call('HDEL', key, 'w')
  else
    redis.call('HDEL', key, 'r:' .. token)
  end
  bury(tombs, token, tomb, mark)
  status = 1
else
  if mode == 'r' then
    redis.call('HDEL', key, 'r:' .. token) -- expired, if there
  end
  local left = readers(key)
  local taken = writer or (mode == 'w' and left > 0)
  if buried(tombs, token, mark) then
    status = taken and 3 or 2 -- gone by our earlier release; 3: another owner's since
  elseif taken then
    status = -1
  else
    status = 0
  end
end
if redis.call('EXISTS', key) == 1 then
  readers(key) -- lapsed readers go: a key only they kept is freed
end

local ahead = redis.call('ZRANGE', queue, 0, 0)[1] or ''
local head = requeue(queue, expiries, how, id, ARGV[5], tonumber(ARGV[6]))
local free = redis.call('EXISTS', key) == 0
if channel ~= '' and free then
  if status == 1 and how == 'release' then
    tell(channel, key, head, 'r ' .. token .. ' ' .. head)
  elseif head ~= '' and head ~= id then
    tell(channel, key, head, 't ' .. head)
  end
elseif channel ~= '' and head ~= '' and head ~= id and head ~= ahead and redis.call('HEXISTS', key, 'w') == 0 then
  -- Readers hold it and the waiter first in line left (a writer that gave
  -- up): the one now first may be a reader, who may read at once.
  tell(channel, key, head, 't ' .. head)
end
if not free then
  head = ''
end
return {status, head}
