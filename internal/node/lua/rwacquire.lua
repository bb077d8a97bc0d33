-- Take a read-write lock's read hold (mode 'r') or write hold (mode 'w') for
-- one token: acquire.lua for the hash key described in rwlib.lua. A reader
-- is let in while no writer holds the key, a writer while nobody holds it;
-- either only when the queue is empty or it is first in it, so a writer
-- waiting in the queue keeps new readers out. A reader let in tells the
-- next in line, who may read too; so does a writer first in line that
-- readers refuse on its last try, as it leaves the queue.
--
-- KEYS and ARGV as acquire.lua's. Returns as acquire.lua, with pttl the
-- writer's remaining TTL, or, when readers refuse a writer, the time until
-- the latest of them expires. lib.lua and rwlib.lua come first. A key of
-- another type fails with WRONGTYPE.

-- The uncontended case first, before the helpers are made: a key nobody
-- holds, no queue, no marker or fencing number asked; as the general path
-- below would take it.
if ARGV[7] == '' and ARGV[8] ~= '1' and redis.call('EXISTS', KEYS[1], KEYS[2]) == 0 then
  if mode == 'r' then
    local t = redis.call('TIME')
    redis.call('HSET', KEYS[1], 'r:' .. ARGV[1], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2]))
  else
    redis.call('HSET', KEYS[1], 'w', ARGV[1])
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, 0, 0, '', -1, 0, -1}
end
-- lib.lua
local key, queue, expiries = KEYS[1], KEYS[2], KEYS[3]
local token, ttl, id, ticket = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local life = tonumber(ARGV[5])

local acquired, pttl, head = 0, 0, nil
local leaving = false
local writer = redis.call('HGET', key, 'w')
if mode == 'w' and writer == token then
  redis.call('PEXPIRE', key, ttl) -- an earlier copy of this attempt took it
  acquired = 1
elseif writer then
  pttl = redis.call('PTTL', key)
else
  local left, latest = readers(key)
  if mode == 'r' and reading(key, token) then
    acquired = 1 -- an earlier copy of this attempt took it
  elseif mode == 'w' and left > 0 then
    pttl = latest - clock()
    if life < 0 and id ~= '' and head_of(queue, expiries) == id then
      leaving = true -- first in line, and its last try: the next may read
    end
  else
    head = head_of(queue, expiries)
    if head == nil or head == id then
      acquired = 1
    else
      pttl = -3
      if left > 0 then
        head = nil -- readers hold it: nobody ahead is told it is free
      end
    end
  end
  if acquired == 1 and mode == 'r' then
    read_until(key, token, ttl)
  elseif acquired == 1 then
    redis.call('HSET', key, 'w', token)
    redis.call('PEXPIRE', key, ttl)
  end
end

queue_place(queue, expiries, id, ticket, life, acquired)
if ARGV[6] ~= '' then
  if (acquired == 1 and mode == 'r') or leaving then
    head = head_of(queue, expiries)
  end
  if head ~= nil and head ~= id then
    tell(ARGV[6], key, head, 't ' .. head)
  end
end
local waiting = redis.call('ZCARD', queue)
local marker, fence, counter, age = marker_and_fence(KEYS[4], KEYS[5], ARGV[7], ARGV[8], acquired)
return {acquired, pttl, waiting, marker, fence, counter, age}
