package etcd

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/dsync-dev/dsync/backends"
)

// Health implements backends.Driver: the status of each of the client's
// endpoints (etcd's Maintenance Status, on a connection of its own to that
// member), in parallel, bounded by ctx. It is OK when a member answers,
// knows a leader and reports no error (an alarm such as NOSPACE); each
// member's Detail says "leader" or "follower", and its errors. After
// Close it returns ErrClosed.
func (d *driver) Health(ctx context.Context) (backends.Health, error) {
	if d.closed.Load() {
		return backends.Health{}, backends.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return backends.Health{}, err
	}
	eps := d.client.Endpoints()
	nodes := make([]backends.NodeHealth, len(eps))
	serving := make([]bool, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Go(func() {
			n := backends.NodeHealth{Addr: ep}
			start := time.Now()
			st, err := d.client.Status(ctx, ep)
			if err != nil {
				n.Err = d.wrap(err)
				nodes[i] = n
				return
			}
			n.Reachable, n.Latency = true, time.Since(start)
			switch {
			case st.Leader == 0:
				n.Detail = "no leader"
			case st.Header != nil && st.Leader == st.Header.MemberId:
				n.Detail = "leader"
			default:
				n.Detail = "follower"
			}
			if len(st.Errors) > 0 {
				n.Detail += "; " + strings.Join(st.Errors, "; ")
			}
			serving[i] = st.Leader != 0 && len(st.Errors) == 0
			nodes[i] = n
		})
	}
	wg.Wait()
	h := backends.Health{Nodes: nodes, Reason: "no member answered with a leader and no alarm"}
	for _, ok := range serving {
		if ok {
			h.OK, h.Reason = true, ""
		}
	}
	return h, nil
}
