-- holder.lua: read the current hold. Runs after sem_common.lua; writes
-- nothing.
--
-- KEYS[1]  the hold                 P{K}: a string (lock) or a sorted set
--                                   (semaphore, see sem_common.lua)
-- KEYS[2]  the holders' values      P{K}:values (semaphores only)
--
-- Returns false (nil) when nobody holds the key (a lock kept for a waiter
-- is not held); otherwise {value, pttl}, where pttl is the remaining time
-- to live in ms. For a lock, value is the
-- part of the hold after its first "\n" ("" if none); for a semaphore, it
-- is the value of the holder that expires last ("" if none) and pttl is
-- that holder's.
local kind = redis.call("TYPE", KEYS[1]).ok
if kind == "string" then
	local v = redis.call("GET", KEYS[1])
	if string.sub(v, 1, 1) == "\r" then
		return false
	end
	local ttl = redis.call("PTTL", KEYS[1])
	local i = string.find(v, "\n", 1, true)
	if i then
		v = string.sub(v, i + 1)
	else
		v = ""
	end
	return {v, ttl}
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
return {v, tonumber(top[2]) - now}
