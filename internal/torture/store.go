package torture

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// fencedWrite accepts a write to a resource only if its fencing token is at
// least the largest token accepted for the resource so far, and appends
// every accepted write to the resource's list. Tokens are compared as
// decimal strings (by length, then bytes), so that 64-bit tokens beyond
// Lua's exact integers compare right.
//
// KEYS[1] the resource's largest accepted token, KEYS[2] its list;
// ARGV[1] the token, ARGV[2] the list entry. Returns 1 if accepted, else 0.
var fencedWrite = goredis.NewScript(`local function less(a, b)
	if #a ~= #b then return #a < #b end
	return a < b
end
local cur = redis.call("GET", KEYS[1])
if cur and less(ARGV[1], cur) then
	return 0
end
redis.call("SET", KEYS[1], ARGV[1])
redis.call("RPUSH", KEYS[2], ARGV[2])
return 1`)

// Store is the fenced store: a resource kept on a redis-server of its own,
// apart from the servers under test and never faulted, that accepts a write
// only if its fencing token is at least the largest it accepted for the
// resource, and keeps every accepted write in order. It plays the part of
// the database a lock protects. Safe for concurrent use.
type Store struct {
	c *goredis.Client
}

// StoreWrite is one accepted write, as the store keeps it.
type StoreWrite struct {
	Writer string        // the worker's ID
	Seq    int           // the write's number among the writer's writes, from 1
	Token  uint64        // the fencing token the write carried
	Stamp  time.Duration // CLOCK_MONOTONIC when the writer sent it
}

func (w StoreWrite) entry() string {
	return fmt.Sprintf("%s %d %d %d", w.Writer, w.Seq, w.Token, int64(w.Stamp))
}

func parseEntry(s string) (StoreWrite, error) {
	f := strings.Fields(s)
	if len(f) != 4 {
		return StoreWrite{}, fmt.Errorf("torture: store entry %q: want 4 fields", s)
	}
	seq, err1 := strconv.Atoi(f[1])
	tok, err2 := strconv.ParseUint(f[2], 10, 64)
	st, err3 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return StoreWrite{}, fmt.Errorf("torture: store entry %q: malformed", s)
	}
	return StoreWrite{Writer: f[0], Seq: seq, Token: tok, Stamp: time.Duration(st)}, nil
}

// OpenStore connects to the store's redis-server at addr (host:port). It
// makes no I/O. Commands are never retried by the client: a write is sent
// once, so that an acknowledged write was applied exactly once.
func OpenStore(addr string) *Store {
	return &Store{c: goredis.NewClient(&goredis.Options{
		Addr:                  addr,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
	})}
}

func tokenKey(resource string) string { return "fence:{" + resource + "}" }
func listKey(resource string) string  { return "writes:{" + resource + "}" }

// Write offers w to resource with fencing token fence (0 for a write that
// is only logged: 0 is never below the largest token of a resource that
// only ever sees 0). It reports whether the store accepted it; on an
// error the outcome is unknown.
func (s *Store) Write(ctx context.Context, resource string, fence uint64, w StoreWrite) (bool, error) {
	n, err := fencedWrite.Run(ctx, s.c, []string{tokenKey(resource), listKey(resource)},
		strconv.FormatUint(fence, 10), w.entry()).Int()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}

// Writes returns the writes the store accepted for resource, in the order
// it accepted them.
func (s *Store) Writes(ctx context.Context, resource string) ([]StoreWrite, error) {
	entries, err := s.c.LRange(ctx, listKey(resource), 0, -1).Result()
	if err != nil {
		return nil, err
	}
	out := make([]StoreWrite, 0, len(entries))
	for _, e := range entries {
		w, err := parseEntry(e)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, nil
}

// Close closes the connections.
func (s *Store) Close() error { return s.c.Close() }
