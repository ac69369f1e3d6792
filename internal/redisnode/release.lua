-- release.lua: compare-and-delete, then tell waiters. Runs after
-- sem_common.lua and hold.lua.
--
-- KEYS[1]  the hold                 P{K} (a lock, or a single server's
--                                   semaphore), or P{K}:slot:I
-- KEYS[2]  the key's own hold       P{K}
-- KEYS[3]  the holders' values      P{K}:values (single-server semaphores)
-- ARGV[1]  the token
-- ARGV[2]  "0" to withdraw a failed attempt without telling waiters (it
--          released nothing they were waiting for); otherwise publish on
--          P{K}:released, to which every waiter of K listens
--
-- Returns 1 when the hold was this token's and is now gone, 0 otherwise (a
-- newer hold by another token, or another holder of a semaphore, is never
-- touched; expired holders of a semaphore are pruned).
local v = redis.pcall("GET", KEYS[1])
local gone = 0
if type(v) ~= "table" then
	if v and hold_owned(v, ARGV[1]) then
		redis.call("DEL", KEYS[1])
		if KEYS[1] ~= KEYS[2] then
			marker_trim(KEYS[2])
		end
		gone = 1
	end
elseif redis.call("TYPE", KEYS[1]).ok == "zset" then
	local has = sem_prune(KEYS[1], KEYS[3], sem_now())
	gone = redis.call("ZREM", KEYS[1], ARGV[1])
	if gone == 1 and has then
		redis.call("HDEL", KEYS[3], ARGV[1])
	end
	sem_settle(KEYS[1], KEYS[3], has)
end
if gone == 1 and ARGV[2] ~= "0" then
	redis.call("PUBLISH", KEYS[2] .. ":released", "released")
end
return gone
