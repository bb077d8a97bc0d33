-- Delete a lock key, only while it holds our token, so a release that comes
-- late never deletes the next owner's lock; leave a tombstone of the token,
-- so that a copy of the same release arriving later can tell "released by
-- us" from "lost"; update the key's queue; and tell the next owner.
--
-- KEYS[1]  the lock key
-- KEYS[2]  its queue (see acquire.lua)
-- KEYS[3]  the queue's expiries
-- KEYS[4]  the key's tombstones' prefix: a tombstone is KEYS[4]:<token>
-- ARGV[1]  the token
-- ARGV[2]  the key's release channel, or "" to tell no one
-- ARGV[3]  "release": the holder is done; "retry": the caller will try again
--          (its queue entry is kept or made); "leave": the caller is done
--          waiting (its queue entry is removed)
-- ARGV[4]  the caller's waiter id, or ""; for "release", the ids of the
--          holders the lock passed through in the caller's process too,
--          separated by spaces: each one's entry is removed
-- ARGV[5]  the caller's ticket (for "retry")
-- ARGV[6]  how long the caller's queue entry lasts, in ms (for "retry")
-- ARGV[7]  how long a tombstone is kept, in ms ("0": none), then, for a
--          Mutex that shares its token (a handle), ":" and its own id, which
--          the tombstone holds (see tombstone in lib.lua)
--
-- Returns {status, head}: status 1 when the key was deleted, 2 when it was
-- missing but a tombstone shows we deleted it, 3 when another token holds it
-- but a tombstone shows we deleted it before, 0 when it was missing, -1 when
-- another token holds it (left alone); head is the waiter now first in the
-- queue, or "". On a deletion with mode "release" the head is told the token
-- ("r <token> <head>", see tell in lib.lua); when the key is free and the
-- head is someone else, a failed attempt or a waiter that leaves tells the
-- head it is its turn ("t <head>"), and nobody else. A key of another
-- type fails with WRONGTYPE. lib.lua comes first.
-- The uncontended release first, before lib.lua's helpers are made: our
-- key and no queue, as the general path below would do it.
if ARGV[3] == 'release' and tonumber(ARGV[7]) and redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('DEL', KEYS[1])
  if tonumber(ARGV[7]) > 0 then
    redis.call('SET', KEYS[4] .. ':' .. ARGV[1], '1', 'PX', ARGV[7])
  end
  if ARGV[2] ~= '' then
    redis.pcall('PUBLISH', ARGV[2], 'r ' .. ARGV[1] .. ' ')
  end
  return {1, ''}
end
-- lib.lua
local key, queue, expiries, tombs = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, channel, mode, id = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local tomb, mark = tombstone(ARGV[7])

local status
local holder = redis.call('GET', key)
if holder == token then
  redis.call('DEL', key)
  status = 1
  bury(tombs, token, tomb, mark)
elseif buried(tombs, token, mark) then
  status = holder and 3 or 2 -- gone by our earlier release; 3: another token's since
elseif holder == false then
  status = 0
else
  status = -1
end

local head = ''
for one in string.gmatch(id, '%S+') do
  head = requeue(queue, expiries, mode, one, ARGV[5], tonumber(ARGV[6]))
end
if id == '' then
  head = requeue(queue, expiries, mode, id, ARGV[5], tonumber(ARGV[6]))
end
if channel ~= '' then
  if status == 1 and mode == 'release' then
    tell(channel, key, head, 'r ' .. token .. ' ' .. head)
  elseif head ~= '' and head ~= id and redis.call('EXISTS', key) == 0 then
    tell(channel, key, head, 't ' .. head)
  end
end
return {status, head}
