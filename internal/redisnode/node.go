// Package redisnode runs dsync's holds on one Redis server: the Lua scripts
// and the per-node operations that backends/redis offers on one server and
// redlock composes over N masters. The key layout and the reasoning behind
// the scripts are in docs/redis.md and docs/redlock.md.
//
// A Node makes one attempt per call and returns the client's errors as
// they are; it keeps no state but its client and its key prefix, and checks the shape of
// keys and tokens, not the caller's policy (TTL bounds, limits, closed
// drivers).
package redisnode

import (
	"fmt"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync/backends"
)

// The largest semaphores, one per design.
const (
	// MaxSetSize bounds the single-server semaphore, a sorted set of
	// holders (backends/redis): one script prunes its expired holders, and
	// the server serves nobody else meanwhile (docs/performance.md gives
	// the time for a full set).
	MaxSetSize = 4096
	// MaxSlots bounds the Redlock semaphore, one lock per slot (redlock):
	// an attempt on a full one makes a round per slot, and the slot's
	// number is the low bits of its fencing token.
	MaxSlots = 64
)

// DefaultPrefix is the key prefix of a Node made with an empty one.
const DefaultPrefix = "dsync:"

// Node is one Redis server (a plain, Sentinel or Cluster client) under one
// key prefix. It is safe for concurrent use.
type Node struct {
	client  goredis.UniversalClient
	prefix  string
	cluster bool // client is a *goredis.ClusterClient: keys must not start with "}"
}

// New returns a Node over client whose keys start with prefix
// (DefaultPrefix when empty). It makes no I/O. A *goredis.Ring is an
// *InvalidError (see ringRefusal).
func New(client goredis.UniversalClient, prefix string) (*Node, error) {
	if client == nil {
		return nil, backends.Invalid("client", "nil")
	}
	if _, ring := client.(*goredis.Ring); ring {
		return nil, backends.Invalid("client", "%s", ringRefusal)
	}
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if err := CheckPrefix(prefix); err != nil {
		return nil, backends.Invalid("prefix", "%s", err)
	}
	_, cluster := client.(*goredis.ClusterClient)
	return &Node{client: client, prefix: prefix, cluster: cluster}, nil
}

// ringRefusal says why a Ring cannot carry dsync's holds: it spreads keys
// over its shards by hash, and when a shard misses its heartbeats the Ring
// drops it and sends its keys to the others. A lock held on the dropped
// shard is then free on the shard its key moved to, whose fence counter for
// the key's slot (shared with other keys there) may be behind: two holders,
// and tokens that go backwards. No one server orders a key's holds.
const ringRefusal = "a *redis.Ring spreads keys over shards by hash and moves them to other shards when one misses heartbeats, " +
	"where a held lock is free and the fence counter may be behind; " +
	"use a plain, Sentinel or Cluster client, or package redlock for several independent masters"

// CheckPrefix refuses a key prefix that would break the Cluster hash tag.
func CheckPrefix(p string) error {
	if strings.ContainsAny(p, "{}") {
		return fmt.Errorf("%q contains { or }, which would break the Redis Cluster hash tag", p)
	}
	return nil
}

// Target names one hold of a key: the key's own (a lock, or a single
// server's semaphore) when Slots is 0, else slot Slot of the Redlock
// semaphore of Slots slots on the key.
type Target struct {
	Key         string
	Slot, Slots int
}

// limit is the limit a hold of t asks for: 1 for a lock.
func (t Target) limit() int { return max(t.Slots, 1) }

// keys returns the Redis keys of t's hold and of its key's own hold, P{K}
// (the same for a key's own hold), after checking t.
func (n *Node) keys(t Target) (hold, own string, err error) {
	own, err = n.ownKey(t.Key)
	if err != nil {
		return "", "", err
	}
	if t.Slots == 0 {
		return own, own, nil
	}
	if t.Slots < 2 || t.Slots > MaxSlots || t.Slot < 0 || t.Slot >= t.Slots {
		return "", "", backends.Invalid("slot", "%d of %d: a slot is 0..N-1 of N in 2..%d", t.Slot, t.Slots, MaxSlots)
	}
	return own + ":slot:" + strconv.Itoa(t.Slot), own, nil
}

// ownKey returns P{K}, the Redis key of key's own hold.
func (n *Node) ownKey(key string) (string, error) {
	if key == "" {
		return "", backends.Invalid("key", "empty")
	}
	// A key starting with "}" makes an empty hash tag, so Cluster would
	// hash the whole name and scatter the hold and its counter across slots.
	if n.cluster && key[0] == '}' {
		return "", backends.Invalid("key", "%q starts with }, which Redis Cluster hash tags cannot keep in one slot", key)
	}
	return n.prefix + "{" + key + "}", nil
}

// Channel returns the pub/sub channel of key's release notices.
func (n *Node) Channel(key string) (string, error) {
	own, err := n.ownKey(key)
	return own + ":released", err
}

// Client returns the client the node runs on.
func (n *Node) Client() goredis.UniversalClient { return n.client }

func checkToken(token string) error {
	if token == "" {
		return backends.Invalid("token", "empty")
	}
	if strings.ContainsAny(token, "\t\n") {
		return backends.Invalid("token", "contains a tab or a newline, which separate a hold's token from its fencing token and value")
	}
	if token[0] == '\r' {
		return backends.Invalid("token", "starts with a carriage return, which marks a lock kept for a waiter")
	}
	return nil
}

// LimitError is a node's refusal of a hold because the key's live holds
// there have another limit. It is one node's view: Redlock decides a
// mismatch only when a majority of nodes report one, and backends/redis
// turns it into backends.LimitMismatch.
type LimitError struct {
	Key string
	// Limit is the limit asked for (1 for a lock).
	Limit int
	// Holders is the limit of the key's live holds (1 for a lock).
	Holders int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("redis: %q is held with limit %d, not %d", e.Key, e.Holders, e.Limit)
}
