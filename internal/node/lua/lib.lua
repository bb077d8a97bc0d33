-- Helpers shared by the lock scripts; each of those scripts is sent with
-- the helpers it calls in front of it (withLib in script.go), so a helper
-- has no blank line inside it, one between it and the next, and calls only
-- helpers above it.

-- now is the node's time in milliseconds, read once per call.
local now
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end

-- prune drops from a queue the entries of waiters that stopped renewing
-- them, and reports whether the queue exists.
local function prune(queue, expiries)
  if redis.call('EXISTS', queue) == 0 then
    return false
  end
  local gone = redis.call('ZRANGEBYSCORE', expiries, '-inf', clock(), 'LIMIT', 0, 1000)
  if #gone > 0 then
    redis.call('ZREM', queue, unpack(gone))
    redis.call('ZREM', expiries, unpack(gone))
  end
  return true
end

-- tell publishes payload for the waiter head, best effort (a PUBLISH refused,
-- say to an ACL user without it, must not fail the script, whose writes are
-- not rolled back). A head of this version ("<hub>.<id>") is told on its
-- hub's channel, the key's release channel with "@<hub>" in place of the
-- key, with the key appended; any other (an earlier version's, or "") on the
-- key's release channel.
local function tell(channel, key, head, payload)
  local hub = string.match(head, '^([^.]+)%.')
  if hub then
    local prefix = string.sub(channel, 1, #channel - #key)
    redis.pcall('PUBLISH', prefix .. '@' .. hub, payload .. ' ' .. key)
  else
    redis.pcall('PUBLISH', channel, payload)
  end
end

-- head_of returns the waiter first in a queue, after pruning it, or nil.
local function head_of(queue, expiries)
  if prune(queue, expiries) then
    return redis.call('ZRANGE', queue, 0, 0)[1]
  end
  return nil
end

-- queue_place updates the caller's entry in a queue after an acquire: it is
-- removed when the caller acquired, or leaves (life < 0); made or renewed
-- for life ms when the caller waits on (life > 0); left alone when the
-- caller does not queue (life == 0, or no id).
local function queue_place(queue, expiries, id, ticket, life, acquired)
  if id == '' then
    return
  end
  if acquired == 1 or life < 0 then
    if redis.call('ZREM', queue, id) == 1 then
      redis.call('ZREM', expiries, id)
    end
  elseif life > 0 then
    prune(queue, expiries)
    redis.call('ZADD', queue, 'NX', ticket, id)
    redis.call('ZADD', expiries, clock() + life, id)
    if redis.call('PTTL', queue) < life then
      redis.call('PEXPIRE', queue, life)
      redis.call('PEXPIRE', expiries, life)
    end
  end
end

-- requeue updates the caller's entry in a queue after a release (mode
-- "retry" keeps or makes it, for life ms, as queue_place; any other removes
-- it) and returns the waiter now first in the queue, or ''.
local function requeue(queue, expiries, mode, id, ticket, life)
  prune(queue, expiries)
  if mode ~= 'retry' then
    life = -1
  end
  queue_place(queue, expiries, id, ticket, life, 0)
  return redis.call('ZRANGE', queue, 0, 0)[1] or ''
end

-- tombstone reads a release's ARGV[7]: how long its tombstone is kept, in
-- ms (none when 0), and its mark: "1", or, after a ':', the id of the
-- releasing Mutex when another Mutex shares its token (a handle), so that
-- one's tombstone never vouches for the other's release.
local function tombstone(arg)
  local tomb, mark = string.match(arg, '^(%d+):(.+)$')
  if tomb then
    return tonumber(tomb), mark
  end
  return tonumber(arg), '1'
end

-- bury leaves, for tomb ms (none when 0), a tombstone of token holding
-- mark: the key tombs..":"..token, in tombs's hash slot, so that a copy of
-- the same release arriving later can tell "released by us" from "lost".
local function bury(tombs, token, tomb, mark)
  if tomb > 0 then
    redis.call('SET', tombs .. ':' .. token, mark, 'PX', tomb)
  end
end

-- buried reports whether a tombstone of token holding mark is kept.
local function buried(tombs, token, mark)
  return redis.call('GET', tombs .. ':' .. token) == mark
end

-- marker_and_fence reads the node's marker, creating it when missing as
-- proposed followed by ":" and the node's time in ms (not asked when proposed
-- is ''), and, when fencing is "1", draws a fencing number if acquired is 1:
-- see acquire.lua's reply. It also returns the marker's age in ms, -1 when
-- the marker does not say when it was made (an earlier version's, or none).
local function marker_and_fence(marker_key, fence_key, proposed, fencing, acquired)
  local marker, age = '', -1
  if proposed ~= '' then
    marker = redis.call('GET', marker_key)
    if not marker then
      marker = proposed .. ':' .. string.format('%d', clock())
      redis.call('SET', marker_key, marker)
    end
    local made = tonumber(string.match(marker, ':(%d+)$'))
    if made then
      age = math.max(clock() - made, 0)
    end
  end
  local fence, counter = -1, 0
  if fencing == '1' then
    if redis.call('EXISTS', fence_key) == 0 then
      fence = 0
    elseif acquired == 1 then
      fence = redis.call('INCR', fence_key)
      counter = fence
    else
      counter = tonumber(redis.call('GET', fence_key)) or 0
    end
  end
  return marker, fence, counter, age
end

-- raise sets a fencing counter to number if it is lower (never lowers it).
local function raise(counter, number)
  local current = tonumber(redis.call('GET', counter) or '0')
  if current < tonumber(number) then
    redis.call('SET', counter, number)
  end
end

-- renew_key renews one lease's key as renew.lua describes and returns its
-- code: 1 extended, 2 restored, 0 missing, -1 another token's, -2 another type.
local function renew_key(key, token, ttl, restore)
  local holder = redis.pcall('GET', key)
  if type(holder) == 'table' and holder.err then
    return -2
  elseif holder == token then
    redis.call('PEXPIRE', key, ttl)
    return 1
  elseif holder then
    return -1
  elseif restore == '1' then
    redis.call('SET', key, token, 'NX', 'PX', ttl)
    return 2
  end
  return 0
end
