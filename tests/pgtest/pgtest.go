// Package pgtest runs a throwaway PostgreSQL cluster for tests: initdb in a
// new temporary directory, postgres on a free loopback port with its unix
// socket in that directory, stopped and removed by Close. It finds the
// server binaries on $PATH or in /usr/lib/postgresql/*/bin (Debian's
// layout, the newest version first).
//
// PostgreSQL refuses to run as root. When the tests run as root (in a
// container, say), initdb and postgres are started as the unprivileged
// user "postgres" (which Debian's package creates; else "nobody"), by
// setting the child's user and group at fork (syscall.Credential): no
// su, sudo or runuser in between, so the process we signal and reap is
// postgres itself. The data directory is made theirs.
package pgtest

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
)

// ErrNotInstalled is the error of a start when no PostgreSQL server
// binaries are found.
var ErrNotInstalled = errors.New(`PostgreSQL server binaries (initdb, postgres) not found on $PATH or in /usr/lib/postgresql/*/bin: ` +
	`install them with "sudo apt-get install -y postgresql" (Debian/Ubuntu), or run scripts/test, which installs them`)

const (
	readyTimeout  = 60 * time.Second // bound on initdb plus the server's start
	stopTimeout   = 10 * time.Second // bound on a fast shutdown before SIGKILL
	startAttempts = 5                // ports tried when the one chosen is taken first
	logLines      = 30               // server log lines kept for errors
	readyLine     = "database system is ready to accept connections"
	portInUseLine = "Address already in use"
	superuser     = "postgres"
)

// globDirs is where Lookup looks after $PATH; a variable so that a test
// can hide the binaries.
var globDirs = "/usr/lib/postgresql/*/bin"

// Lookup returns the directory holding initdb and postgres, or
// ErrNotInstalled.
func Lookup() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(p)
		if isExec(filepath.Join(dir, "postgres")) {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob(globDirs)
	// Newest major version first: /usr/lib/postgresql/16/bin before 9.6's.
	slices.SortFunc(dirs, func(a, b string) int { return versionOf(b) - versionOf(a) })
	for _, dir := range dirs {
		if isExec(filepath.Join(dir, "initdb")) && isExec(filepath.Join(dir, "postgres")) {
			return dir, nil
		}
	}
	return "", ErrNotInstalled
}

func versionOf(bindir string) int {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(bindir)), 64)
	return int(v * 100)
}

func isExec(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// Server is one PostgreSQL cluster on 127.0.0.1, with trust
// authentication for the superuser "postgres" and no durability (fsync
// off). Its methods are safe for concurrent use.
type Server struct {
	dir  string // temporary directory: data/, the socket, removed by Close
	port int
	cmd  *exec.Cmd
	done chan struct{} // closed once the server is reaped

	mu        sync.Mutex // protects log and ready
	log       []string   // the last logLines lines of the server's stderr
	ready     chan struct{}
	readySeen bool
	closeOnce sync.Once
	closeErr  error
}

// StartServer creates a cluster in a new temporary directory and starts it
// on a free loopback port, blocking until it accepts connections, for at
// most a minute or until ctx is done. On failure nothing is left running
// or on disk, and the error quotes the server's log. The caller must Close
// the Server.
func StartServer(ctx context.Context) (*Server, error) {
	bindir, err := Lookup()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	s, err := start(ctx, bindir, dir, cred)
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	return s, nil
}

// Start starts a server like StartServer and registers its Close with
// t.Cleanup. On failure, missing binaries included, it calls t.Fatalf:
// tests never skip for lack of PostgreSQL.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := StartServer(t.Context())
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("%v", err)
		}
	})
	return s
}

// credential returns the user to run PostgreSQL as when this process is
// root, or nil to run it as ourselves.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 == nil && err2 == nil {
			return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
		}
	}
	return nil, errors.New(`pgtest: running as root, and neither user "postgres" nor "nobody" exists to run PostgreSQL as (it refuses root)`)
}

