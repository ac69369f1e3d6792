-- refresh.lua: compare-and-PEXPIRE. Runs after sem_common.lua.
--
-- KEYS[1]  the hold                 P{K}: a string (lock) or a sorted set
--                                   (semaphore, see sem_common.lua)
-- KEYS[2]  the holders' values      P{K}:values (semaphores only)
-- ARGV[1]  the token
-- ARGV[2]  the new time to live, in ms
--
-- Returns 1 when the hold was this token's and its TTL is reset, 0 otherwise.
-- An expired hold is gone (a lock's key expired; a semaphore's holder is
-- pruned before the token is looked up), so nothing is re-created.
--
-- A lock's hold is read with GET alone: it fails (WRONGTYPE) only on a
-- sorted set, or on a key of another type, which holds nothing of ours.
local v = redis.pcall("GET", KEYS[1])
if type(v) ~= "table" then
	if v and (v == ARGV[1] or string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. "\n") then
		return redis.call("PEXPIRE", KEYS[1], ARGV[2])
	end
	return 0
end
if redis.call("TYPE", KEYS[1]).ok ~= "zset" then
	return 0
end
local now = sem_now()
local has = sem_prune(KEYS[1], KEYS[2], now)
local held = redis.call("ZSCORE", KEYS[1], ARGV[1]) ~= false
if held then
	redis.call("ZADD", KEYS[1], "XX", now + tonumber(ARGV[2]), ARGV[1])
end
sem_settle(KEYS[1], KEYS[2], has)
if held then
	return 1
end
return 0
