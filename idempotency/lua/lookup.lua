-- Read an idempotency record, and the node's marker, without writing.
--
-- KEYS[1]  the record: a hash {f = fingerprint, r = response, n = fencing number}
-- KEYS[2]  the node's marker (optional: without it, no marker is read)
--
-- Returns {found, fingerprint, response, fence, marker}: found is 1 when
-- the record exists, else 0 (and the next three are ""); marker is "" when
-- missing or not asked. A record of another type fails with WRONGTYPE.
local marker = ''
if KEYS[2] then
  marker = redis.call('GET', KEYS[2]) or ''
end
local rec = redis.call('HMGET', KEYS[1], 'f', 'r', 'n')
if not rec[1] then
  return {0, '', '', '', marker}
end
return {1, rec[1], rec[2] or '', rec[3] or '', marker}
