package main

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strconv"
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

// staleLine is the refused stale write, with both tokens.
var staleLine = regexp.MustCompile(`the guard refuses it: dsync: fence: stale token: .*: token (\d+) is below (\d+)`)

// checkStale finds the refused stale write lines and checks their tokens.
func checkStale(t *testing.T, out string, want int) {
	t.Helper()
	m := staleLine.FindAllStringSubmatch(out, -1)
	if len(m) != want {
		t.Errorf("%d refused stale writes, want %d", len(m), want)
	}
	for _, sub := range m {
		t1, _ := strconv.ParseUint(sub[1], 10, 64)
		t2, _ := strconv.ParseUint(sub[2], 10, 64)
		if t1 == 0 || t1 >= t2 {
			t.Errorf("stale write line %q: want 0 < w1's token < w2's", sub[0])
		}
	}
}

func lines(s string) int { return strings.Count(strings.TrimSpace(s), "\n") + 1 }

func TestDemoOnMemory(t *testing.T) {
	code, out, errOut := runCLI(t, "--url", "memory://cli-demo", "--workers", "3", "--rounds", "3", "--work", "5ms")
	if code != exitOK || !strings.Contains(out, "lock: 3 workers, 9 acquisitions, no overlap, tokens increasing") ||
		!strings.Contains(out, "semaphore of 2 permits: 3 workers, 9 acquisitions, at most 2 holders at once") ||
		!strings.Contains(out, "one leader at a time") || !strings.Contains(out, "== summary ==") ||
		!regexp.MustCompile(`(?m)^memory +5/5 +18 .* refused +-$`).MatchString(out) || !strings.Contains(out, "all 5 checks passed") {
		t.Fatalf("demo exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	checkStale(t, out, 1)
	if strings.Contains(out, "acquired lock") {
		t.Errorf("events printed without -v:\n%s", out)
	}
}

// TestDemoVerbose: -v adds every acquisition, release and term to the
// same story.
func TestDemoVerbose(t *testing.T) {
	args := []string{"--url", "memory://cli-verbose", "--workers", "2", "--rounds", "2", "--work", "5ms"}
	_, quiet, _ := runCLI(t, args...)
	code, out, errOut := runCLI(t, append(args, "-v")...)
	if code != exitOK || strings.Count(out, "acquired lock") != 4 || strings.Count(out, "acquired permit") != 4 ||
		strings.Count(out, "releases") != 8 || !strings.Contains(out, "leads, term") || !strings.Contains(out, "crashes") ||
		lines(out) <= lines(quiet)+16 {
		t.Fatalf("demo -v exit %d, %d lines (%d without -v)\nstdout:\n%s\nstderr:\n%s", code, lines(out), lines(quiet), out, errOut)
	}
}

// TestDemoStartsItsOwnServers runs the demo as a newcomer does, on the
// servers it starts, and reads the story: about a screen, with the refused
// stale writes, the Redlock faults and the quarantine, the etcd failover
// and the summary.
func TestDemoStartsItsOwnServers(t *testing.T) {
	if _, err := redistest.Lookup(); err != nil {
		t.Fatal(err) // the message says how to install redis-server
	}
	t.Setenv("DSYNC_URL", "")
	start := time.Now()
	code, out, errOut := runCLI(t)
	t.Logf("%d lines in %v:\n%s", lines(out), time.Since(start).Round(time.Second), out)
	if code != exitOK || errOut != "" {
		t.Fatalf("demo exit %d, stderr:\n%s", code, errOut)
	}
	if n := lines(out); n > 70 {
		t.Errorf("%d lines of output, want about a screen (at most 70)", n)
	}
	for _, re := range []string{
		`started 6 redis-server processes`,
		`(?m)^== single Redis`, `(?m)^== Redlock: 5 independent masters, quorum 3, max_ttl 3s ==$`, `(?m)^== etcd`,
		`fault: redis-server restarted empty`, `token \d+ > \d+ before`,
		`fault: nodes 3 and 4 killed \(SIGKILL\): 3 of 5 still vote, quorum 3: 10 of 10 acquisitions granted`,
		`fault: node 1 restarted empty`,
		`node 1 quarantined for [\d.]+s \(max_ttl 3s`,
		`fault: the raft leader, member \d, killed: member \d leads [\d.]+[mµ]?s later`,
		`(?m)^== summary ==$`,
		`(?m)^single Redis +6/6 `, `(?m)^Redlock +9/9 `, `(?m)^etcd +7/7 `,
		`(?m)^all 22 checks passed in `,
		`(?m)^stopped the servers started here`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("the output lacks %s", re)
		}
	}
	checkStale(t, out, 3)
	if strings.Contains(out, "FAILED") || strings.Contains(out, "acquired lock") {
		t.Errorf("a failed check, or events without -v")
	}
}

// TestDemoWithoutRedis plays a fresh machine where redis-server is missing
// and apt-get fails: the demo says so first, then in its summary, and runs
// the rest with memory standing in for Redis.
func TestDemoWithoutRedis(t *testing.T) {
	fakeMachine(t, true, errors.New("E: Unable to locate package redis-server"))
	t.Setenv("DSYNC_URL", "")
	code, out, errOut := runCLI(t, "--workers", "2", "--rounds", "2", "--work", "5ms")
	if code != exitOK || errOut != "" {
		t.Fatalf("demo exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	first := strings.Join(strings.SplitN(out, "\n", 5)[:4], "\n")
	const skipped = "Redlock and single Redis skipped: redis-server is not installed"
	if !strings.Contains(first, "installing it with apt-get") || !strings.Contains(first, skipped) ||
		!strings.Contains(first, "Unable to locate package") {
		t.Errorf("the first lines do not say why Redlock is missing:\n%s", first)
	}
	_, summary, _ := strings.Cut(out, "== summary ==")
	if !strings.Contains(summary, skipped) || !regexp.MustCompile(`(?m)^memory +5/5 `).MatchString(summary) ||
		!regexp.MustCompile(`(?m)^etcd +7/7 `).MatchString(summary) || strings.Contains(out, "== Redlock") {
		t.Errorf("summary:\n%s", summary)
	}
}

// fakeMachine plays a machine without redis-server, where apt-get can run
// if root: lookupRedis finds redis-server only once installed, and
// installRedis succeeds (installErr nil: it "installs") or fails. It
// returns the number of installs tried.
func fakeMachine(t *testing.T, root bool, installErr error) *int {
	installed, calls := false, new(int)
	oldLookup, oldCan, oldInstall := lookupRedis, canAptGet, installRedis
	t.Cleanup(func() { lookupRedis, canAptGet, installRedis = oldLookup, oldCan, oldInstall })
	lookupRedis = func() (string, error) {
		if installed {
			return "/usr/bin/redis-server", nil
		}
		return "", redistest.ErrNotInstalled
	}
	canAptGet = func() bool { return root }
	installRedis = func(context.Context) error {
		*calls++
		installed = installErr == nil
		return installErr
	}
	return calls
}

func TestEnsureRedis(t *testing.T) {
	for _, tc := range []struct {
		name      string
		root      bool
		noInstall bool
		fail      error
		calls     int
		out, skip string
	}{
		{"installs as root", true, false, nil, 1, "installed redis-server", ""},
		{"--no-install", true, true, nil, 0, "", "skipped: redis-server is not installed (--no-install"},
		{"not root", false, false, nil, 0, "", "(not root or no apt-get here; sudo apt-get install redis-server)"},
		{"apt-get fails", true, false, errors.New("apt-get update: exit status 100"), 1, "installing it with apt-get", "apt-get failed"},
	} {
		calls := fakeMachine(t, tc.root, tc.fail)
		var out bytes.Buffer
		skip := ensureRedis(context.Background(), &out, tc.noInstall)
		if *calls != tc.calls || !strings.Contains(out.String(), tc.out) || (tc.skip == "") != (skip == "") || !strings.Contains(skip, tc.skip) {
			t.Errorf("%s: %d installs, said %q, skip %q; want %d installs, saying %q, skip %q", tc.name, *calls, out.String(), skip, tc.calls, tc.out, tc.skip)
		}
	}
}

func TestDemoCheckerReportsViolations(t *testing.T) {
	// Negative control: two overlapping holds and a stale token must fail.
	r := &demoResult{holds: []hold{
		{worker: 1, token: 5, acquired: 0, released: 10 * time.Millisecond},
		{worker: 2, token: 4, acquired: 5 * time.Millisecond, released: 20 * time.Millisecond},
	}}
	row := r.check(2, 1)
	if row.ok() || row.overlaps != 1 || row.badTokens != 1 || !strings.Contains(strings.Join(row.violations, "\n"), "fencing token 4 granted after 5") {
		t.Fatalf("checker passed a violation: %+v", row)
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
