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
