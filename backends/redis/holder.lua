-- holder.lua: read the current hold.
--
-- KEYS[1]  the hold                 P{K}
--
-- Returns false (nil) when nobody holds the key; otherwise {value, pttl},
-- where value is the part of the hold after its first "\n" ("" if none) and
-- pttl the remaining time to live in ms.
local v = redis.call("GET", KEYS[1])
if not v then
	return false
end
local ttl = redis.call("PTTL", KEYS[1])
local i = string.find(v, "\n", 1, true)
if i then
	v = string.sub(v, i + 1)
else
	v = ""
end
return {v, ttl}
