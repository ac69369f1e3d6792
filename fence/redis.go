package fence

import (
	"context"
	"math"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// DefaultPrefix is the default prefix of the Redis guard's fence keys.
const DefaultPrefix = "dsync-fence:"

// RedisOptions configure a Redis guard. A nil *RedisOptions means
// defaults; a zero field means that field's default.
type RedisOptions struct {
	// Prefix of the fence keys: the fence of name is the string key
	// Prefix+"{"+name+"}", holding the largest token accepted, in decimal.
	// No braces. Default DefaultPrefix.
	Prefix string
}

// Redis guards writes to a Redis used as a data store, through any go-redis
// client (not necessarily the lock's): each write is one Lua script that
// compares the token with the name's fence key, applies the write, and
// then raises the fence. A write that fails (a command error, a wrong
// type) leaves the fence unchanged; as everywhere in Redis, commands of
// the script that ran before the failure are not undone.
//
// On Redis Cluster (or a Ring) a script's keys must share a hash slot: put
// the name in braces in the keys it guards ("{orders}:42" under the name
// "orders"), as the fence key has it. Safe for concurrent use.
type Redis struct {
	c      goredis.Scripter
	prefix string
}

// NewRedis returns a guard over c, a *redis.Client, *redis.ClusterClient,
// *redis.Ring or any other go-redis Scripter. It makes no I/O. A nil c is an
// error matching dsync.ErrInvalid.
func NewRedis(c goredis.Scripter, opts *RedisOptions) (*Redis, error) {
	if c == nil {
		return nil, invalid("client", "nil")
	}
	g := &Redis{c: c, prefix: DefaultPrefix}
	if opts != nil && opts.Prefix != "" {
		g.prefix = opts.Prefix
	}
	if strings.ContainsAny(g.prefix, "{}") {
		return nil, invalid("prefix", "%q: a brace would change the fence key's hash slot", g.prefix)
	}
	return g, nil
}

// Key returns the fence key of name.
func (g *Redis) Key(name string) string { return g.prefix + "{" + name + "}" }

// Set sets key to value, with a time to live of ttl (0: none, like SET
// without PX; else at least a millisecond), if token is not stale for
// name.
func (g *Redis) Set(ctx context.Context, name string, token uint64, key string, value any, ttl time.Duration) error {
	if ttl < 0 || ttl > 0 && ttl < time.Millisecond {
		return invalid("ttl", "%v: want 0 (no expiry) or at least 1ms", ttl)
	}
	return g.Run(ctx, setScript, name, token, []string{key}, value, ttl.Milliseconds()).Err()
}

// Del deletes keys, if token is not stale for name, and returns how many
// existed.
func (g *Redis) Del(ctx context.Context, name string, token uint64, keys ...string) (int64, error) {
	if len(keys) == 0 {
		return 0, invalid("keys", "none")
	}
	return g.Run(ctx, delScript, name, token, keys).Int64()
}

// HSet sets fields of the hash at key, if token is not stale for name, and
// returns how many fields were added. fieldValues are field, value, field,
// value, ...
func (g *Redis) HSet(ctx context.Context, name string, token uint64, key string, fieldValues ...any) (int64, error) {
	if len(fieldValues) == 0 || len(fieldValues)%2 != 0 {
		return 0, invalid("fieldValues", "%d values: want pairs of field and value", len(fieldValues))
	}
	return g.Run(ctx, hsetScript, name, token, []string{key}, fieldValues...).Int64()
}

// Run runs s with keys and args, if token is not stale for name, and
// returns its reply as go-redis does. A stale token makes Cmd.Err match
// ErrStale, and s does not run. The fence is raised only if s returns
// without an error (a failed redis.call, error(), or redis.error_reply
// returned). Each of args is one argument (no flattening of slices or
// maps).
func (g *Redis) Run(ctx context.Context, s *Script, name string, token uint64, keys []string, args ...any) *goredis.Cmd {
	if s == nil {
		return errCmd(ctx, invalid("script", "nil"))
	}
	if err := checkWrite(name, token, math.MaxUint64); err != nil {
		return errCmd(ctx, err)
	}
	cmd := s.s.Run(ctx, g.c, append([]string{g.Key(name)}, keys...), append([]any{strconv.FormatUint(token, 10)}, args...)...)
	if err := cmd.Err(); err != nil {
		if cur, ok := strings.CutPrefix(err.Error(), staleReply+" "); ok {
			n, perr := strconv.ParseUint(cur, 10, 64)
			if perr != nil {
				cmd.SetErr(stale(name, token, math.MaxUint64))
			} else {
				cmd.SetErr(stale(name, token, n))
			}
		}
	}
	return cmd
}

// Token returns the largest token the fence of name has accepted, or 0 if
// it has accepted none.
func (g *Redis) Token(ctx context.Context, name string) (uint64, error) {
	if name == "" {
		return 0, invalid("name", "empty")
	}
	v, err := tokenScript.Run(ctx, g.c, []string{g.Key(name)}).Text()
	if err != nil {
		return 0, err
	}
	if v == "" {
		return 0, nil
	}
	return strconv.ParseUint(v, 10, 64)
}

func errCmd(ctx context.Context, err error) *goredis.Cmd {
	cmd := goredis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}

// Script is a Lua script that a Redis guard runs under its check: the
// body of a script as go-redis's NewScript takes it, seeing its own KEYS
// and ARGV (the guard's are out of its sight).
type Script struct{ s *goredis.Script }

// staleReply starts the error reply of a refused write.
const staleReply = "DSYNC_FENCE_STALE"

// NewScript returns src wrapped in the guard's check. src is the body of a
// Lua script, without a shebang line; it may return at any point.
func NewScript(src string) *Script {
	return &Script{s: goredis.NewScript(guardHead + src + guardTail)}
}

// The guard around a script's body. Tokens are compared as decimal strings
// (by length, then bytes), so that uint64 tokens beyond Lua's exact
// integers compare right. The body sees KEYS and ARGV without the fence
// key and the token, as the parameters of a function of its own.
const (
	guardHead = `local fence, token = KEYS[1], ARGV[1]
local cur = redis.call("GET", fence)
if cur and (#token < #cur or #token == #cur and token < cur) then
	return redis.error_reply("` + staleReply + ` " .. cur)
end
local keys, argv = {}, {}
for i = 2, #KEYS do keys[i - 1] = KEYS[i] end
for i = 2, #ARGV do argv[i - 1] = ARGV[i] end
local reply = (function(KEYS, ARGV)
`
	guardTail = `
end)(keys, argv)
if type(reply) == "table" and reply.err then
	return reply
end
redis.call("SET", fence, token)
return reply`
)

var (
	setScript = NewScript(`if ARGV[2] == "0" then
	return redis.call("SET", KEYS[1], ARGV[1])
end
return redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])`)
	delScript   = NewScript(`return redis.call("DEL", unpack(KEYS))`)
	hsetScript  = NewScript(`return redis.call("HSET", KEYS[1], unpack(ARGV))`)
	tokenScript = goredis.NewScript(`return redis.call("GET", KEYS[1]) or ""`)
)
