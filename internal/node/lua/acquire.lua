-- Take a lock key for one token, as SET key token NX PX ttl does, with three
-- additions: a key that already holds this very token counts as taken (an
-- earlier copy of the same attempt landed after its reply was lost) and gets
-- its TTL reset; a free key goes only to the waiter at the head of the key's
-- queue, so every node favours the same next owner; and, when asked, the
-- node's marker and the set's fencing counter are read.
--
-- KEYS[1]  the lock key
-- KEYS[2]  its queue: a sorted set of waiter ids, scored by ticket
-- KEYS[3]  the queue's expiries: waiter id -> node time (ms) it lapses at
-- KEYS[4]  the node's marker, no TTL; recreated when missing (optional)
-- KEYS[5]  the node set's fencing counter, no TTL (optional)
-- ARGV[1]  the token (random, one per attempt)
-- ARGV[2]  the TTL in milliseconds (> 0)
-- ARGV[3]  the caller's waiter id, or ""
-- ARGV[4]  the caller's ticket (microseconds), its place in the queue
-- ARGV[5]  how long the caller's queue entry lasts, in ms; "0": do not
--          queue; "-1": do not queue, and remove the caller's entry
-- ARGV[6]  the key's release channel (see tell in lib.lua), or ""
-- ARGV[7]  the marker to create if missing (followed by ":" and the node's
--          time in ms), or "" to leave it alone
-- ARGV[8]  "1" to draw a fencing number when the key is taken
--
-- Returns {acquired, pttl, waiting, marker, fence, counter, age}:
--   acquired  1 when the key now holds the token, else 0
--   pttl      when not acquired: the holder's remaining TTL in ms (-1: none),
--             or -3 when the key is free but another waiter is ahead
--   waiting   the number of queued waiters after the call
--   marker    the marker's value after the call ("" when not asked)
--   fence     the counter after INCR when acquired and asked; 0 when the
--             counter is missing; -1 otherwise
--   counter   the counter's value after the call when asked, 0 if missing
--   age       how long ago the marker was made, in ms; -1 when not asked or
--             when the marker does not say (an earlier version made it)
-- A key of another type fails with WRONGTYPE.

-- The uncontended case first, before lib.lua's helpers are defined (each
-- one a closure made on every call): a free key, no queue, and no marker or
-- fencing number asked. Anything else takes the general path below.
if ARGV[7] == '' and ARGV[8] ~= '1' and redis.call('EXISTS', KEYS[2]) == 0 and
    redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, 0, 0, '', -1, 0, -1}
end
-- lib.lua
local key, queue, expiries = KEYS[1], KEYS[2], KEYS[3]
local token, ttl, id, ticket = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local life = tonumber(ARGV[5])

local acquired, pttl, head = 0, 0, nil
local unqueued = false -- the queue is known not to exist
local holder = redis.call('GET', key)
if holder == token then
  redis.call('PEXPIRE', key, ttl)
  acquired = 1
elseif holder then
  pttl = redis.call('PTTL', key)
else
  head = head_of(queue, expiries)
  unqueued = head == nil -- an emptied queue is deleted
  if head == nil or head == id then
    redis.call('SET', key, token, 'PX', ttl)
    acquired = 1
  else
    pttl = -3
  end
end

local waiting = 0
if not unqueued then -- else acquired, and no queue to leave or count
  queue_place(queue, expiries, id, ticket, life, acquired)
  waiting = redis.call('ZCARD', queue)
end
if head ~= nil and head ~= id and ARGV[6] ~= '' then
  -- Free here, but the head has not come: it may be asleep, never told of
  -- the release that freed the key.
  tell(ARGV[6], key, head, 't ' .. head)
end
local marker, fence, counter, age = marker_and_fence(KEYS[4], KEYS[5], ARGV[7], ARGV[8], acquired)
return {acquired, pttl, waiting, marker, fence, counter, age}
