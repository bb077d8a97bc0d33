-- Helpers shared by the scripts that keep a lock key's queue; each of those
-- scripts is sent with this file in front of it.

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

