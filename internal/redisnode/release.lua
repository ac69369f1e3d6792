-- release.lua: compare-and-delete, then tell waiters. Runs after
-- sem_common.lua, hold.lua and line.lua.
--
-- KEYS[1]  the hold                 P{K} (a lock, or a single server's
--                                   semaphore), or P{K}:slot:I
-- KEYS[2]  the key's own hold       P{K}
-- KEYS[3]  the holders' values      P{K}:values (single-server semaphores)
-- ARGV[1]  the token
-- ARGV[2]  "0" to withdraw a failed attempt without telling waiters (it
--          released nothing they were waiting for) unless the lock is
--          kept for another waiter than its own; otherwise publish on
--          P{K}:released, to which every waiter of K listens: "released",
--          or the name of the waiter the lock is kept for. A lock's
--          release publishes only when its line has someone in it (see
--          line.lua): nobody else waits for it
-- ARGV[3]  the waiter of the attempt withdrawn, if any (absent for none):
--          it goes back in the lock's line, for ARGV[4] ms, before the
--          lock is handed on (a failed Redlock round keeps its waiter's
--          place)
--
-- Returns 1 when the hold was this token's and is now gone, 0 otherwise (a
-- newer hold by another token, or another holder of a semaphore, is never
-- touched; expired holders of a semaphore are pruned). A lock's hold gone,
-- the lock is kept for the first live waiter in its line, if any.
local v = redis.pcall("GET", KEYS[1])
local gone = 0
local heir -- the waiter the lock is kept for
local waited = true -- whether anyone may wait for this release
if type(v) ~= "table" then
	if v and hold_owned(v, ARGV[1]) then
		if KEYS[1] ~= KEYS[2] then
			redis.call("DEL", KEYS[1])
			marker_trim(KEYS[2])
		else
			if ARGV[3] then
				line_join(KEYS[2], ARGV[3], tonumber(ARGV[4]))
			end
			waited = redis.call("EXISTS", KEYS[2] .. ":line") == 1
			if waited then
				heir = line_hand(KEYS[2])
			end
			if not heir then
				redis.call("DEL", KEYS[1])
			end
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
-- A withdrawn attempt whose waiter is first in line again is not woken:
-- it comes back after its own delay, as after any failed attempt.
if gone == 1 and (ARGV[2] ~= "0" and waited or heir and heir ~= ARGV[3]) then
	redis.call("PUBLISH", KEYS[2] .. ":released", heir or "released")
end
return gone
