package memory_test

import (
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends/backendtest"
	"github.com/dsync-dev/dsync/backends/memory"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
)

func TestConformance(t *testing.T) {
	store := memory.NewStore(nil)
	backendtest.Run(t, backendtest.Harness{
		NewBackend: func(t testing.TB) *dsync.Backend {
			return testutil.NewBackend(t, memory.New(&memory.Options{Store: store}))
		},
		ShortTTL: 150 * time.Millisecond,
	})
}
