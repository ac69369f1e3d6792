package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsync-dev/dsync/internal/testenv/redistest"
)

// TestCheckEmbedded runs dsync-demo check briefly on the single Redis it
// starts, with workers that are this test binary started again (the
// init hook of check.go makes them workers), and reads its report.
func TestCheckEmbedded(t *testing.T) {
	if _, err := redistest.Lookup(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DSYNC_URL", "")
	report := filepath.Join(t.TempDir(), "check.html")
	code, out, errOut := runCLI(t, "check", "--backend", "redis", "--duration", "5s", "--ttl", "1s", "--workers", "3",
		"--faults", "pause-client,kill-client", "--report", report)
	if code != exitOK || !strings.Contains(out, "every check passed") || !strings.Contains(out, "holds ") ||
		!strings.Contains(out, "ok   exclusion") || !strings.Contains(out, "stopped the servers") {
		t.Fatalf("dsync-demo check exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	page, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<svg", "Every check passed", "single Redis"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	t.Logf("stdout:\n%s", out)
}

// TestCheckOnURL runs dsync-demo check on a user's server (--url), where
// only client faults apply, with a semaphore, and reads its JSON summary.
func TestCheckOnURL(t *testing.T) {
	s := redistest.Start(t, nil)
	report := filepath.Join(t.TempDir(), "check.html")
	code, out, errOut := runCLI(t, "check", "--url", s.URL(), "--primitive", "sem", "--size", "2", "--duration", "4s",
		"--ttl", "1s", "--workers", "3", "--report", report, "--json")
	var sum checkSummary
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("stdout is not the JSON summary: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	if code != exitOK || !sum.OK || sum.Report != report || len(sum.Targets) != 1 || sum.Targets[0].Holds == 0 ||
		len(sum.Targets[0].Checks) == 0 || !strings.Contains(errOut, "every check passed") || !strings.Contains(errOut, "limit 2") {
		t.Fatalf("dsync-demo check exit %d, summary %+v\nstderr:\n%s", code, sum, errOut)
	}
}

func TestCheckUsage(t *testing.T) {
	t.Setenv("DSYNC_URL", "")
	s := redistest.Start(t, nil)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"check", "--url", s.URL(), "--faults", "kill-node"}, "needs Redis servers started here"},
		{[]string{"check", "--url", s.URL(), "--faults", "frobnicate"}, "unknown fault"},
		{[]string{"check", "--url", s.URL(), "--primitive", "mutex"}, "want lock, sem or elect"},
		{[]string{"check", "--backend", "zookeeper"}, "want redis, redlock or etcd"},
		{[]string{"check", "--url", s.URL(), "--workers", "0"}, "at least 1"},
	} {
		code, _, errOut := runCLI(t, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("dsync %v: exit %d, stderr %q; want exit 2 mentioning %q", tc.args, code, errOut, tc.want)
		}
	}
}
