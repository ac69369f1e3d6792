package fence_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync"
	_ "github.com/dsync-dev/dsync/backends/redis"
	"github.com/dsync-dev/dsync/fence"
	"github.com/dsync-dev/dsync/internal/testenv/fencetest"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
)

// redisStore is the suite's adapter of the Redis guard: a name's value and
// log are keys tagged with the name, written by one guarded script.
type redisStore struct {
	g *fence.Redis
	c *goredis.Client
}

var (
	writeScript = fence.NewScript(`redis.call("SET", KEYS[1], ARGV[1])
redis.call("RPUSH", KEYS[2], ARGV[2])
return 1`)
	// failScript fails on its first command, before it writes anything.
	failScript = fence.NewScript(`redis.call("NO-SUCH-COMMAND")
redis.call("SET", KEYS[1], "written")
return 1`)
)

func valueKey(name string) string { return "{" + name + "}:value" }
func logKey(name string) string   { return "{" + name + "}:log" }

func (s *redisStore) Write(ctx context.Context, name string, token uint64, value string) error {
	return s.g.Run(ctx, writeScript, name, token, []string{valueKey(name), logKey(name)}, value, token).Err()
}

func (s *redisStore) WriteThenFail(ctx context.Context, name string, token uint64) error {
	return s.g.Run(ctx, failScript, name, token, []string{valueKey(name)}).Err()
}

func (s *redisStore) Read(ctx context.Context, name string) (string, []uint64, error) {
	v, err := s.c.Get(ctx, valueKey(name)).Result()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return "", nil, err
	}
	entries, err := s.c.LRange(ctx, logKey(name), 0, -1).Result()
	if err != nil {
		return "", nil, err
	}
	var log []uint64
	for _, e := range entries {
		n, err := strconv.ParseUint(e, 10, 64)
		if err != nil {
			return "", nil, err
		}
		log = append(log, n)
	}
	return v, log, nil
}

func (s *redisStore) Fence(ctx context.Context, name string) (uint64, error) {
	return s.g.Token(ctx, name)
}

func (s *redisStore) MaxToken() uint64 { return math.MaxUint64 }

