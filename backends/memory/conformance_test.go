package memory_test

import (
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends/backendtest"
	"github.com/dsync-dev/dsync/backends/memory"
)

func TestConformance(t *testing.T) {
	store := memory.NewStore(nil)
	backendtest.Run(t, backendtest.Harness{
		NewBackend: func(t testing.TB) *dsync.Backend {
			b, err := memory.New(&memory.Options{Store: store})
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		ShortTTL: 150 * time.Millisecond,
	})
}
