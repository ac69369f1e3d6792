-- refresh.lua: compare-and-PEXPIRE.
--
-- KEYS[1]  the hold                 P{K}
-- ARGV[1]  the token
-- ARGV[2]  the new time to live, in ms
--
-- Returns 1 when the hold was this token's and its TTL is reset, 0 otherwise.
-- An expired hold is gone, so the GET fails and nothing is re-created.
local v = redis.call("GET", KEYS[1])
if v and (v == ARGV[1] or string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. "\n") then
	return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0
