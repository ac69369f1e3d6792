-- acquire_fenced.lua: a fenced attempt on a lock by a waiter with no
-- place in its line, the uncontended case. Runs after fence.lua.
--
-- KEYS[1]  the lock                 P{K}
-- KEYS[2]  the fence counter        P fence:{T}, T in K's slot
-- ARGV[1]  the hold's value         token, or token .. "\n" .. value
-- ARGV[2]  time to live, in ms
-- ARGV[3]  the seed step of a missing counter, in microseconds
--
-- Returns the new fence counter, or 0 when the lock is not free: the
-- caller then asks acquire.lua, which knows lines and limits.
if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
	return fence_draw(KEYS[2], tonumber(ARGV[3]))
end
return 0
