//go:build unix

package redistest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync/internal/testenv/leakcheck"
)

// helperEnv makes the test binary run helper instead of the tests.
const helperEnv = "REDISTEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helper())
	}
	leakcheck.VerifyTestMain(m)
}

// helper starts a server, prints its pid and waits for stdin to close. It
// never closes the server: the kernel must kill it when this process dies.
func helper() int {
	s, err := StartServer(context.Background(), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(s.PID())
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

func TestStartPing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := Start(t, nil)
	if want := "127.0.0.1:" + strconv.Itoa(s.Port()); s.Addr() != want || s.Port() == 0 {
		t.Errorf("Addr() = %q, Port() = %d", s.Addr(), s.Port())
	}
	if want := "redis://" + s.Addr(); s.URL() != want {
		t.Errorf("URL() = %q, want %q", s.URL(), want)
	}
	if s.PID() == 0 {
		t.Error("PID() = 0 for a running server")
	}
	c := s.NewClient(t)
	if pong, err := c.Ping(ctx).Result(); err != nil || pong != "PONG" {
		t.Fatalf("PING = %q, %v", pong, err)
	}
	if bind := configGet(t, c, "bind"); bind != "127.0.0.1" {
		t.Errorf("bind = %q, want 127.0.0.1", bind)
	}
	if id, err := s.RunID(ctx); err != nil || len(id) != 40 {
		t.Errorf("RunID() = %q, %v; want 40 hex digits", id, err)
	}
}

func TestStartNDistinct(t *testing.T) {
	t.Parallel()
	servers := StartN(t, 3, nil)
	ports, pids, dirs := map[int]bool{}, map[int]bool{}, map[string]bool{}
	for _, s := range servers {
		ports[s.Port()], pids[s.PID()] = true, true
		dirs[configGet(t, s.NewClient(t), "dir")] = true
	}
	if len(ports) != 3 || len(pids) != 3 || len(dirs) != 3 {
		t.Errorf("3 servers share ports, processes or directories: %v %v %v", ports, pids, dirs)
	}
}

func TestKillRestartLosesData(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := Start(t, nil)
	c := s.NewClient(t)
	mustSet(t, c, "k")
	id := runID(t, s)
	pid, port := s.PID(), s.Port()

	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if s.PID() != 0 {
		t.Errorf("PID() = %d after Kill", s.PID())
	}
	assertReaped(t, pid)
	if _, err := s.RunID(ctx); err == nil {
		t.Fatal("RunID succeeded on a killed server")
	}

	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Port() != port {
		t.Errorf("port %d after Restart, was %d", s.Port(), port)
	}
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, goredis.Nil) {
		t.Errorf("GET k after restart without persistence: %v, want redis.Nil", err)
	}
	if id2 := runID(t, s); id2 == id {
		t.Errorf("run_id %s unchanged by Restart", id)
	}
}

func TestPersistentRestartKeepsData(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := Start(t, &Options{Persistent: true})
	c := s.NewClient(t)
	mustSet(t, c, "k")
	id := runID(t, s)

	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Errorf("GET k after Kill and Restart = %q, %v; want v", v, err)
	}
	if id2 := runID(t, s); id2 == id {
		t.Errorf("run_id %s unchanged by Restart", id)
	}

	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Errorf("GET k after Stop and Restart = %q, %v; want v", v, err)
	}
}

