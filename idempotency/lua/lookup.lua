-- Read an idempotency record, and the node's marker, as the lock's acquire
-- script does: a missing marker is created, so a node that loses its data
-- shows a new one (docs/design.md, "Restart quarantine").
--
-- KEYS[1]  the record: a hash {f = fingerprint, r = response, n = fencing number}
-- KEYS[2]  the node's marker, no TTL (optional: without it, no marker is read)
-- ARGV[1]  the marker value to create if missing
--
-- Returns {found, fingerprint, response, fence, marker}: found is 1 when
-- the record exists, else 0 (and the next three are ""); marker is "" when
-- not asked. A record of another type fails with WRONGTYPE.
local marker = ''
if KEYS[2] then
  marker = redis.call('GET', KEYS[2])
  if not marker then
    redis.call('SET', KEYS[2], ARGV[1])
    marker = ARGV[1]
  end
end
local rec = redis.call('HMGET', KEYS[1], 'f', 'r', 'n')
if not rec[1] then
  return {0, '', '', '', marker}
end
return {1, rec[1], rec[2] or '', rec[3] or '', marker}
