-- holder.lua: read the current hold. Runs after sem_common.lua; writes
-- nothing.
--
-- KEYS[1]  the hold                 P{K}: a string (lock) or a sorted set
--                                   (semaphore, see sem_common.lua)
-- KEYS[2]  the holders' values      P{K}:values (semaphores only)
--
-- Returns false (nil) when nobody holds the key (a lock kept for a waiter
-- is not held); otherwise {value, pttl, fence}, where pttl is the
-- remaining time to live in ms. For a lock, value is the part of the hold
-- after its first "\n" ("" if none) and fence its fencing token in
-- decimal ("" if it drew none; see hold.lua); for a semaphore, value is
-- the value of the holder that expires last ("" if none), pttl is that
-- holder's, and fence is "" (a semaphore keeps no token per holder).
local kind = redis.call("TYPE", KEYS[1]).ok
if kind == "string" then
	local v = redis.call("GET", KEYS[1])
	if string.sub(v, 1, 1) == "\r" then
		return false
	end
	local ttl = redis.call("PTTL", KEYS[1])
	local head, value = v, ""
	local i = string.find(v, "\n", 1, true)
	if i then
		head, value = string.sub(v, 1, i - 1), string.sub(v, i + 1)
	end
	local fence = ""
	local j = string.find(head, "\t", 1, true)
	if j then
		fence = string.sub(head, j + 1)
	end
	return {value, ttl, fence}
end
if kind ~= "zset" then
	return false
end
local now = sem_now()
local top = redis.call("ZRANGE", KEYS[1], -1, -1, "WITHSCORES")
if top[1] == nil or top[1] == "" or tonumber(top[2]) < now then
	return false
end
local v = redis.call("HGET", KEYS[2], top[1]) or ""
return {v, tonumber(top[2]) - now, ""}