func TestStopIsGraceful(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := Start(t, nil)
	mustSet(t, s.NewClient(t), "k")
	pid := s.PID()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if s.PID() != 0 {
		t.Errorf("PID() = %d after Stop", s.PID())
	}
	assertReaped(t, pid)
	log, err := os.ReadFile(filepath.Join(s.dir, logName))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(log, []byte("ready to exit")) {
		t.Errorf("no graceful shutdown in the log:\n%s", log)
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.NewClient(t).Get(ctx, "k").Err(); !errors.Is(err, goredis.Nil) {
		t.Errorf("GET k after Stop and Restart without persistence: %v, want redis.Nil", err)
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := Start(t, nil)
	c := s.NewClient(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if !s.Paused() {
		t.Error("Paused() = false after Pause")
	}
	pingCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := c.Ping(pingCtx).Err(); err == nil {
		t.Fatal("a paused server answered PING")
	}
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("PING with a 200ms timeout took %v", elapsed)
	}

	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if s.Paused() {
		t.Error("Paused() = true after Resume")
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
}

func TestPassword(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const password = `s3cret "pass"` // quoting must survive redis-server's config parser
	s := Start(t, &Options{Password: password})

	anon := goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer anon.Close()
	if err := anon.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("PING without password: %v, want NOAUTH", err)
	}
	if err := s.NewClient(t).Ping(ctx).Err(); err != nil {
		t.Errorf("PING with NewClient: %v", err)
	}
	opts, err := goredis.ParseURL(s.URL())
	if err != nil || opts.Password != password {
		t.Fatalf("ParseURL(%q): password %q, %v", s.URL(), opts.Password, err)
	}
	byURL := goredis.NewClient(opts)
	defer byURL.Close()
	if err := byURL.Ping(ctx).Err(); err != nil {
		t.Errorf("PING with a client from URL(): %v", err)
	}
	runID(t, s)
}

func TestExtraArgs(t *testing.T) {
	t.Parallel()
	s := Start(t, &Options{ExtraArgs: []string{"--databases", "3"}})
	if got := configGet(t, s.NewClient(t), "databases"); got != "3" {
		t.Errorf("databases = %q, want 3", got)
	}
}

// Not parallel: it sets TMPDIR.
func TestStartServerFailureCleansUp(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	_, err := StartServer(t.Context(), &Options{ExtraArgs: []string{"--no-such-directive", "x"}})
	if err == nil || !strings.Contains(err.Error(), "Bad directive") {
		t.Errorf("StartServer with a bad directive: %v; want the log's \"Bad directive\"", err)
	}
	if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
		t.Errorf("failed StartServer left %v in TMPDIR", entries)
	}
}

// Not parallel: it sets TMPDIR.
func TestCloseResumesPausedAndRemovesDir(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	s, err := StartServer(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	pid := s.PID()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	assertReaped(t, pid)
	if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
		t.Errorf("Close left %v in TMPDIR", entries)
	}
	if s.Paused() || s.PID() != 0 {
		t.Errorf("after Close: Paused() = %v, PID() = %d", s.Paused(), s.PID())
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := s.Restart(t.Context()); !errors.Is(err, ErrClosed) {
		t.Errorf("Restart after Close: %v, want ErrClosed", err)
	}
	if err := s.Pause(); !errors.Is(err, ErrClosed) {
		t.Errorf("Pause after Close: %v, want ErrClosed", err)
	}
}

func TestPauseNotRunning(t *testing.T) {
	t.Parallel()
	s := Start(t, nil)
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Pause after Kill: %v, want ErrNotRunning", err)
	}
}

func TestRestartPortTaken(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := Start(t, nil)
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	// An impostor that answers the readiness probe: PONG, and INFO from
	// another process.
	stop := serve(t, s.Addr(), "+PONG\r\n$14\r\nprocess_id:1\r\n\r\n")
	err := s.Restart(ctx)
	if err == nil || !strings.Contains(err.Error(), portInUseLine) {
		t.Errorf("Restart on a taken port: %v; want the log's %q", err, portInUseLine)
	}
	if s.PID() != 0 {
		t.Errorf("PID() = %d after a failed Restart", s.PID())
	}
	stop()
	if err := s.Restart(ctx); err != nil {
		t.Fatalf("Restart once the port is free: %v", err)
	}
	runID(t, s)
}

// serve listens on addr and writes reply to every connection, which it
// keeps open until the client closes it. The returned function stops
// accepting and waits for the open connections to end.
func serve(t *testing.T, addr, reply string) (stop func()) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_, _ = io.WriteString(c, reply)
				_, _ = io.Copy(io.Discard, c)
			})
		}
	})
	return func() {
		_ = l.Close()
		wg.Wait()
	}
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := Start(t, nil)
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
				_, _, _, _ = s.PID(), s.Paused(), s.Addr(), s.URL()
			}
		}
	})
	wg.Go(func() {
		for range 5 {
			_ = s.Restart(ctx) // may fail: the loop below kills it
		}
	})
	wg.Go(func() {
		for range 5 {
			_ = s.Pause()
			_ = s.Resume()
			_ = s.Kill()
		}
	})
	time.Sleep(10 * time.Millisecond)
	close(done)
	wg.Wait()
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Paused() || s.PID() == 0 {
		t.Errorf("after Restart: Paused() = %v, PID() = %d", s.Paused(), s.PID())
	}
	runID(t, s)
}

