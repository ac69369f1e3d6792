package redis

import (
	"context"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync/backends"
)

// Health implements backends.Driver: one PING, bounded by ctx, reported
// under the client's address ("cluster" for a Cluster client). A server
// that does not answer makes the report not OK; after Close it returns
// ErrClosed.
func (d *driver) Health(ctx context.Context) (backends.Health, error) {
	if d.closed.Load() {
		return backends.Health{}, backends.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return backends.Health{}, err
	}
	n := backends.NodeHealth{Addr: addrOf(d.node.Client())}
	start := time.Now()
	err := d.node.Client().Ping(ctx).Err()
	if err != nil {
		n.Err = backends.MarkClosed(d.closed.Load(), err)
		return backends.Health{Reason: "the server did not answer PING", Nodes: []backends.NodeHealth{n}}, nil
	}
	n.Reachable, n.Latency = true, time.Since(start)
	return backends.Health{OK: true, Nodes: []backends.NodeHealth{n}}, nil
}

// addrOf names the server a client talks to, without credentials.
func addrOf(c goredis.UniversalClient) string {
	switch c := c.(type) {
	case *goredis.Client:
		return c.Options().Addr
	case *goredis.ClusterClient:
		return "cluster"
	}
	return "redis"
}
