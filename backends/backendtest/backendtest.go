// Package backendtest is the conformance suite every dsync backend must
// pass. A backend's test file runs it in a few lines:
//
//	func TestConformance(t *testing.T) {
//		backendtest.Run(t, backendtest.Harness{NewBackend: ..., ShortTTL: 200 * time.Millisecond})
//	}
//
// The suite drives the backend through the portable packages and the
// driver SPI, against a real server: a bad-input table (names, values,
// TTLs, sizes, candidate IDs, ended contexts, use after release and after
// close, a server that does not answer), exclusivity, no re-entrancy,
// ownership of refresh and release, expiry, extension, fencing,
// cancellation, key isolation, a contention hammer, release wake-ups,
// waiters of separate clients served in order (where the driver says so),
// semaphores, elections, the health report, and acquisitions told apart
// as taken or unavailable on a service cut for real (Harness.Outages). What the layers above the
// driver do alike on every backend (the local waiting line, Do) is tested
// in their own packages, not here. CheckScheme and CheckBadURLs check a
// backend's URL scheme.
package backendtest

import (
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
)

// Harness tells the suite how to reach the backend under test.
type Harness struct {
	// NewBackend returns a new client of the same service each time it is
	// called, as another process would have: several backends returned by
	// it must contend for the same keys. The suite closes what it opens.
	NewBackend func(t testing.TB) *dsync.Backend
	// ShortTTL is the shortest TTL the suite uses in expiry tests; it must
	// be at least the backend's minimum (etcd: 2s) and long enough for a
	// few round trips under the race detector.
	ShortTTL time.Duration
	// URL opens the same service with dsync.Open in another process, for
	// the checks whose clients are worker processes (killed, paused,
	// contending across processes; see Main). Empty for a backend that
	// lives in one process (memory): those checks are then skipped.
	URL string
	// Outages are the ways to make a service of the backend unable to
	// decide, for real (see Outage), each on a service of its own: the
	// suite checks that an acquisition then fails as unavailable, and
	// as taken while the service is up. None for a backend that lives in
	// one process (memory): those checks are then skipped.
	Outages []Outage
}

// Run runs the conformance suite.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.NewBackend == nil || h.ShortTTL <= 0 {
		t.Fatal("backendtest: Harness needs NewBackend and a positive ShortTTL")
	}
	s := &suite{h: h}
	runChecks(t, []check{
		{"BadInput", s.testBadInput},
		{"Exclusive", s.testExclusive},
		{"PlainContention", s.testPlainContention},
		{"NotReentrant", s.testNotReentrant},
		{"OnlyOwnerRefreshesAndReleases", s.testOnlyOwner},
		{"ExpiryFrees", s.testExpiryFrees},
		{"ExtendKeepsHold", s.testExtendKeepsHold},
		{"AutoExtendBounded", s.testAutoExtendBounded},
		{"ReleaseAfterExpiry", s.testReleaseAfterExpiry},
		{"FencesIncrease", s.testFencesIncrease},
		{"CancelLeavesNothingHeld", s.testCancel},
		{"KeyIsolation", s.testKeyIsolation},
		{"HolderValue", s.testHolderValue},
		{"Hammer", s.testHammer},
		{"ServedInOrder", s.testServedInOrder},
		{"HandOver", s.testHandOver},
		{"ReleaseWakesWaiter", s.testWake},
		{"Health", s.testHealth},
	})
	t.Run("Semaphore", s.runSemaphores)
	t.Run("Election", s.runElections)
	t.Run("Unavailable", s.runOutages)
}

// check is one named check of the suite.
type check struct {
	name string
	fn   func(*testing.T)
}

// runChecks runs each check as a subtest.
func runChecks(t *testing.T, checks []check) {
	for _, c := range checks {
		t.Run(c.name, c.fn)
	}
}

type suite struct {
	h Harness
}

// backend opens a backend closed at the end of the test.
func (s *suite) backend(t testing.TB) *dsync.Backend {
	t.Helper()
	b := s.h.NewBackend(t)
	t.Cleanup(func() { _ = b.Close() })
	return b
}
