-- slot_unlock.lua: withdraw a failed Redlock lock attempt, silently, and
-- say whether the key is a semaphore's.
--
-- KEYS[1]  the lock's hold, or the semaphore's marker   P{K}
-- ARGV[1]  the token
--
-- Returns 1 when the hold was this token's and is now gone; -N when P{K}
-- is the marker of a semaphore of limit N (see slot_acquire.lua), whose
-- slots refused the lock; 0 otherwise.
local v = redis.call("GET", KEYS[1])
if not v then
	return 0
end
if v == ARGV[1] or string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. "\n" then
	redis.call("DEL", KEYS[1])
	return 1
end
if string.sub(v, 1, 1) == "\n" then
	return -tonumber(string.sub(v, 2))
end
return 0
