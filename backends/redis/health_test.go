package redis_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
)

// TestHealthPausedAndKilled: a server that answers is OK with its PING's
// latency; paused (SIGSTOP) it is not, once ctx ends; killed it is not,
// at once; the report names the server, never its password.
func TestHealthPausedAndKilled(t *testing.T) {
	const password = "pw-of-health"
	srv := redistest.Start(t, &redistest.Options{Password: password})
	ctx := testutil.Context(t)
	b, err := dsync.Open(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	h, err := b.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !h.OK || len(h.Nodes) != 1 || h.Nodes[0].Addr != srv.Addr() || !h.Nodes[0].Reachable || h.Nodes[0].Latency <= 0 {
		t.Fatalf("Health of a live server = %+v", h)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	start := time.Now()
	h, err = b.Health(pctx)
	cancel()
	if err != nil || h.OK || h.Nodes[0].Reachable || !isTimeout(h.Nodes[0].Err) {
		t.Errorf("Health of a paused server = %+v, %v; want not OK, a timeout as the node's error", h, err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Health of a paused server took %v with a 200ms deadline", took)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	h, err = b.Health(ctx)
	if err != nil || h.OK || h.Nodes[0].Err == nil || h.Reason == "" {
		t.Errorf("Health of a killed server = %+v, %v; want not OK with the node's error", h, err)
	}
	for _, n := range h.Nodes {
		if n.Err != nil && strings.Contains(n.Err.Error(), password) {
			t.Errorf("a node error shows the password: %v", n.Err)
		}
	}
}

// isTimeout reports the error of a call cut short by its deadline: the
// context's, or the socket's (go-redis applies the deadline to the
// connection).
func isTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)
}
