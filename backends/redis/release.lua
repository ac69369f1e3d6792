-- release.lua: compare-and-delete, then tell waiters.
--
-- KEYS[1]  the hold                 P{K}
-- ARGV[1]  the token
-- ARGV[2]  "0" to withdraw a failed attempt without telling waiters (it
--          released nothing they were waiting for); otherwise publish
--
-- The release channel is P{K}:released, KEYS[1] .. ":released" (a channel is
-- not a key, so it need not be declared in KEYS).
--
-- Returns 1 when the hold was this token's and is now gone, 0 otherwise (a
-- newer hold by another token is never touched).
local v = redis.call("GET", KEYS[1])
if v and (v == ARGV[1] or string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. "\n") then
	redis.call("DEL", KEYS[1])
	if ARGV[2] ~= "0" then
		redis.call("PUBLISH", KEYS[1] .. ":released", "released")
	end
	return 1
end
return 0
