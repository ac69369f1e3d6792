-- release.lua: compare-and-delete, then tell waiters. Runs after
-- sem_common.lua.
--
-- KEYS[1]  the hold                 P{K}: a string (lock) or a sorted set
--                                   (semaphore, see sem_common.lua)
-- KEYS[2]  the holders' values      P{K}:values (semaphores only)
-- ARGV[1]  the token
-- ARGV[2]  "0" to withdraw a failed attempt without telling waiters (it
--          released nothing they were waiting for); otherwise publish
--
-- The release channel is P{K}:released, KEYS[1] .. ":released" (a channel is
-- not a key, so it need not be declared in KEYS).
--
-- Returns 1 when the hold was this token's and is now gone, 0 otherwise (a
-- newer hold by another token, or another holder of a semaphore, is never
-- touched; expired holders of a semaphore are pruned).
--
-- A lock's hold is read with GET alone: it fails (WRONGTYPE) only on a
-- sorted set, or on a key of another type, which holds nothing of ours.
local v = redis.pcall("GET", KEYS[1])
if type(v) ~= "table" then
	if v and (v == ARGV[1] or string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. "\n") then
		redis.call("DEL", KEYS[1])
		if ARGV[2] ~= "0" then
			redis.call("PUBLISH", KEYS[1] .. ":released", "released")
		end
		return 1
	end
	return 0
end
if redis.call("TYPE", KEYS[1]).ok ~= "zset" then
	return 0
end
local has = sem_prune(KEYS[1], KEYS[2], sem_now())
local gone = redis.call("ZREM", KEYS[1], ARGV[1])
if gone == 1 and has then
	redis.call("HDEL", KEYS[2], ARGV[1])
end
sem_settle(KEYS[1], KEYS[2], has)
if gone == 1 and ARGV[2] ~= "0" then
	redis.call("PUBLISH", KEYS[1] .. ":released", "released")
end
return gone