// Not parallel: it empties PATH and searchDirs.
func TestMissingBinary(t *testing.T) {
	const want = `redis-server not found: install it with "sudo apt-get install -y redis-server" (Debian/Ubuntu) or run scripts/test, which installs it`
	t.Setenv("PATH", t.TempDir())
	saved := searchDirs
	searchDirs = []string{t.TempDir()}
	t.Cleanup(func() { searchDirs = saved })

	if _, err := Lookup(); err == nil || err.Error() != want {
		t.Errorf("Lookup() error = %v, want %q", err, want)
	}
	if _, err := StartServer(t.Context(), nil); !errors.Is(err, ErrNotInstalled) {
		t.Errorf("StartServer: %v, want ErrNotInstalled", err)
	}
	ft := &fakeTB{TB: t, dir: t.TempDir()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(ft, nil)
	}()
	<-done
	if ft.fatal != want || ft.skipped {
		t.Errorf("Start: Fatalf(%q), skipped %v; want Fatalf(%q)", ft.fatal, ft.skipped, want)
	}
}

// fakeTB records Fatalf and Skip instead of ending the test, and touches
// nothing of the real test that could fail it from another goroutine.
type fakeTB struct {
	testing.TB
	dir     string
	fatal   string
	skipped bool
}

func (f *fakeTB) Helper()         {}
func (f *fakeTB) TempDir() string { return f.dir }

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (f *fakeTB) Skip(...any)          { f.SkipNow() }
func (f *fakeTB) Skipf(string, ...any) { f.SkipNow() }
func (f *fakeTB) SkipNow() {
	f.skipped = true
	runtime.Goexit()
}

func TestServerDiesWithTestBinary(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only Linux kills a child when its parent dies (Pdeathsig)")
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1", "TMPDIR="+t.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("helper printed %q: %v; stderr:\n%s", line, err, stderr.String())
	}
	if dead(pid) {
		t.Fatalf("redis-server %d not running while the helper is", pid)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	for deadline := time.Now().Add(5 * time.Second); !dead(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("redis-server %d outlived its parent by 5s", pid)
		}
	}
}

// dead reports whether pid has exited, reaped or not.
func dead(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(stat, ')') // the state follows the command name
	return i+2 < len(stat) && stat[i+2] == 'Z'
}

// assertReaped checks that pid is neither running nor a zombie.
func assertReaped(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("process %d still exists (kill 0: %v)", pid, err)
	}
}

func mustSet(t *testing.T, c *goredis.Client, key string) {
	t.Helper()
	if err := c.Set(t.Context(), key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
}

func runID(t *testing.T, s *Server) string {
	t.Helper()
	id, err := s.RunID(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func configGet(t *testing.T, c *goredis.Client, name string) string {
	t.Helper()
	m, err := c.ConfigGet(t.Context(), name).Result()
	if err != nil {
		t.Fatal(err)
	}
	return m[name]
}
