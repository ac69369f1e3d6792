package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// secretURL has a password and a secret query option.
const secretURL = "redis://:hunter2@127.0.0.1:1/0?password=hunter2&token=hunter2"

// testNoSecrets runs every help and every usage error with a secret in
// $DSYNC_URL: the secret must never show, help goes to stdout with status 0,
// a usage error is one line naming the problem, then the usage, status 2.
func (e *e2e) testNoSecrets(t *testing.T) {
	env := []string{"DSYNC_URL=" + secretURL}
	var helps [][]string
	helps = append(helps, []string{"--help"}, []string{"-h"}, []string{"help"})
	for _, c := range commands() {
		helps = append(helps, []string{c.name, "--help"}, []string{c.name, "-h"}, []string{"help", c.name})
	}
	for _, args := range helps {
		r := runWith(t, e.bin, env, args...)
		if r.code != exitOK || r.stdout == "" || strings.Contains(r.stdout+r.stderr, "hunter2") || strings.Contains(r.stdout, "Usage of") {
			t.Errorf("dsync %v: exit %d, stdout %q, stderr %q; want real help on stdout, status 0, no secret", args, r.code, r.stdout, r.stderr)
		}
	}
	for _, c := range []struct {
		args []string
		want string // in the first line
	}{
		{nil, "no command"},
		{[]string{"frobnicate"}, "unknown command"},
		{[]string{"lock"}, "NAME is missing"},
		{[]string{"lock", ""}, "NAME is empty"},
		{[]string{"lock", "a", "b", "--", "true"}, `unexpected argument "b"`},
		{[]string{"lock", "x", "--no-such-flag", "--", "true"}, "no-such-flag"},
		{[]string{"lock", "x", "--try", "--timeout", "1s", "--", "true"}, "--try and --timeout"},
		{[]string{"lock", "x", "--ttl", "-1s", "--", "true"}, "--ttl must not be negative"},
		{[]string{"lock", "x", "--ttl", "soon", "--", "true"}, "invalid value"},
		{[]string{"lock", "x", "--grace", "-1s", "--", "true"}, "--grace"},
		{[]string{"lock", "x", "--"}, "no command after --"},
		{[]string{"sem", "x", "--", "true"}, "--size must be given"},
		{[]string{"sem", "x", "--size", "0", "--", "true"}, "--size must be given"},
		{[]string{"elect", "x"}, "no command"},
		{[]string{"elect", "", "--", "true"}, "NAME is empty"},
		{[]string{"leader"}, "NAME is missing"},
		{[]string{"leader", "x", "y"}, "unexpected argument"},
		{[]string{"leader", "x", "--interval", "0s"}, "--interval"},
		{[]string{"holder", "x", "--size", "0"}, "--size"},
		{[]string{"holder", ""}, "NAME is empty"},
		{[]string{"url-help", "x"}, "no arguments"},
		{[]string{"health", "x"}, "unexpected argument"},
		{[]string{"health", "--timeout", "0s"}, "--timeout"},
		{[]string{"health", "--", "true"}, "runs no command"},
	} {
		r := runWith(t, e.bin, env, c.args...)
		first, rest, _ := strings.Cut(r.stderr, "\n")
		if r.code != exitUsage || !strings.Contains(first, c.want) || !strings.Contains(rest, "usage: dsync") || r.stdout != "" ||
			strings.Contains(r.stdout+r.stderr, "hunter2") {
			t.Errorf("dsync %v: exit %d, stdout %q, stderr %q; want status 2, one line naming %q, then the usage, no secret", c.args, r.code, r.stdout, r.stderr, c.want)
		}
	}
	// Errors past the usage, on the secret URL itself: one line, no secret.
	for _, args := range [][]string{{"lock", "x", "--", "true"}, {"holder", "x"}, {"leader", "x"}, {"elect", "x", "--", "true"}} {
		r := runWith(t, e.bin, env, args...)
		if r.code != exitUsage || strings.Count(r.stderr, "\n") != 1 || strings.Contains(r.stdout+r.stderr, "hunter2") {
			t.Errorf("dsync %v on a bad secret URL: exit %d, stderr %q; want 2 and one line without the secret", args, r.code, r.stderr)
		}
	}
	// An unreachable server with a password: the backend is unavailable
	// (6) where dsync acquires, 2 where it reads; one line, no secret.
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"lock", "x", "--", "true"}, exitUnavailable},
		{[]string{"sem", "x", "--size", "2", "--", "true"}, exitUnavailable},
		{[]string{"elect", "x", "--", "true"}, exitUnavailable},
		{[]string{"holder", "x"}, exitUsage},
		{[]string{"leader", "x"}, exitUsage},
	} {
		r := runWith(t, e.bin, []string{"DSYNC_URL=redis://:hunter2@127.0.0.1:1/0"}, c.args...)
		if r.code != c.code || strings.Count(r.stderr, "\n") != 1 || strings.Contains(r.stdout+r.stderr, "hunter2") {
			t.Errorf("dsync %v on an unreachable secret URL: exit %d, stderr %q; want %d and one line without the secret", c.args, r.code, r.stderr, c.code)
		}
	}
	// dsync health on an unreachable server with a password: the backend
	// cannot serve (status 1), and the report does not show the password.
	r0 := runWith(t, e.bin, []string{"DSYNC_URL=redis://:hunter2@127.0.0.1:1/0"}, "health", "--timeout", "2s")
	if r0.code != exitFail || !strings.Contains(r0.stdout, "cannot serve") || strings.Contains(r0.stdout+r0.stderr, "hunter2") {
		t.Errorf("dsync health on an unreachable secret URL: exit %d, stdout %q, stderr %q; want 1, cannot serve, no secret", r0.code, r0.stdout, r0.stderr)
	}
	// An environment value that does not parse is named, not shown.
	r := runWith(t, e.bin, []string{"DSYNC_URL=" + e.url, "DSYNC_TTL=hunter2"}, "lock", "x", "--", "true")
	if r.code != exitUsage || !strings.Contains(r.stderr, "$DSYNC_TTL") || strings.Contains(r.stderr, "hunter2") {
		t.Errorf("a bad $DSYNC_TTL: exit %d, stderr %q", r.code, r.stderr)
	}
}

