package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync/internal/testenv/redistest"
)

// TestEndToEnd runs the built dsync binary as separate processes against a
// real redis-server: what an operator's shell sees.
func TestEndToEnd(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "dsync")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	srv := redistest.Start(t, nil)
	client := srv.NewClient(t)
	env := &e2e{bin: bin, url: srv.URL(), client: client}
	t.Run("stop-group-on-loss", env.testStopGroupOnLoss)
	t.Run("stop-group-on-signal", env.testStopGroupOnSignal)
	t.Run("no-secrets", env.testNoSecrets)
	t.Run("flag-order", env.testFlagOrder)
	t.Run("hold-mode", env.testHoldMode)
	t.Run("signal-while-waiting", env.testSignalWhileWaiting)
	t.Run("holder", env.testHolder)
	t.Run("leader-json", env.testLeaderJSON)
	t.Run("version", env.testVersion)
	t.Run("unavailable", env.testUnavailable)

	t.Run("token", func(t *testing.T) {
		r := runBinary(t, bin, srv.URL(), "lock", "e2e-token", "--", "sh", "-c", "echo key=$DSYNC_KEY token=$DSYNC_TOKEN")
		if r.code != 0 || !regexp.MustCompile(`^key=e2e-token token=[1-9][0-9]*\n$`).MatchString(r.stdout) {
			t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("no-overlap", func(t *testing.T) {
		// 4 dsync processes, 3 commands each, on one lock.
		stamps := filepath.Join(t.TempDir(), "stamps")
		script := stampedCommand(stamps, "0.03")
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 3 {
					if r := runBinary(t, bin, srv.URL(), "lock", "e2e-excl", "--", "sh", "-c", script); r.code != 0 {
						t.Errorf("dsync lock exited %d: %s", r.code, r.stderr)
					}
				}
			})
		}
		wg.Wait()
		most, sections, err := mostAtOnce(stamps)
		if err != nil {
			t.Fatal(err)
		}
		if most != 1 || sections != 12 {
			t.Fatalf("%d commands ran, at most %d at once; want 12, one at a time", sections, most)
		}
	})

	t.Run("exit-codes", func(t *testing.T) {
		holder := startBinary(t, bin, srv.URL(), "lock", "e2e-held", "--", "sleep", "30")
		waitHeld(t, client, "dsync:{e2e-held}")
		if r := runBinary(t, bin, srv.URL(), "lock", "e2e-held", "--try", "--", "true"); r.code != exitNotAcquired {
			t.Errorf("--try on a held lock: exit %d (stderr %q), want %d", r.code, r.stderr, exitNotAcquired)
		}
		if r := runBinary(t, bin, srv.URL(), "lock", "e2e-held", "--timeout", "300ms", "--", "true"); r.code != exitTimedOut {
			t.Errorf("--timeout on a held lock: exit %d (stderr %q), want %d", r.code, r.stderr, exitTimedOut)
		}
		// A signal to dsync goes to the command; the lock is released.
		if err := holder.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := waitExit(t, holder); code != 128+int(syscall.SIGTERM) {
			t.Errorf("SIGTERM to dsync: exit %d, want %d (the command's death by SIGTERM)", code, 128+int(syscall.SIGTERM))
		}
		if n, err := client.Exists(context.Background(), "dsync:{e2e-held}").Result(); err != nil || n != 0 {
			t.Errorf("the lock is still there after dsync exited (%d, %v)", n, err)
		}
		for _, c := range []struct {
			url  string
			args []string
			want string
		}{
			{"redis://127.0.0.1:6379/0?bogus=1", []string{"lock", "x", "--", "true"}, "bogus"},
			{"nope://x", []string{"lock", "x", "--", "true"}, "nope"},
			{srv.URL(), []string{"lock", "x", "--no-such-flag", "--", "true"}, "no-such-flag"},
			{srv.URL(), []string{"sem", "x", "--size", "0", "--", "true"}, "size"},
		} {
			r := runBinary(t, bin, c.url, c.args...)
			if r.code != exitUsage || !strings.Contains(r.stderr, c.want) || strings.Contains(r.stderr, "s3cret") || strings.Contains(r.stderr, "goroutine ") {
				t.Errorf("%s %v: exit %d, stderr %q; want %d and one line naming %q", c.url, c.args, r.code, r.stderr, exitUsage, c.want)
			}
		}
	})

	t.Run("paused-past-ttl", func(t *testing.T) {
		// dsync itself is stopped past its TTL: when it resumes, it must
		// see the lease lost and terminate the command.
		dir := t.TempDir()
		marker, started := filepath.Join(dir, "terminated"), filepath.Join(dir, "started")
		cmd := startBinary(t, bin, srv.URL(), "lock", "e2e-paused", "--ttl", "1s", "--grace", "2s", "--",
			"sh", "-c", fmt.Sprintf("trap 'touch %q; exit 0' TERM; touch %q; while :; do sleep 0.05; done", marker, started))
		// Stop dsync only once its command runs with the trap set: the key
		// alone shows up before dsync has read the reply, and dsync stopped
		// there retries after the resume instead of losing a lease (or,
		// stopped before it starts the command, sends SIGTERM before the
		// trap is set).
		waitHeld(t, client, "dsync:{e2e-paused}")
		waitFile(t, started)
		if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		// Past the TTL, the key is gone from the server.
		deadline := time.Now().Add(10 * time.Second)
		for n := int64(1); n != 0; {
			if time.Now().After(deadline) {
				t.Fatal("the key of a stopped holder did not expire within 10s")
			}
			time.Sleep(50 * time.Millisecond)
			n, _ = client.Exists(context.Background(), "dsync:{e2e-paused}").Result()
		}
		if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if code := waitExit(t, cmd); code != exitLost {
			t.Errorf("exit %d after resuming past the TTL, want %d (lost); stderr %q", code, exitLost, cmd.Stderr)
		}
		if _, err := os.Stat(marker); err != nil {
			t.Errorf("the command was not sent SIGTERM: %v", err)
		}
	})
}

