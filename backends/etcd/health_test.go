package etcd_test

import (
	"context"
	"testing"
	"time"

	"github.com/dsync-dev/dsync/internal/testenv/etcdtest"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
)

// TestHealthFollowsQuorum: a 3-member cluster reports every member
// reachable, one of them the leader; with two members stopped the one left
// answers but knows no leader, and the two others are unreachable: the
// backend cannot serve.
func TestHealthFollowsQuorum(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, &etcdtest.Options{Members: 3})
	b := openBackend(t, c)
	ctx := testutil.Context(t)
	h, err := b.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leaders := 0
	for i, n := range h.Nodes {
		if !n.Reachable || n.Err != nil || n.Addr != c.Endpoint(i) {
			t.Errorf("member %d: %+v, want reachable at %s", i, n, c.Endpoint(i))
		}
		if n.Detail == "leader" {
			leaders++
		}
	}
	if !h.OK || len(h.Nodes) != 3 || leaders != 1 {
		t.Fatalf("Health of a healthy cluster = %+v, want OK, 3 members, 1 leader", h)
	}
	c.Stop(1)
	c.Stop(2)
	// The member left steps down once it hears from no majority.
	deadline := time.Now().Add(10 * time.Second)
	for {
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		h, err = b.Health(hctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if !h.OK || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // a clock to wait out: the election timeout
	}
	if h.OK || h.Reason == "" {
		t.Fatalf("Health with 2 of 3 members stopped = %+v, want not OK with a reason", h)
	}
	if h.Nodes[1].Reachable || h.Nodes[1].Err == nil || h.Nodes[2].Reachable {
		t.Errorf("stopped members reported reachable: %+v", h.Nodes)
	}
	t.Logf("with two members stopped: %s; member 0: %+v", h.Reason, h.Nodes[0])
}