// testFlagOrder: flags go before or after NAME; --ttl 0 is the default.
func (e *e2e) testFlagOrder(t *testing.T) {
	want := regexp.MustCompile(`^key=e2e-order token=[1-9][0-9]*\n$`)
	script := []string{"--", "sh", "-c", "echo key=$DSYNC_KEY token=$DSYNC_TOKEN"}
	for _, args := range [][]string{
		append([]string{"lock", "--url", e.url, "--ttl", "5s", "e2e-order"}, script...),
		append([]string{"lock", "e2e-order", "--url", e.url, "--ttl", "0"}, script...),
		append([]string{"lock", "--url", e.url, "e2e-order", "--timeout", "5s", "-q"}, script...),
	} {
		r := runWith(t, e.bin, []string{"DSYNC_URL="}, args...)
		if r.code != 0 || !want.MatchString(r.stdout) {
			t.Errorf("dsync %v: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
	// Environment defaults: DSYNC_URL and DSYNC_TTL.
	r := runWith(t, e.bin, []string{"DSYNC_URL=" + e.url, "DSYNC_TTL=3s"}, append([]string{"lock", "e2e-order", "-v"}, script...)...)
	if r.code != 0 || !want.MatchString(r.stdout) || !strings.Contains(r.stderr, "acquired lock") || !strings.Contains(r.stderr, "released lock") {
		t.Errorf("with $DSYNC_URL, -v: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// testHoldMode: without a command, dsync prints the token, holds the lock
// and releases it at EOF on stdin, or on SIGTERM.
func (e *e2e) testHoldMode(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		key  string
		end  func(p *process) error
	}{
		{"lock-eof", []string{"lock", "e2e-hold-eof"}, "dsync:{e2e-hold-eof}", func(p *process) error { return p.stdin.Close() }},
		{"lock-sigterm", []string{"lock", "e2e-hold-term"}, "dsync:{e2e-hold-term}", func(p *process) error { return p.cmd.Process.Signal(syscall.SIGTERM) }},
		{"sem-eof", []string{"sem", "e2e-hold-sem", "--size", "2"}, "", func(p *process) error { return p.stdin.Close() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := e.start(t, []string{"DSYNC_URL=" + e.url}, c.args...)
			tok := p.waitLine(t, p.stdout, "")
			if n, err := strconv.ParseUint(tok.text, 10, 64); err != nil || n == 0 {
				t.Fatalf("first line %q, want the fencing token", tok.text)
			}
			name := c.args[1]
			if r := runWith(t, e.bin, []string{"DSYNC_URL=" + e.url}, "holder", name, "--size", sizeOf(c.args)); r.code != exitOK {
				t.Fatalf("holder while held: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
			}
			if err := c.end(p); err != nil {
				t.Fatal(err)
			}
			if code, _ := p.wait(t); code != exitOK {
				t.Errorf("exit %d after the end of the hold, want 0; stderr %q", code, p.stderrText())
			}
			if r := runWith(t, e.bin, []string{"DSYNC_URL=" + e.url}, "holder", name, "--size", sizeOf(c.args)); r.code != exitFail {
				t.Errorf("holder after release: exit %d, stdout %q; want 1 (free)", r.code, r.stdout)
			}
			if c.key != "" {
				if n, err := e.client.Exists(context.Background(), c.key).Result(); err != nil || n != 0 {
					t.Errorf("the key is still there after the release (%d, %v)", n, err)
				}
			}
		})
	}
}

func sizeOf(args []string) string {
	for i, a := range args {
		if a == "--size" {
			return args[i+1]
		}
	}
	return "1"
}

// testSignalWhileWaiting: SIGINT or SIGTERM while waiting to acquire exits
// 130 or 143, as a shell would.
func (e *e2e) testSignalWhileWaiting(t *testing.T) {
	holder := e.start(t, []string{"DSYNC_URL=" + e.url}, "lock", "e2e-wait")
	holder.waitLine(t, holder.stdout, "")
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		p := e.start(t, []string{"DSYNC_URL=" + e.url}, "lock", "e2e-wait", "-v", "--", "true")
		p.waitLine(t, p.stderr, "waiting for the lock")
		if err := p.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		if code, _ := p.wait(t); code != 128+int(sig) {
			t.Errorf("%v while waiting: exit %d, want %d; stderr %q", sig, code, 128+int(sig), p.stderrText())
		}
	}
	_ = holder.stdin.Close()
	if code, _ := holder.wait(t); code != exitOK {
		t.Errorf("the holder exited %d", code)
	}
}

// testHolder: holder exits 0 with the value and TTL when held, 1 when free.
func (e *e2e) testHolder(t *testing.T) {
	env := []string{"DSYNC_URL=" + e.url}
	if r := runWith(t, e.bin, env, "holder", "e2e-who"); r.code != exitFail || r.stdout != "free\n" {
		t.Errorf("free lock: exit %d, stdout %q", r.code, r.stdout)
	}
	r := runWith(t, e.bin, env, "holder", "e2e-who", "--json")
	var free holderLine
	if err := json.Unmarshal([]byte(r.stdout), &free); err != nil || r.code != exitFail || free.Held || free.Name != "e2e-who" {
		t.Errorf("free lock, --json: exit %d, stdout %q (%v)", r.code, r.stdout, err)
	}
	p := e.start(t, env, "lock", "e2e-who", "--ttl", "20s")
	p.waitLine(t, p.stdout, "")
	r = runWith(t, e.bin, env, "holder", "--json", "e2e-who")
	var held holderLine
	if err := json.Unmarshal([]byte(r.stdout), &held); err != nil || r.code != exitOK || !held.Held ||
		!strings.Contains(held.Value, "pid "+strconv.Itoa(p.cmd.Process.Pid)) || held.TTLms <= 0 || held.TTLms > 20000 {
		t.Errorf("held lock, --json: exit %d, stdout %q (%v)", r.code, r.stdout, err)
	}
	if r := runWith(t, e.bin, env, "holder", "e2e-who"); r.code != exitOK || !strings.Contains(r.stdout, " left") {
		t.Errorf("held lock: exit %d, stdout %q", r.code, r.stdout)
	}
	_ = p.stdin.Close()
	p.wait(t)
}

// testLeaderJSON: leader --json, and --watch --json showing a new leader
// and the lack of one as they happen.
func (e *e2e) testLeaderJSON(t *testing.T) {
	env := []string{"DSYNC_URL=" + e.url}
	r := runWith(t, e.bin, env, "leader", "e2e-elect", "--json")
	var none leaderLine
	if err := json.Unmarshal([]byte(r.stdout), &none); err != nil || r.code != exitNoLeader || none.Leader != nil || none.Election != "e2e-elect" {
		t.Errorf("no leader, --json: exit %d, stdout %q (%v)", r.code, r.stdout, err)
	}
	watch := e.start(t, env, "leader", "e2e-elect", "--watch", "--json")
	next := func() leaderLine {
		t.Helper()
		l := watch.waitLine(t, watch.stdout, "")
		var v leaderLine
		if err := json.Unmarshal([]byte(l.text), &v); err != nil {
			t.Fatalf("watch line %q: %v", l.text, err)
		}
		return v
	}
	if v := next(); v.Leader != nil {
		t.Fatalf("watch: first leader %q, want none", *v.Leader)
	}
	cand := e.start(t, env, "elect", "e2e-elect", "--id", "node-x", "--", "sleep", "60")
	cand.waitLine(t, cand.stderr, "leading")
	if v := next(); v.Leader == nil || *v.Leader != "node-x" {
		t.Fatalf("watch: %+v, want node-x", v)
	}
	r = runWith(t, e.bin, env, "leader", "--json", "e2e-elect")
	var one leaderLine
	if err := json.Unmarshal([]byte(r.stdout), &one); err != nil || r.code != exitOK || one.Leader == nil || *one.Leader != "node-x" || one.Term == 0 {
		t.Errorf("leader --json: exit %d, stdout %q (%v); want node-x and its term", r.code, r.stdout, err)
	}
	// SIGTERM: the command ends, dsync resigns, and the watch sees it.
	if err := cand.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, _ := cand.wait(t); code != 128+int(syscall.SIGTERM) {
		t.Errorf("elect after SIGTERM: exit %d, want 143", code)
	}
	if v := next(); v.Leader != nil {
		t.Fatalf("watch after the resignation: %q, want none", *v.Leader)
	}
	_ = watch.cmd.Process.Signal(syscall.SIGTERM)
	watch.wait(t)
}

func (e *e2e) testVersion(t *testing.T) {
	r := runWith(t, e.bin, nil, "--version")
	if r.code != exitOK || !strings.Contains(r.stdout, "dsync github.com/dsync-dev/dsync/cmd/dsync ") ||
		!strings.Contains(r.stdout, "\nuses github.com/dsync-dev/dsync ") || !strings.Contains(r.stdout, "\nrevision ") {
		t.Errorf("--version: exit %d, stdout %q", r.code, r.stdout)
	}
}
