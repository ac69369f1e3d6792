package main

import (
	"strings"
	"testing"

	"github.com/dsync-dev/dsync/internal/testenv/redistest"
)

// testUnavailable: every subcommand that acquires exits 6 when the backend
// cannot decide, with --try, with --timeout and while waiting, on real
// servers: masters in their restart quarantine, a server stopped while
// dsync waits, a server stopped before dsync starts. A lock held by
// another still exits 3 (exit-codes).
func (e *e2e) testUnavailable(t *testing.T) {
	t.Run("quarantined-masters", func(t *testing.T) {
		// Masters started just now are quarantined for max_ttl (1m): they
		// answer, so the open succeeds, but no attempt can be decided.
		var addrs []string
		for _, s := range redistest.StartN(t, 3, nil) {
			addrs = append(addrs, s.Addr())
		}
		url := "redlock://" + strings.Join(addrs, ",")
		for _, args := range [][]string{
			{"lock", "e2e-quarantine", "--try"},
			{"lock", "e2e-quarantine", "--timeout", "500ms"},
			{"sem", "e2e-quarantine-sem", "--size", "2", "--try"},
			{"sem", "e2e-quarantine-sem", "--size", "2", "--timeout", "500ms"},
			{"elect", "e2e-quarantine-elect", "--timeout", "500ms"},
		} {
			e.wantUnavailable(t, url, args, "quorum unreachable")
		}
	})

	t.Run("server-stopped-while-waiting", func(t *testing.T) {
		srv := redistest.Start(t, nil)
		env := []string{"DSYNC_URL=" + srv.URL()}
		holder := e.start(t, env, "lock", "e2e-stopped") // hold mode: the token on stdout once held
		holder.waitLine(t, holder.stdout, "")
		waiter := e.start(t, env, "lock", "-v", "e2e-stopped", "--timeout", "3s", "--", "true")
		waiter.waitLine(t, waiter.stderr, "waiting for the lock")
		if err := srv.Stop(); err != nil {
			t.Fatal(err)
		}
		// The attempts after the stop find no server; the last one before
		// the timeout decides the status.
		if code, _ := waiter.wait(t); code != exitUnavailable || !strings.Contains(waiter.stderrText(), "backend unavailable") {
			t.Errorf("lock --timeout on a server stopped while waiting: exit %d, stderr %q; want %d, backend unavailable",
				code, waiter.stderrText(), exitUnavailable)
		}
	})

	t.Run("server-stopped", func(t *testing.T) {
		srv := redistest.Start(t, nil)
		url := srv.URL()
		if err := srv.Stop(); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{
			{"lock", "e2e-down", "--try"},
			{"lock", "e2e-down", "--timeout", "1s"},
			{"lock", "e2e-down", "-q"}, // waiting; -q keeps the backend's error
			{"sem", "e2e-down", "--size", "2", "--try"},
			{"elect", "e2e-down", "--timeout", "1s"},
		} {
			e.wantUnavailable(t, url, args, srv.Addr())
		}
		// The commands that only read keep their statuses: 2 when the
		// backend cannot be opened.
		for _, args := range [][]string{{"holder", "e2e-down"}, {"leader", "e2e-down"}} {
			if r := runBinary(t, e.bin, url, args...); r.code != exitUsage {
				t.Errorf("dsync %v on a stopped server: exit %d, stderr %q; want %d", args, r.code, r.stderr, exitUsage)
			}
		}
	})
}

// wantUnavailable runs dsync with args and a command on url, and checks
// that it exits 6 with one line on stderr saying that the backend is
// unavailable and naming detail, and that the command did not run.
func (e *e2e) wantUnavailable(t *testing.T, url string, args []string, detail string) {
	t.Helper()
	args = append(args[:len(args):len(args)], "--", "sh", "-c", "echo ran")
	r := runBinary(t, e.bin, url, args...)
	if r.code != exitUnavailable || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "backend unavailable") ||
		!strings.Contains(r.stderr, detail) || r.stdout != "" {
		t.Errorf("dsync %v: exit %d, stdout %q, stderr %q; want %d, one line saying the backend is unavailable (%s), the command not run",
			args, r.code, r.stdout, r.stderr, exitUnavailable, detail)
	}
}
