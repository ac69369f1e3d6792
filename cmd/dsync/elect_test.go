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
	"github.com/dsync-dev/dsync/leader"
)

func TestElectRunsCommandAsLeader(t *testing.T) {
	code, out, errOut := runCLI(t, "elect", "sched", "--id", "node-a", "--once", "--url", "memory://elect-env", "--",
		"sh", "-c", "echo id=$DSYNC_LEADER_ID key=$DSYNC_KEY term=$DSYNC_TOKEN; exit 4")
	if code != 4 || !regexp.MustCompile(`^id=node-a key=sched term=[1-9][0-9]*\n$`).MatchString(out) ||
		!strings.Contains(errOut, `leading "sched" as "node-a"`) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestElectOneLeaderAtATime(t *testing.T) {
	// As in TestLockExcludesConcurrentCommands: mkdir fails if two
	// commands run at once.
	dir := filepath.Join(t.TempDir(), "leading")
	script := fmt.Sprintf("mkdir %q || exit 99; sleep 0.05; rmdir %q", dir, dir)
	var wg sync.WaitGroup
	codes := make([]int, 4)
	for i := range codes {
		wg.Go(func() {
			codes[i], _, _ = runCLI(t, "elect", "sched", "--id", fmt.Sprint("node-", i), "--once", "--url", "memory://elect-excl", "--", "sh", "-c", script)
		})
	}
	wg.Wait()
	for i, c := range codes {
		if c != 0 {
			t.Errorf("candidate %d exited %d (99: it led while another did)", i, c)
		}
	}
}

func TestElectCampaignsAgainAfterTheCommandEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout := newLineWriter()
	var stderr strings.Builder
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"elect", "sched", "--id", "node-a", "--url", "memory://elect-again", "--", "sh", "-c", "echo term $DSYNC_TOKEN"}, strings.NewReader(""), stdout, &stderr)
	}()
	first, second := stdout.next(t), stdout.next(t)
	cancel()
	<-done
	if first == second {
		t.Fatalf("%q then %q: want two terms", first, second)
	}
}

func TestElectLostTerminatesCommand(t *testing.T) {
	srv := redistest.Start(t, nil)
	client := srv.NewClient(t)
	ctx := context.Background()
	go func() {
		for { // delete the leader's key behind its back once it is there
			if n, err := client.Del(ctx, "dsync:{doomed-term}").Result(); err != nil || n == 1 {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	code, _, errOut := runCLI(t, "elect", "doomed-term", "--id", "a", "--once", "--url", srv.URL(), "--ttl", "600ms", "--grace", "2s", "--", "sleep", "30")
	if code != exitLost || !strings.Contains(errOut, "leadership lost") {
		t.Fatalf("exit %d, stderr %q; want %d after SIGTERM to the command", code, errOut, exitLost)
	}
}

func TestLeaderPrintsAndWatches(t *testing.T) {
	const url = "memory://leader-watch"
	if code, out, _ := runCLI(t, "leader", "sched", "--url", url); code != exitNoLeader || out != "no leader\n" {
		t.Fatalf("no leader: exit %d, stdout %q", code, out)
	}
	b, err := dsync.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	e, err := leader.New(b, "sched", "node-b", nil)
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout := newLineWriter()
	var stderr strings.Builder
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"leader", "sched", "--url", url, "--watch", "--interval", "10ms"}, strings.NewReader(""), stdout, &stderr)
	}()
	if l := stdout.next(t); !strings.HasSuffix(l, "  no leader") {
		t.Fatalf("watch: first line %q, want no leader", l)
	}
	l, err := e.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if line := stdout.next(t); !strings.HasSuffix(line, "  node-b") {
		t.Fatalf("watch: %q, want node-b", line)
	}
	if code, out, _ := runCLI(t, "leader", "sched", "--url", url); code != exitOK || out != "node-b\n" {
		t.Fatalf("leader: exit %d, stdout %q", code, out)
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if line := stdout.next(t); !strings.HasSuffix(line, "  no leader") {
		t.Fatalf("watch after resign: %q, want no leader", line)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("watch ended with %d; stderr %q", code, stderr.String())
	}
}

func TestElectUsage(t *testing.T) {
	for _, args := range [][]string{
		{"elect"},
		{"elect", "sched", "--url", "memory://x"},
		{"elect", "sched", "--id", "a", "--", "true"},
		{"elect", "sched", "--url", "memory://x", "--ttl", "-1s", "--", "true"},
		{"leader"},
		{"leader", "sched"},
		{"leader", "sched", "--url", "memory://x", "extra"},
	} {
		t.Setenv("DSYNC_URL", "")
		if code, _, _ := runCLI(t, args...); code != exitUsage {
			t.Errorf("dsync %v: exit %d, want %d", args, code, exitUsage)
		}
	}
}

// lineWriter hands the lines written to it to a test as they come.
type lineWriter struct {
	mu      sync.Mutex // protects partial
	partial string
	lines   chan string
}

func newLineWriter() *lineWriter { return &lineWriter{lines: make(chan string, 100)} }

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial += string(p)
	for {
		i := strings.IndexByte(w.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.lines <- w.partial[:i]
		w.partial = w.partial[i+1:]
	}
}

func (w *lineWriter) next(t *testing.T) string {
	t.Helper()
	select {
	case l := <-w.lines:
		return l
	case <-time.After(30 * time.Second):
		t.Fatal("no output line within 30s")
		return ""
	}
}
