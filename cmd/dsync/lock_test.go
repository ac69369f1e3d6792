package main

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	"github.com/dsync-dev/dsync/locker"
)

func TestLockRunsCommandWithToken(t *testing.T) {
	code, out, errOut := runCLI(t, "lock", "job", "--url", "memory://lock-env", "--", "sh", "-c", "echo key=$DSYNC_KEY token=$DSYNC_TOKEN")
	if code != 0 || !regexp.MustCompile(`^key=job token=[1-9][0-9]*\n$`).MatchString(out) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestLockPassesExitStatus(t *testing.T) {
	if code, _, errOut := runCLI(t, "lock", "job", "--url", "memory://lock-status", "--", "sh", "-c", "exit 7"); code != 7 {
		t.Fatalf("exit %d, want the command's 7 (stderr %q)", code, errOut)
	}
}

// holdLock takes name on a memory store the CLI opens too, until the test ends.
func holdLock(t *testing.T, url, name string) {
	t.Helper()
	b, err := dsync.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	l, _ := locker.New(b, name, nil)
	lease, err := l.TryAcquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lease.Release(context.Background()); b.Close() })
}

func TestLockTryAndTimeout(t *testing.T) {
	holdLock(t, "memory://lock-held", "job")
	if code, _, errOut := runCLI(t, "lock", "job", "--url", "memory://lock-held", "--try", "--", "true"); code != exitNotAcquired || !strings.Contains(errOut, "held by another owner") {
		t.Errorf("--try on a held lock: exit %d, stderr %q; want %d", code, errOut, exitNotAcquired)
	}
	start := time.Now()
	if code, _, errOut := runCLI(t, "lock", "job", "--url", "memory://lock-held", "--timeout", "200ms", "--", "true"); code != exitTimedOut {
		t.Errorf("--timeout on a held lock: exit %d, stderr %q; want %d", code, errOut, exitTimedOut)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("gave up after %v, before the 200ms timeout", d)
	}
}

func TestLockExcludesConcurrentCommands(t *testing.T) {
	// Each command creates a directory that must not exist yet (mkdir is
	// atomic), holds it a moment and removes it: two commands running at
	// once would make one mkdir fail.
	dir := filepath.Join(t.TempDir(), "inside")
	script := fmt.Sprintf("mkdir %q || exit 99; sleep 0.05; rmdir %q", dir, dir)
	var wg sync.WaitGroup
	codes := make([]int, 6)
	for i := range codes {
		wg.Go(func() {
			codes[i], _, _ = runCLI(t, "lock", "shared", "--url", "memory://lock-excl", "--", "sh", "-c", script)
		})
	}
	wg.Wait()
	for i, c := range codes {
		if c != 0 {
			t.Errorf("run %d exited %d (99: it ran while another held the lock)", i, c)
		}
	}
}

func TestLockLostTerminatesCommand(t *testing.T) {
	srv := redistest.Start(t, nil)
	client := srv.NewClient(t)
	ctx := context.Background()
	go func() {
		// Once the lock is taken, delete it behind dsync's back, as a
		// server that lost its data would: the next extension finds it gone.
		for {
			if n, err := client.Del(ctx, "dsync:{doomed}").Result(); err != nil || n == 1 {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	start := time.Now()
	code, _, errOut := runCLI(t, "lock", "doomed", "--url", srv.URL(), "--ttl", "600ms", "--grace", "2s", "--", "sleep", "30")
	if code != exitLost || !strings.Contains(errOut, "lock lost") {
		t.Fatalf("exit %d, stderr %q; want %d after SIGTERM to the command", code, errOut, exitLost)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %v: the command was not terminated promptly", d)
	}
}

func TestLockUsage(t *testing.T) {
	for _, args := range [][]string{
		{"lock"},
		{"lock", "job"},
		{"lock", "job", "--url", "memory://x", "--"},
		{"lock", "--url", "memory://x", "--", "true"},
		{"lock", "job", "--", "true"},
		{"lock", "job", "--url", "memory://x", "extra", "--", "true"},
		{"lock", "job", "--url", "memory://x", "--ttl", "-1s", "--", "true"},
	} {
		t.Setenv("DSYNC_URL", "")
		if code, _, _ := runCLI(t, args...); code != exitUsage {
			t.Errorf("dsync %v: exit %d, want %d", args, code, exitUsage)
		}
	}
}
