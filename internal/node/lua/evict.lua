-- Remove a lock key whatever token it holds: an operator's forced unlock.
-- No tombstone is left (see release.lua), so the evicted holder's own
-- release finds its lock lost; the waiter first in the key's queue is told,
-- as by a release.
--
-- KEYS[1]  the lock key
-- KEYS[2]  its queue (see acquire.lua)
-- KEYS[3]  the queue's expiries
-- ARGV[1]  the type a lock key of this kind has ("string" or "hash"): a key
--          of another type is not a lock's, and is left alone
-- ARGV[2]  the key's release channel, or "" to tell no one
--
-- Returns 1 when the key was removed, 0 when it was missing, -1 when it is
-- of another type (left alone). lib.lua comes first.
local key, queue, expiries = KEYS[1], KEYS[2], KEYS[3]
local kind = redis.call('TYPE', key).ok
if kind == 'none' then
  return 0
elseif kind ~= ARGV[1] then
  return -1
end
local token = '-'
if kind == 'string' then
  token = redis.call('GET', key)
elseif redis.call('HEXISTS', key, 'w') == 1 then
  token = redis.call('HGET', key, 'w')
end
redis.call('DEL', key)
local head = ''
if prune(queue, expiries) then
  head = redis.call('ZRANGE', queue, 0, 0)[1] or ''
end
if ARGV[2] ~= '' then
  tell(ARGV[2], key, head, 'r ' .. token .. ' ' .. head)
end
return 1
