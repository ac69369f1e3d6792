package torture

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dsync-dev/dsync/fence"
	"github.com/dsync-dev/dsync/fence/etcdfence"
)

// Store is the fenced store: a resource kept on a store of its own, apart
// from the servers under test and never faulted, written through a fence
// guard, which accepts a write only if its fencing token is at least the
// largest it accepted for the resource; the store keeps every accepted
// write in order. It plays the part of the database a lock protects. The
// guard is package fence's Redis guard on a redis-server, or
// fence/etcdfence's on an etcd. Safe for concurrent use.
type Store struct {
	kind  string // "redis" or "etcd"
	redis *goredis.Client
	rg    *fence.Redis
	etcd  *clientv3.Client
	eg    *etcdfence.Guard
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

// EtcdStore is the prefix of the address of a store kept in etcd (see
// OpenStore).
const EtcdStore = "etcd://"

// OpenStore connects to the store at addr: host:port of a redis-server,
// written through fence.Redis, or "etcd://" and the comma-separated
// host:port of an etcd's members, written through etcdfence. It makes no
// I/O. Writes are never retried by the client: a write is sent once, so
// that an acknowledged write was applied exactly once.
func OpenStore(addr string) (*Store, error) {
	if eps, ok := strings.CutPrefix(addr, EtcdStore); ok {
		c, err := clientv3.New(clientv3.Config{
			Endpoints:   strings.Split(eps, ","),
			DialTimeout: 5 * time.Second,
			Logger:      zap.NewNop(),
		})
		if err != nil {
			return nil, fmt.Errorf("torture: the store at %s: %w", addr, err)
		}
		g, err := etcdfence.New(c, nil)
		if err != nil {
			return nil, errors.Join(err, c.Close())
		}
		return &Store{kind: "etcd", etcd: c, eg: g}, nil
	}
	c := goredis.NewClient(&goredis.Options{
		Addr:                  addr,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
	})
	g, err := fence.NewRedis(c, nil)
	if err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return &Store{kind: "redis", redis: c, rg: g}, nil
}

// Kind names the store's guard: "redis" or "etcd".
func (s *Store) Kind() string { return s.kind }

// listKey is the Redis list of resource's accepted writes, in the hash
// slot of the guard's fence key for it.
func listKey(resource string) string { return "writes:{" + resource + "}" }

// writesDir is the etcd prefix of resource's accepted writes, one key per
// write, in the order of their revisions.
func writesDir(resource string) string { return "writes/" + resource + "/" }

var appendScript = fence.NewScript(`return redis.call("RPUSH", KEYS[1], ARGV[1])`)

// Write offers w to resource through the guard, with fencing token
// token; with token 0 (fencing off, or the unguarded negative control) it
// writes without the guard, and the store accepts it. It reports whether
// the store accepted the write; on an error the outcome is unknown.
func (s *Store) Write(ctx context.Context, resource string, token uint64, w StoreWrite) (bool, error) {
	var err error
	switch {
	case s.kind == "etcd":
		// A key of its own per write, even for a worker that reuses an ID.
		op := clientv3.OpPut(fmt.Sprintf("%s%s/%d/%d", writesDir(resource), w.Writer, w.Seq, int64(w.Stamp)), w.entry())
		if token == 0 {
			_, err = s.etcd.Do(ctx, op)
		} else {
			_, err = s.eg.Txn(ctx, resource, token).Then(op).Commit()
		}
	case token == 0:
		err = s.redis.RPush(ctx, listKey(resource), w.entry()).Err()
	default:
		err = s.rg.Run(ctx, appendScript, resource, token, []string{listKey(resource)}, w.entry()).Err()
	}
	if errors.Is(err, fence.ErrStale) {
		return false, nil
	}
	return err == nil, err
}

// Writes returns the writes the store accepted for resource, in the order
// it accepted them.
func (s *Store) Writes(ctx context.Context, resource string) ([]StoreWrite, error) {
	var entries []string
	if s.kind == "etcd" {
		resp, err := s.etcd.Get(ctx, writesDir(resource), clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortAscend))
		if err != nil {
			return nil, err
		}
		for _, kv := range resp.Kvs {
			entries = append(entries, string(kv.Value))
		}
	} else {
		var err error
		if entries, err = s.redis.LRange(ctx, listKey(resource), 0, -1).Result(); err != nil {
			return nil, err
		}
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
func (s *Store) Close() error {
	if s.etcd != nil {
		return s.etcd.Close()
	}
	return s.redis.Close()
}
