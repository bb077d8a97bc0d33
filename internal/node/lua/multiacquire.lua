-- Take several lock keys for one token at once, all or none, on this node:
-- acquire.lua for every key together. The keys are taken only when none is
-- held by another token and the caller is first in (or may pass) every
-- key's queue; otherwise none is, and the caller keeps (or makes, or
-- leaves) its place in every key's queue as acquire.lua does in one; one
-- that leaves the queue of a free key it was first in tells the next. Since
-- the queues order waiters by the same ticket, the waiter with the smallest
-- ticket is first in all of its queues: no two waiters block each other.
--
-- KEYS[3i-2], KEYS[3i-1], KEYS[3i]  lock key i, its queue, the queue's
--          expiries (i = 1..n), as acquire.lua's KEYS[1..3]
-- KEYS[3n+1], KEYS[3n+2]  the marker and the fencing counter, as
--          acquire.lua's KEYS[4..5]; present when ARGV[7] ~= '' or
--          ARGV[8] == '1'
-- ARGV     as acquire.lua's; ARGV[6] is the first key's release channel,
--          each key's being the same prefix followed by the key
--
-- Returns as acquire.lua, with pttl the longest remaining TTL of the keys
-- held by another token (-1 if one has none), -3 when none is held but
-- another waiter is ahead in a queue, and waiting the most waiters queued on
-- any key. A key of another type fails with WRONGTYPE. lib.lua comes first.

-- The uncontended case first, before lib.lua's helpers are made: every key
-- free, no queue, no marker or fencing number asked (then KEYS holds the
-- lock keys and their queues only); as the general path below would take
-- them.
if ARGV[7] == '' and ARGV[8] ~= '1' then
  local free = true
  for i = 1, #KEYS / 3 do
    if redis.call('EXISTS', KEYS[3*i-2], KEYS[3*i-1]) > 0 then
      free = false
      break
    end
  end
  if free then
    for i = 1, #KEYS / 3 do
      redis.call('SET', KEYS[3*i-2], ARGV[1], 'PX', ARGV[2])
    end
    return {1, 0, 0, '', -1, 0, -1}
  end
end
-- lib.lua
local token, ttl, id, ticket = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local life = tonumber(ARGV[5])
local n = #KEYS
if ARGV[7] ~= '' or ARGV[8] == '1' then
  n = n - 2
end
n = n / 3
local prefix = ''
if ARGV[6] ~= '' then
  prefix = string.sub(ARGV[6], 1, #ARGV[6] - #KEYS[1])
end

local held, behind, longest, forever = false, false, 0, false
local heads = {}
local first = {} -- free keys whose queue has the caller first
for i = 1, n do
  local key = KEYS[3*i-2]
  local holder = redis.call('GET', key)
  if holder == token then
    -- an earlier copy of this attempt took it
  elseif holder then
    held = true
    local t = redis.call('PTTL', key)
    if t < 0 then
      forever = true
    elseif t > longest then
      longest = t
    end
  else
    local head = head_of(KEYS[3*i-1], KEYS[3*i])
    if head ~= nil and head ~= id then
      behind = true
      heads[i] = head
    elseif head == id then
      first[i] = true
    end
  end
end

local acquired, pttl = 0, -3
if held then
  pttl = longest
  if forever then
    pttl = -1
  end
elseif not behind then
  for i = 1, n do
    redis.call('SET', KEYS[3*i-2], token, 'PX', ttl)
  end
  acquired, pttl = 1, 0
end

local waiting = 0
for i = 1, n do
  local key, queue = KEYS[3*i-2], KEYS[3*i-1]
  queue_place(queue, KEYS[3*i], id, ticket, life, acquired)
  if first[i] and acquired == 0 and life < 0 then
    -- Its last try, refused for another name: it leaves this free key's
    -- queue, whose next waiter must be told.
    heads[i] = head_of(queue, KEYS[3*i])
  end
  if heads[i] and prefix ~= '' then
    -- Free here, but its head has not come: it may be asleep.
    tell(prefix .. key, key, heads[i], 't ' .. heads[i])
  end
  waiting = math.max(waiting, redis.call('ZCARD', queue))
end
local marker, fence, counter, age = marker_and_fence(KEYS[3*n+1], KEYS[3*n+2], ARGV[7], ARGV[8], acquired)
return {acquired, pttl, waiting, marker, fence, counter, age}
