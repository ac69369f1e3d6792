-- refresh.lua: compare-and-PEXPIRE. Runs after sem_common.lua and
-- hold.lua.
--
-- KEYS[1]  the hold                 P{K} (a lock, or a single server's
--                                   semaphore), or P{K}:slot:I
-- KEYS[2]  the key's own hold       P{K}
-- KEYS[3]  the holders' values      P{K}:values (single-server semaphores)
-- ARGV[1]  the token
-- ARGV[2]  the new time to live, in ms
--
-- Returns 1 when the hold was this token's and its TTL is reset (a slot's
-- marker is kept alive as long), 0 otherwise. An expired hold is gone (a
-- key expired; a semaphore's holder is pruned before the token is looked
-- up), so nothing is re-created.
local v = redis.pcall("GET", KEYS[1])
if type(v) ~= "table" then
	if not (v and hold_owned(v, ARGV[1])) then
		return 0
	end
	redis.call("PEXPIRE", KEYS[1], ARGV[2])
	if KEYS[1] ~= KEYS[2] then
		marker_stretch(KEYS[2], tonumber(ARGV[2]))
	end
	return 1
end
if redis.call("TYPE", KEYS[1]).ok ~= "zset" then
	return 0
end
local now = sem_now()
local has = sem_prune(KEYS[1], KEYS[3], now)
local held = redis.call("ZSCORE", KEYS[1], ARGV[1]) ~= false
if held then
	redis.call("ZADD", KEYS[1], "XX", now + tonumber(ARGV[2]), ARGV[1])
end
sem_settle(KEYS[1], KEYS[3], has)
if held then
	return 1
end
return 0
