-- slot_acquire.lua: one node's part of one Redlock semaphore slot attempt.
-- Runs after fence.lua.
--
-- KEYS[1]  the slot's hold          P{K}:slot:I
-- KEYS[2]  the semaphore's marker   P{K}
-- KEYS[3]  the fence counter        P fence:{T}, T in K's slot
-- ARGV[1]  the hold's value         token, or token .. "\n" .. value
-- ARGV[2]  time to live, in ms
-- ARGV[3]  the semaphore's limit    N
-- ARGV[4]  "1" to draw a fencing token, "0" not to
-- ARGV[5]  the seed step, in microseconds (at least 1)
--
-- While any slot of K is held, P{K} (the key of K's lock) holds the
-- marker "\n" .. N and lives at least as long as every slot: it records
-- the semaphore's limit and keeps the lock of K from being taken beside
-- its slots. A lock's hold never starts with "\n" (tokens are not empty).
--
-- Returns -M when K is held with another limit M (1: by its lock); 0 when
-- the slot is held; otherwise the new fence counter when one was asked
-- for (seeded from the server's clock, as in acquire_seeded.lua), or 1.
local m = redis.call("GET", KEYS[2])
if m then
	if string.sub(m, 1, 1) ~= "\n" then
		return -1
	end
	if m ~= "\n" .. ARGV[3] then
		return -tonumber(string.sub(m, 2))
	end
end
if not redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
	return 0
end
local ttl = tonumber(ARGV[2])
if not m then
	redis.call("SET", KEYS[2], "\n" .. ARGV[3], "PX", ttl)
elseif redis.call("PTTL", KEYS[2]) < ttl then
	redis.call("PEXPIRE", KEYS[2], ttl)
end
if ARGV[4] ~= "1" then
	return 1
end
return fence_draw(KEYS[3], tonumber(ARGV[5]))
