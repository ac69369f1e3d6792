package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dsync-dev/dsync/internal/testenv/leakcheck"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestDemoOnMemory(t *testing.T) {
	code, out, errOut := runCLI(t, "--url", "memory://cli-demo", "--workers", "3", "--rounds", "3", "--work", "5ms")
	if code != exitOK || !strings.Contains(out, "OK: mutual exclusion held") || !strings.Contains(out, "acquisitions:              9") ||
		!strings.Contains(out, "OK: never more than 2 holders") || !strings.Contains(out, "OK: one leader at a time") {
		t.Fatalf("demo exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

func TestDemoStartsItsOwnServers(t *testing.T) {
	if _, err := redistest.Lookup(); err != nil {
		t.Fatal(err) // the message says how to install redis-server
	}
	t.Setenv("DSYNC_URL", "")
	code, out, errOut := runCLI(t, "--workers", "2", "--rounds", "2", "--work", "5ms")
	if code != exitOK || !strings.Contains(out, "started 6 redis-server processes") || !strings.Contains(out, "stopped the servers") ||
		!strings.Contains(out, "backend: redis://127.0.0.1:") || !strings.Contains(out, "backend: redlock://127.0.0.1:") ||
		!strings.Contains(out, "backend: etcd://127.0.0.1:") || !strings.Contains(out, "killed the etcd leader") ||
		!strings.Contains(out, "killed the master") || strings.Count(out, "OK: mutual exclusion held") != 5 ||
		strings.Count(out, "OK: never more than 2 holders at once") != 5 || strings.Count(out, "OK: one leader at a time") != 5 ||
		!strings.Contains(out, "== summary ==") || strings.Contains(out, "VIOLATION") {
		t.Fatalf("demo exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

func TestDemoCheckerReportsViolations(t *testing.T) {
	// Negative control: two overlapping holds and a stale token must fail.
	r := &demoResult{holds: []hold{
		{worker: 1, token: 5, acquired: 0, released: 10 * time.Millisecond},
		{worker: 2, token: 4, acquired: 5 * time.Millisecond, released: 20 * time.Millisecond},
	}}
	var out bytes.Buffer
	row := r.check("test", 2, 1)
	row.print(&out)
	if row.ok() || !strings.Contains(out.String(), "overlapping holds:         1") ||
		!strings.Contains(out.String(), "fencing token 4 granted after 5") {
		t.Fatalf("checker passed a violation:\n%s", out.String())
	}
}

func TestDemoErrors(t *testing.T) {
	t.Setenv("DSYNC_URL", "redis://:hunter2@127.0.0.1:1/?password=hunter2")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--url", "nosuch://h"}, "unknown URL scheme"},
		{[]string{"--url", "redis://:hunter2@127.0.0.1:1/?colour=red"}, `url option "colour"`},
		{[]string{"--url", "redis://:hunter2@127.0.0.1:1/"}, "unreachable"},
		{[]string{"--url", "redis://h:port"}, "malformed"},
		{[]string{"--workers", "0"}, "at least 1"},
		{[]string{"--no-such-flag"}, "not defined"},
		{[]string{"check", "--no-such-flag"}, "not defined"},
	} {
		code, out, errOut := runCLI(t, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) || strings.Contains(errOut+out, "hunter2") {
			t.Errorf("dsync-demo %v: exit %d, stderr %q; want exit 2 mentioning %q without the password", tc.args, code, errOut, tc.want)
		}
		if lines := strings.Count(strings.TrimSpace(errOut), "\n") + 1; strings.HasPrefix(tc.args[0], "--url") && lines != 1 {
			t.Errorf("dsync-demo %v: %d lines of error, want one:\n%s", tc.args, lines, errOut)
		}
	}
	for _, args := range [][]string{{"--help"}, {"help"}, {"check", "-h"}} {
		code, out, errOut := runCLI(t, args...)
		if code != exitOK || !strings.Contains(out, "usage: dsync-demo") || strings.Contains(out+errOut, "hunter2") {
			t.Errorf("dsync-demo %v: exit %d, stdout %q, stderr %q; want the help on stdout, without the password", args, code, out, errOut)
		}
	}
}
