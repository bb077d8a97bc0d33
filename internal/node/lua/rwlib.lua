-- Helpers of a read-write lock's scripts, sent after lib.lua and before a
-- line that sets mode: 'r' for the read hold's scripts, 'w' for the write
-- hold's. A read-write lock's key is a hash: field "w" holds the writer's
-- token, and the key's TTL is the writer's; field "r:<token>" holds a
-- reader's expiry (node time, ms), and the key lives until the latest.

-- readers drops the readers whose expiry has passed and returns how many
-- are left and the latest expiry among them (0 when none).
local function readers(key)
  local fields = redis.call('HGETALL', key)
  local left, latest = 0, 0
  for i = 1, #fields, 2 do
    if string.sub(fields[i], 1, 2) == 'r:' then
      local at = tonumber(fields[i+1])
      if at <= clock() then
        redis.call('HDEL', key, fields[i])
      else
        left = left + 1
        latest = math.max(latest, at)
      end
    end
  end
  return left, latest
end

-- read_until makes token a reader until ttl ms from now, and the key live
-- at least as long.
local function read_until(key, token, ttl)
  redis.call('HSET', key, 'r:' .. token, clock() + ttl)
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end

-- reading reports whether token is a reader whose expiry has not passed.
local function reading(key, token)
  local at = redis.call('HGET', key, 'r:' .. token)
  return at and tonumber(at) > clock()
end
