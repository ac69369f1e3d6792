package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/telemetry"
)

// Health implements backends.Driver: a PING to every node in parallel,
// each bounded by the per-node timeout and ctx, with each node's restart
// quarantine and persistence (read again, in the same round trip: a
// reading can withdraw a node's durability, never grant it). It is OK when
// a quorum of nodes answer and are not quarantined, and Degraded with
// fewer than 3 nodes. A node that connects anew meanwhile reports its
// restart, as for any request. After Close it returns ErrClosed.
func (d *driver) Health(ctx context.Context) (backends.Health, error) {
	if d.closed.Load() {
		return backends.Health{}, backends.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return backends.Health{}, err
	}
	nt, _ := d.timeoutFor(d.maxTTL)
	rtts, _, errs := fanOutValues(d, ctx, nt, everyServer, telemetry.NodePing, func(ctx context.Context, n *node) (time.Duration, error) {
		start := time.Now()
		var ping *goredis.StatusCmd
		var info *goredis.StringCmd
		var fsync, noRewrite *goredis.MapStringStringCmd
		_, _ = n.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			ping = p.Ping(ctx)
			info, fsync, noRewrite = queuePersistence(ctx, p)
			return nil
		})
		rtt := time.Since(start)
		if err := ping.Err(); err != nil {
			return rtt, err
		}
		n.reread(readPersistence(info, fsync, noRewrite))
		return rtt, nil
	})
	failed := make([]error, len(d.nodes))
	for _, e := range errs.WrappedErrors() {
		var ne *NodeError
		if errors.As(e, &ne) {
			failed[ne.Index] = ne.Err
		}
	}
	h := backends.Health{Nodes: make([]backends.NodeHealth, len(d.nodes))}
	now := time.Now()
	voting := 0
	for i, n := range d.nodes {
		nh := backends.NodeHealth{Addr: n.addr, Err: failed[i]}
		if failed[i] == nil {
			nh.Reachable, nh.Latency = true, rtts[i]
		}
		pers := n.persistence()
		nh.Durable = pers.durable
		switch {
		case pers.durable:
			nh.Detail = "persists every write (" + pers.what + "): a restart votes at once"
		case pers.what != "":
			nh.Detail = "restarts quarantined (" + pers.what + ")"
		}
		if until := n.quarantinedUntil(); until.After(now) {
			nh.QuarantinedUntil = until
			nh.Detail = "quarantined after a restart"
		}
		if nh.Reachable && nh.QuarantinedUntil.IsZero() {
			voting++
		}
		h.Nodes[i] = nh
	}
	h.OK = voting >= d.quorum
	if !h.OK {
		h.Reason = fmt.Sprintf("%d of %d nodes answer and vote, %d needed", voting, len(d.nodes), d.quorum)
	}
	h.Degraded = fewNodes(len(d.nodes))
	return h, nil
}

// fewNodes says why n nodes are too few, or "" when they are not: below
// 3, one node down leaves no quorum.
func fewNodes(n int) string {
	if n >= 3 {
		return ""
	}
	return fmt.Sprintf("%d node(s), fewer than 3: the quorum of %d tolerates no node down", n, n/2+1)
}
