package backendtest

import (
	"testing"

	"github.com/dsync-dev/dsync/internal/testenv/leakcheck"
	"github.com/dsync-dev/dsync/internal/testenv/proc"
)

// Main is the TestMain of a package that runs the conformance suite: in a
// worker process (see internal/testenv/proc) it runs the worker and exits;
// otherwise it runs the tests with the goroutine-leak check of
// internal/testenv/leakcheck.
//
//	func TestMain(m *testing.M) { backendtest.Main(m) }
func Main(m *testing.M) {
	proc.RunIfWorker()
	leakcheck.VerifyTestMain(m)
}

// Short names for the worker machinery of internal/testenv/proc.
type (
	worker     = proc.Worker
	event      = proc.Event
	workerArgs = proc.Args
)

var (
	registerWorker = proc.Register
	monotonic      = proc.Monotonic
)

// startWorker starts a worker process of the given role on the backend at
// Harness.URL. Callers call s.needCrossProcess first.
func (s *suite) startWorker(t testing.TB, role string, args map[string]string) *worker {
	t.Helper()
	if s.h.URL == "" {
		t.Fatal("backendtest: startWorker needs Harness.URL")
	}
	return proc.Start(t, role, s.h.URL, args)
}

// needCrossProcess skips the test, saying why, unless the backend can be
// shared between processes (the harness has a URL).
func (s *suite) needCrossProcess(t testing.TB) {
	t.Helper()
	if s.h.URL == "" {
		t.Skip("the harness has no URL, so the backend cannot be shared with other processes (memory lives in one process)")
	}
}
