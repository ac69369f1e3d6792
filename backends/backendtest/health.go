package backendtest

import (
	"context"
	"errors"
	"testing"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
)

// testHealth: a backend whose servers are all up reports OK, with every
// node reachable and none quarantined; Health takes no hold; a done
// context and a closed backend are errors, not reports.
func (s *suite) testHealth(t *testing.T) {
	ctx := testutil.Context(t)
	b := s.backend(t)
	h, err := b.Health(ctx)
	if err != nil {
		t.Fatalf("Health: %v", err)
	}
	if !h.OK || h.Reason != "" || len(h.Nodes) == 0 {
		t.Fatalf("Health of a backend whose servers are up = %+v, want OK with its nodes", h)
	}
	for i, n := range h.Nodes {
		if !n.Reachable || n.Err != nil || !n.QuarantinedUntil.IsZero() || n.Addr == "" {
			t.Errorf("node %d: %+v, want reachable, named, not quarantined", i, n)
		}
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.Health(done); !errors.Is(err, context.Canceled) {
		t.Errorf("Health on a done context: %v, want context.Canceled", err)
	}
	_ = b.Close()
	if _, err := b.Health(ctx); !errors.Is(err, dsync.ErrClosed) {
		t.Errorf("Health after Close: %v, want ErrClosed", err)
	}
}
