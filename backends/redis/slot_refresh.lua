-- slot_refresh.lua: compare-and-PEXPIRE of a slot, keeping the
-- semaphore's marker alive at least as long.
--
-- KEYS[1]  the slot's hold          P{K}:slot:I
-- KEYS[2]  the semaphore's marker   P{K}
-- ARGV[1]  the token
-- ARGV[2]  the new time to live, in ms
--
-- Returns 1 when the slot was this token's and its TTL is reset, 0
-- otherwise. An expired slot is gone, so nothing is re-created.
local v = redis.call("GET", KEYS[1])
if not (v and (v == ARGV[1] or string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. "\n")) then
	return 0
end
local ttl = tonumber(ARGV[2])
redis.call("PEXPIRE", KEYS[1], ttl)
local m = redis.call("GET", KEYS[2])
if m and string.sub(m, 1, 1) == "\n" and redis.call("PTTL", KEYS[2]) < ttl then
	redis.call("PEXPIRE", KEYS[2], ttl)
end
return 1
