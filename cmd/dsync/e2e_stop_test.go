package main

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// stopCases are commands whose process group dsync must stop whole: each
// leaves a grandchild (sleep) that ignores SIGTERM and writes its PID to
// the file %[1]q, and writes %[2]q when everything is set up.
var stopCases = []struct {
	name, script string
}{
	// sh ignores SIGTERM too, and waits for its child.
	{"command-ignores-sigterm", `trap '' TERM; sleep 60 & echo $! > %[1]q; touch %[2]q; wait`},
	// sh dies of SIGTERM at once; its orphan ignores it.
	{"orphan-ignores-sigterm", `(trap '' TERM; exec sleep 60) & echo $! > %[1]q; touch %[2]q; wait`},
}

// testStopGroupOnLoss: a lost lock stops all the protected work. The key
// is deleted behind dsync's back; after the "lock lost" notice, dsync exits
// 5 within --grace plus a second, and the grandchild is gone by then.
func (e *e2e) testStopGroupOnLoss(t *testing.T) {
	const grace = 2 * time.Second
	for i, c := range stopCases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			pidFile, ready := filepath.Join(dir, "pid"), filepath.Join(dir, "ready")
			name := fmt.Sprintf("e2e-loss-%d", i)
			p := e.start(t, []string{"DSYNC_URL=" + e.url}, "lock", name, "--ttl", "1s", "--grace", grace.String(), "--",
				"sh", "-c", fmt.Sprintf(c.script, pidFile, ready))
			pid := readPID(t, pidFile)
			waitFile(t, ready)
			if n, err := e.client.Del(context.Background(), "dsync:{"+name+"}").Result(); err != nil || n != 1 {
				t.Fatalf("deleting the lock's key: %d, %v", n, err)
			}
			lost := p.waitLine(t, p.stderr, "lock lost")
			code, exited := p.wait(t)
			if code != exitLost {
				t.Errorf("exit %d, want %d (lost); stderr %q", code, exitLost, p.stderrText())
			}
			if d := exited.Sub(lost.at); d > grace+time.Second {
				t.Errorf("dsync exited %v after the loss notice, want within --grace (%v) plus a second", d, grace)
			}
			if !gone(pid) {
				t.Errorf("the grandchild %d outlived dsync; stderr %q", pid, p.stderrText())
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		})
	}
}

// testStopGroupOnSignal: SIGTERM to dsync goes to the whole group, and
// SIGKILL follows after --grace when part of it ignores SIGTERM.
func (e *e2e) testStopGroupOnSignal(t *testing.T) {
	const grace = time.Second
	for i, c := range stopCases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			pidFile, ready := filepath.Join(dir, "pid"), filepath.Join(dir, "ready")
			p := e.start(t, []string{"DSYNC_URL=" + e.url}, "lock", fmt.Sprintf("e2e-sig-%d", i), "--grace", grace.String(), "--",
				"sh", "-c", fmt.Sprintf(c.script, pidFile, ready))
			pid := readPID(t, pidFile)
			waitFile(t, ready)
			sent := time.Now()
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			code, exited := p.wait(t)
			// The command's status: SIGKILL after --grace when sh ignored
			// SIGTERM, SIGTERM when it died of it.
			if code != 128+int(syscall.SIGKILL) && code != 128+int(syscall.SIGTERM) {
				t.Errorf("exit %d, want the command's death by a signal; stderr %q", code, p.stderrText())
			}
			if d := exited.Sub(sent); d > grace+time.Second {
				t.Errorf("dsync exited %v after SIGTERM, want within --grace (%v) plus a second", d, grace)
			}
			if !gone(pid) {
				t.Errorf("the grandchild %d outlived dsync; stderr %q", pid, p.stderrText())
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		})
	}
}