func start(ctx context.Context, bindir, dir string, cred *syscall.Credential) (*Server, error) {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if cred != nil {
		// The server's user must own the directory it writes, and reach it.
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("pgtest: %w", err)
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bindir, "initdb"),
		"-D", data, "-U", superuser, "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	initdb.Env = append(os.Environ(), "LC_ALL=C")
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pgtest: initdb: %w\n%s", err, out)
	}
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{dir: dir, port: port, done: make(chan struct{}), ready: make(chan struct{})}
		if err := s.spawn(bindir, data, cred); err != nil {
			return nil, err
		}
		select {
		case <-s.ready:
			return s, nil
		case <-s.done:
			tail := s.logTail()
			if strings.Contains(tail, portInUseLine) && attempt < startAttempts {
				continue
			}
			return nil, fmt.Errorf("pgtest: postgres on port %d exited during startup (%v); log:\n%s", port, s.cmd.ProcessState, tail)
		case <-ctx.Done():
			_ = s.stop()
			return nil, fmt.Errorf("pgtest: postgres on port %d not ready: %w; log:\n%s", port, ctx.Err(), s.logTail())
		}
	}
}

// freePort returns a loopback port that the kernel had free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtest: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// spawn starts postgres and the goroutine that reads its log and then
// reaps it, closing s.done.
func (s *Server) spawn(bindir, data string, cred *syscall.Credential) error {
	cmd := exec.Command(filepath.Join(bindir, "postgres"),
		"-D", data, "-p", strconv.Itoa(s.port), "-k", s.dir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "lc_messages=C")
	// Its own process group, so that a terminal's Ctrl-C reaches only the
	// test binary, whose cleanup stops the server; killed by the kernel if
	// the thread that started it exits (a crashed test binary).
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: starting postgres: %w", err)
	}
	s.cmd = cmd
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			s.logLine(sc.Text())
		}
		_ = cmd.Wait() // the exit status is in cmd.ProcessState
		close(s.done)
	}()
	return nil
}

func (s *Server) logLine(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, line)
	if len(s.log) > logLines {
		s.log = s.log[len(s.log)-logLines:]
	}
	if !s.readySeen && strings.Contains(line, readyLine) {
		s.readySeen = true
		close(s.ready)
	}
}

func (s *Server) logTail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.log) == 0 {
		return "(empty)"
	}
	return strings.Join(s.log, "\n")
}

// stop asks for a fast shutdown (SIGINT), and kills the server if it has
// not exited within stopTimeout; it blocks until the server is reaped.
func (s *Server) stop() error {
	select {
	case <-s.done:
		return nil
	default:
	}
	if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("pgtest: %w", err)
	}
	select {
	case <-s.done:
		return nil
	case <-time.After(stopTimeout):
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL) // the group: postmaster and backends
	<-s.done
	return fmt.Errorf("pgtest: postgres on port %d did not shut down within %v; killed. log:\n%s", s.port, stopTimeout, s.logTail())
}

// Close stops the server and removes its directory. Calls after the first
// return the first one's result.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.closeErr = errors.Join(s.stop(), os.RemoveAll(s.dir))
	})
	return s.closeErr
}

// Port returns the server's TCP port on 127.0.0.1.
func (s *Server) Port() int { return s.port }

// DSN returns the URL of database db on the server, as the superuser.
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", superuser, s.port, db)
}

// NewDatabase creates a database of its own for the test and returns its
// URL (see DSN), for clients that open their own connections (worker
// processes, say); t.Cleanup drops it, closing the connections left on it.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	admin, err := sql.Open("pgx", s.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	name := fmt.Sprintf("t%d_%s", time.Now().UnixNano(), strings.ToLower(strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, t.Name())))
	name = name[:min(len(name), 63)]
	if _, err := admin.ExecContext(t.Context(), "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: CREATE DATABASE %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: DROP DATABASE %s: %v", name, err)
		}
	})
	return s.DSN(name)
}

// NewDB creates a database of its own for the test (see NewDatabase), and
// returns a connection pool to it through pgx's database/sql driver;
// t.Cleanup closes the pool and drops the database.
func (s *Server) NewDB(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", s.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}