func newRedisGuard(t testing.TB, c goredis.Scripter) *fence.Redis {
	t.Helper()
	g, err := fence.NewRedis(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestRedis runs the guards' suite on a real redis-server.
func TestRedis(t *testing.T) {
	srv := redistest.Start(t, nil)
	fencetest.Run(t, func(t *testing.T) fencetest.Store {
		c := srv.NewClient(t)
		if err := c.FlushAll(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		return &redisStore{g: newRedisGuard(t, c), c: c}
	})
}

// TestRedisLockTokens: the guard orders the tokens of a real single-Redis
// lock: the holder whose lease ran out is refused after its successor
// wrote.
func TestRedisLockTokens(t *testing.T) {
	srv := redistest.Start(t, nil)
	b, err := dsync.Open(t.Context(), srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	c := srv.NewClient(t)
	fencetest.LateHolder(t, &redisStore{g: newRedisGuard(t, c), c: c}, b, 200*time.Millisecond)
}

// TestRedisCommands: SET, DEL and HSET write under the guard, and a stale
// token leaves their keys as they were.
func TestRedisCommands(t *testing.T) {
	ctx := testutil.Context(t)
	c := redistest.Start(t, nil).NewClient(t)
	g := newRedisGuard(t, c)

	if err := g.Set(ctx, "doc", 7, "{doc}:body", "v7", time.Minute); err != nil {
		t.Fatal(err)
	}
	if ttl := c.PTTL(ctx, "{doc}:body").Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("PTTL after Set with a TTL of 1m: %v", ttl)
	}
	if err := g.Set(ctx, "doc", 8, "{doc}:title", "t8", 0); err != nil {
		t.Fatal(err)
	}
	if ttl := c.PTTL(ctx, "{doc}:title").Val(); ttl != -1 {
		t.Errorf("PTTL after Set without a TTL: %v, want -1 (none)", ttl)
	}
	if n, err := g.HSet(ctx, "doc", 8, "{doc}:meta", "author", "w8", "rev", 8); err != nil || n != 2 {
		t.Fatalf("HSet: %d, %v; want 2 fields added", n, err)
	}

	// The holder of token 7 wakes up late: every write of its is refused.
	wantStale := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, fence.ErrStale) {
			t.Errorf("%s with a stale token: %v, want ErrStale", what, err)
		}
	}
	wantStale("Set", g.Set(ctx, "doc", 7, "{doc}:body", "late", 0))
	_, err := g.HSet(ctx, "doc", 7, "{doc}:meta", "author", "late")
	wantStale("HSet", err)
	_, err = g.Del(ctx, "doc", 7, "{doc}:body", "{doc}:title")
	wantStale("Del", err)
	if v := c.Get(ctx, "{doc}:body").Val(); v != "v7" {
		t.Errorf("body %q after stale writes, want v7", v)
	}
	if m := c.HGetAll(ctx, "{doc}:meta").Val(); m["author"] != "w8" || m["rev"] != "8" {
		t.Errorf("meta %v after a stale HSet", m)
	}

	if n, err := g.Del(ctx, "doc", 9, "{doc}:body", "{doc}:title", "{doc}:none"); err != nil || n != 2 {
		t.Fatalf("Del: %d, %v; want 2 deleted", n, err)
	}
	if tok, err := g.Token(ctx, "doc"); err != nil || tok != 9 {
		t.Errorf("Token: %d, %v; want 9", tok, err)
	}
}

// TestRedisScript: a script under the guard sees its own KEYS and ARGV,
// its reply comes back as it is, and the fence is raised only when it
// returns without an error: a failed command, error() or an error reply
// leave it unchanged (the writes before the failure stay, as in any Redis
// script).
func TestRedisScript(t *testing.T) {
	ctx := testutil.Context(t)
	c := redistest.Start(t, nil).NewClient(t)
	g := newRedisGuard(t, c)

	view := fence.NewScript(`return {#KEYS, #ARGV, KEYS[1], ARGV[1], ARGV[2]}`)
	got, err := g.Run(ctx, view, "s", 3, []string{"{s}:k"}, "a", 2).Slice()
	if err != nil {
		t.Fatal(err)
	}
	if want := []any{int64(1), int64(2), "{s}:k", "a", "2"}; !equalSlices(got, want) {
		t.Errorf("the script saw %v, want %v", got, want)
	}

	for _, src := range []string{
		`redis.call("SET", KEYS[1], "partial") return redis.call("INCR", KEYS[1])`,
		`redis.call("SET", KEYS[1], "partial") error("boom")`,
		`redis.call("SET", KEYS[1], "partial") return redis.error_reply("NOPE refused by the script")`,
	} {
		err := g.Run(ctx, fence.NewScript(src), "s", 5, []string{"{s}:k"}).Err()
		if err == nil || errors.Is(err, fence.ErrStale) {
			t.Errorf("script %q: %v, want its error", src, err)
		}
		if tok, _ := g.Token(ctx, "s"); tok != 3 {
			t.Errorf("after the failed script %q the fence is %d, want 3", src, tok)
		}
		if v := c.Get(ctx, "{s}:k").Val(); v != "partial" {
			t.Errorf("after the failed script %q the key holds %q: the write before the failure should stay", src, v)
		}
	}
	// A stale token does not run the script at all.
	c.Set(ctx, "{s}:k", "before", 0)
	if err := g.Run(ctx, fence.NewScript(`redis.call("SET", KEYS[1], "ran")`), "s", 2, []string{"{s}:k"}).Err(); !errors.Is(err, fence.ErrStale) {
		t.Errorf("stale run: %v", err)
	}
	if v := c.Get(ctx, "{s}:k").Val(); v != "before" {
		t.Errorf("a stale script ran: key holds %q", v)
	}
}

func equalSlices(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRedisBadInput: every bad argument is an error matching
// dsync.ErrInvalid, before any I/O (the client points nowhere).
func TestRedisBadInput(t *testing.T) {
	ctx := testutil.Context(t)
	if _, err := fence.NewRedis(nil, nil); !errors.Is(err, dsync.ErrInvalid) {
		t.Errorf("NewRedis(nil): %v", err)
	}
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	if _, err := fence.NewRedis(c, &fence.RedisOptions{Prefix: "a{b"}); !errors.Is(err, dsync.ErrInvalid) {
		t.Errorf("a prefix with a brace: %v", err)
	}
	g := newRedisGuard(t, c)
	for what, err := range map[string]error{
		"empty name":     g.Set(ctx, "", 1, "k", "v", 0),
		"token 0":        g.Set(ctx, "n", 0, "k", "v", 0),
		"negative ttl":   g.Set(ctx, "n", 1, "k", "v", -time.Second),
		"sub-ms ttl":     g.Set(ctx, "n", 1, "k", "v", time.Microsecond),
		"no keys to Del": second(g.Del(ctx, "n", 1)),
		"odd HSet":       second(g.HSet(ctx, "n", 1, "k", "f")),
		"no HSet fields": second(g.HSet(ctx, "n", 1, "k")),
		"nil script":     g.Run(ctx, nil, "n", 1, nil).Err(),
		"Token of empty": second(g.Token(ctx, "")),
	} {
		if !errors.Is(err, dsync.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", what, err)
		} else if !strings.HasPrefix(err.Error(), "dsync: fence: invalid ") {
			t.Errorf("%s: %q does not say it is invalid input to the guard", what, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }

// TestRedisCluster: on a Redis Cluster (of one node serving every slot,
// which refuses a script on keys of two slots), keys tagged with the name
// share the fence key's slot, for names that bend the hash-tag rules too.
func TestRedisCluster(t *testing.T) {
	srv := redistest.Start(t, &redistest.Options{ExtraArgs: []string{
		"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
	}})
	ctx := testutil.Context(t)
	admin := srv.NewClient(t)
	if err := admin.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatalf("CLUSTER ADDSLOTSRANGE: %v", err)
	}
	testutil.Eventually(t, 10*time.Second, "the one-node cluster to serve every slot", func() bool {
		info, err := admin.ClusterInfo(ctx).Result()
		return err == nil && strings.Contains(info, "cluster_state:ok")
	})
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{srv.Addr()}})
	t.Cleanup(func() { _ = cc.Close() })
	g := newRedisGuard(t, cc)
	for _, name := range []string{"orders", "a}b", "{x}", "x{y}z", "with space", "ünïcode"} {
		if err := g.Set(ctx, name, 2, "{"+name+"}:v", "x", 0); err != nil {
			t.Errorf("Set under %q: %v", name, err)
		}
		if err := g.Set(ctx, name, 1, "{"+name+"}:v", "x", 0); !errors.Is(err, fence.ErrStale) {
			t.Errorf("stale Set under %q: %v", name, err)
		}
	}
	if err := g.Set(ctx, "orders", 3, "elsewhere", "x", 0); err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Errorf("a key outside the name's slot: %v, want CROSSSLOT", err)
	}
}

// BenchmarkRedisGuard sets a key through the guard and with a plain SET,
// on one redis-server: the guard's cost is guarded/plain.
func BenchmarkRedisGuard(b *testing.B) {
	c := redistest.Start(b, nil).NewClient(b)
	g := newRedisGuard(b, c)
	ctx := b.Context()
	var token uint64 // grows across the runs of the sub-benchmark
	b.Run("guarded", func(b *testing.B) {
		for range b.N {
			token++
			if err := g.Set(ctx, "bench", token, "{bench}:v", "value", 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("plain", func(b *testing.B) {
		for range b.N {
			if err := c.Set(ctx, "{bench}:v", "value", 0).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
