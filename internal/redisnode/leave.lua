-- leave.lua: a waiter gives up its place in a lock's line. Runs after
-- hold.lua and line.lua.
--
-- KEYS[1]  the lock                 P{K}
-- ARGV[1]  the waiter
--
-- Returns 1 when the lock was kept for the waiter: it is now kept for the
-- next live waiter in line, or free, and waiters are told on
-- P{K}:released (as release.lua tells them); 0 otherwise.
redis.call("ZREM", KEYS[1] .. ":line", ARGV[1])
redis.call("DEL", KEYS[1] .. ":w:" .. ARGV[1])
local _, v = held_limit(KEYS[1])
if v ~= "\r" .. ARGV[1] then
	return 0
end
local heir = line_hand(KEYS[1])
if not heir then
	redis.call("DEL", KEYS[1])
end
redis.call("PUBLISH", KEYS[1] .. ":released", heir or "released")
return 1