type result struct {
	code           int
	stdout, stderr string
}

// runBinary runs dsync with args and DSYNC_URL=url, within a minute.
func runBinary(t *testing.T, bin, url string, args ...string) result {
	t.Helper()
	return runWith(t, bin, []string{"DSYNC_URL=" + url}, args...)
}

// runWith runs dsync with args and env added to the test's environment,
// within a minute, with stdin empty.
func runWith(t *testing.T, bin string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("running dsync %v: %v", args, err)
	}
	return result{cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()}
}

// startBinary starts dsync with args; the test's cleanup kills it if it
// still runs.
func startBinary(t *testing.T, bin, url string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "DSYNC_URL="+url)
	cmd.Stderr = new(strings.Builder)
	cmd.WaitDelay = 5 * time.Second // a leftover of the command must not hang the test
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd
}

// waitExit waits up to 30s for cmd to exit and returns its status.
func waitExit(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
		return cmd.ProcessState.ExitCode()
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("dsync did not exit within 30s; stderr %q", cmd.Stderr)
		return -1
	}
}

// waitFile waits up to 30s until path exists.
func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within 30s", path)
		}
		time.Sleep(10 * time.Millisecond) // a file another process makes: no event to wait on
	}
}

// waitHeld waits until key exists on the server.
func waitHeld(t *testing.T, client *goredis.Client, key string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if n, err := client.Exists(context.Background(), key).Result(); err == nil && n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not held within 30s", key)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stampedCommand is a shell command that appends its start and end times
// (date +%s%N: one clock for every process) to the file stamps, and sleeps
// secs between them.
func stampedCommand(stamps, secs string) string {
	return fmt.Sprintf(`echo "start $(date +%%s%%N)" >> %[1]q; sleep %[2]s; echo "end $(date +%%s%%N)" >> %[1]q`, stamps, secs)
}

// mostAtOnce replays the stamps of stampedCommand in time order and returns
// the largest number of commands running at once, and how many ran. An end
// and a start at the same instant do not overlap.
func mostAtOnce(stamps string) (most, sections int, err error) {
	data, err := os.ReadFile(stamps)
	if err != nil {
		return 0, 0, err
	}
	type stamp struct {
		at    int64
		start bool
	}
	var all []stamp
	for line := range strings.Lines(string(data)) {
		kind, ns, _ := strings.Cut(strings.TrimSpace(line), " ")
		at, err := strconv.ParseInt(ns, 10, 64)
		if err != nil || (kind != "start" && kind != "end") {
			return 0, 0, fmt.Errorf("bad stamp line %q", line)
		}
		all = append(all, stamp{at, kind == "start"})
	}
	slices.SortFunc(all, func(a, b stamp) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		return cmp.Compare(boolInt(a.start), boolInt(b.start)) // ends first
	})
	inside := 0
	for _, s := range all {
		if s.start {
			inside++
			sections++
			most = max(most, inside)
		} else {
			inside--
		}
	}
	return most, sections, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
