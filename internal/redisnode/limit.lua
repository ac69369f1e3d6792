-- limit.lua: the limit of the holds on a key, asked after a plain SET NX
-- of its lock failed. Runs after hold.lua; writes nothing.
--
-- KEYS[1]  the key's own hold       P{K}
--
-- Returns 0 when the key is free, else its limit (1: a lock).
return held_limit(KEYS[1]) or 0
