package memory_test

import (
	"testing"
	"time"

	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/backends/memory"
	"github.com/dsync-dev/dsync/internal/testenv/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// epoch is the start time of every manual clock in these tests.
var epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// newManual returns a driver on a fresh store driven by a manual clock.
func newManual(t *testing.T) (*memory.Driver, *memory.ManualClock) {
	t.Helper()
	clk := memory.NewManualClock(epoch)
	d := memory.NewDriver(&memory.Options{Store: memory.NewStore(clk)})
	t.Cleanup(func() { _ = d.Close() })
	return d, clk
}

// req is a lock request on key for token with a one-second TTL and fencing.
func req(key, token string) backends.Request {
	return backends.Request{Key: key, Token: token, TTL: time.Second, Fence: true}
}
