package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dsync-dev/dsync/internal/testenv/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestCLIErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, "unknown command"},
		{nil, "usage"},
	} {
		code, _, errOut := runCLI(t, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) || strings.Contains(errOut, "hunter2") {
			t.Errorf("dsync %v: exit %d, stderr %q; want exit 2 mentioning %q without the password", tc.args, code, errOut, tc.want)
		}
		if lines := strings.Count(strings.TrimSpace(errOut), "\n") + 1; tc.args != nil && tc.args[0] != "frobnicate" && len(tc.args) > 1 && strings.HasPrefix(tc.args[1], "--url") && lines != 1 {
			t.Errorf("dsync %v: %d lines of error, want one:\n%s", tc.args, lines, errOut)
		}
	}
}

func TestURLHelpListsSchemesAndOptions(t *testing.T) {
	code, out, _ := runCLI(t, "url-help")
	for _, want := range []string{"memory://", "redis://", "rediss://", "ttl", "retry_min", "prefix", "not localhost", "[::1]:6379"} {
		if !strings.Contains(out, want) {
			t.Errorf("url-help lacks %q:\n%s", want, out)
		}
	}
	if code != exitOK {
		t.Fatalf("url-help exit %d", code)
	}
}
