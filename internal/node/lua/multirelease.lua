-- Release several lock keys held by one token at once: release.lua for
-- every key together.
--
-- KEYS[4i-3..4i]  lock key i, its queue, the queue's expiries, its
--          tombstones prefix (i = 1..n), as release.lua's KEYS[1..4]
-- ARGV     as release.lua's; ARGV[2] is the first key's release channel,
--          each key's being the same prefix followed by the key
--
-- Returns {status, head}: status -1 when another token holds some key (and
-- no tombstone shows our release of it), else 0 when some key is missing
-- without a tombstone of ours, else 3 when another token holds some key
-- after our earlier release, else 1 when some key was deleted, else 2 (every
-- key gone, by our earlier release); head is
-- the waiter now first in the first key's queue, or "". Each key's head is
-- told as release.lua tells it. A key of another type fails with WRONGTYPE.
-- lib.lua comes first.

-- The uncontended release first, before lib.lua's helpers are made: every
-- key ours, no queue; as the general path below would do it.
if ARGV[3] == 'release' and tonumber(ARGV[7]) then
  local ours = true
  for i = 1, #KEYS / 4 do
    if redis.call('GET', KEYS[4*i-3]) ~= ARGV[1] or redis.call('EXISTS', KEYS[4*i-2]) == 1 then
      ours = false
      break
    end
  end
  if ours then
    local prefix = string.sub(ARGV[2], 1, #ARGV[2] - #KEYS[1])
    for i = 1, #KEYS / 4 do
      redis.call('DEL', KEYS[4*i-3])
      if tonumber(ARGV[7]) > 0 then
        redis.call('SET', KEYS[4*i] .. ':' .. ARGV[1], '1', 'PX', ARGV[7])
      end
      if ARGV[2] ~= '' then
        redis.pcall('PUBLISH', prefix .. KEYS[4*i-3], 'r ' .. ARGV[1] .. ' ')
      end
    end
    return {1, ''}
  end
end
-- lib.lua
local token, channel, mode, id = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local tomb, mark = tombstone(ARGV[7])
local prefix = ''
if channel ~= '' then
  prefix = string.sub(channel, 1, #channel - #KEYS[1])
end

local other, missing, since, deleted = false, false, false, false
local first = ''
for i = 1, #KEYS / 4 do
  local key, queue, expiries, tombs = KEYS[4*i-3], KEYS[4*i-2], KEYS[4*i-1], KEYS[4*i]
  local status
  local holder = redis.call('GET', key)
  if holder == token then
    redis.call('DEL', key)
    bury(tombs, token, tomb, mark)
    status, deleted = 1, true
  elseif buried(tombs, token, mark) then
    status = 2 -- gone by our earlier release
    since = since or holder -- another token's since
  elseif holder then
    status, other = -1, true
  else
    status, missing = 0, true
  end
  local head = requeue(queue, expiries, mode, id, ARGV[5], tonumber(ARGV[6]))
  if i == 1 then
    first = head
  end
  if prefix ~= '' then
    if status == 1 and mode == 'release' then
      tell(prefix .. key, key, head, 'r ' .. token .. ' ' .. head)
    elseif head ~= '' and head ~= id and redis.call('EXISTS', key) == 0 then
      tell(prefix .. key, key, head, 't ' .. head)
    end
  end
end

local status = 2
if other then
  status = -1
elseif missing then
  status = 0
elseif since then
  status = 3
elseif deleted then
  status = 1
end
return {status, first}
