// Package redistest runs real redis-server processes on loopback for tests,
// fault injection and the CLI demo.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	readyTimeout  = 10 * time.Second         // bound on the wait for PONG after a start
	probeTimeout  = time.Second              // bound on one readiness probe, for a server that accepts but hangs
	maxProbeDelay = 50 * time.Millisecond    // longest pause between readiness probes
	stopTimeout   = 10 * time.Second         // bound on a graceful Stop before SIGKILL
	startAttempts = 5                        // ports tried when the one chosen is taken before redis-server binds it
	logName       = "redis.log"              // in the data directory
	logTailLines  = 20                       // log lines quoted by a failed start
	portInUseLine = "Address already in use" // redis-server's log when bind fails
)

var (
	// ErrNotInstalled is returned by Lookup, and so by every start, when no
	// redis-server binary is found.
	ErrNotInstalled = errors.New(`redis-server not found: install it with "sudo apt-get install -y redis-server" (Debian/Ubuntu) or run scripts/test, which installs it`)
	// ErrNotRunning is returned by Pause when no process is running.
	ErrNotRunning = errors.New("redistest: server not running")
	// ErrClosed is returned by Restart and Pause after Close.
	ErrClosed = errors.New("redistest: server closed")

	errPortInUse = errors.New("redistest: port already in use")
)

// searchDirs are tried after $PATH; a variable so that a test can hide the
// binary.
var searchDirs = []string{"/usr/bin", "/usr/sbin"}

// Lookup returns the path of redis-server, searching $PATH and then
// /usr/bin and /usr/sbin, or ErrNotInstalled.
func Lookup() (string, error) {
	if path, err := exec.LookPath("redis-server"); err == nil {
		return path, nil
	}
	for _, dir := range searchDirs {
		path := filepath.Join(dir, "redis-server")
		if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return path, nil
		}
	}
	return "", ErrNotInstalled
}

// Options configure a server. A nil *Options means the zero value.
type Options struct {
	// Persistent turns on the append-only file with appendfsync always, so
	// that a Restart, even after Kill, keeps every acknowledged write.
	// Default false: nothing is written to disk and a restart starts empty,
	// like a crash without persistence.
	Persistent bool
	// Password, when not empty, is required from clients (requirepass).
	// Default "": no authentication.
	Password string
	// ExtraArgs are appended to the redis-server command line, after the
	// settings above, which they therefore override. Default none.
	ExtraArgs []string
}

// Server is one redis-server bound to 127.0.0.1, with a port and a data
// directory that it keeps across restarts. Create it with StartServer,
// Start or StartN. Its methods are safe for concurrent use.
type Server struct {
	bin      string // redis-server binary
	dir      string // data directory: the log and, if persistent, the AOF
	ownsDir  bool   // Close removes dir
	port     int
	password string
	args     []string // command line, the same for every start

	mu     sync.Mutex // protects the fields below
	proc   *process   // latest process; nil after Kill, Stop, Close and a failed Restart
	paused bool       // proc was sent SIGSTOP and no SIGCONT since
	closed bool
}

// process is one run of redis-server. A goroutine owned by it reaps the
// process and then closes done.
type process struct {
	cmd       *exec.Cmd
	logOffset int64         // size of the log when this run started
	done      chan struct{} // closed once cmd.Wait has returned
}

// StartServer starts a redis-server in a new temporary data directory and
// blocks until it answers PING, for at most 10 s or until ctx is done. If
// the free port it picked is taken before redis-server binds it, it tries
// another, a few times. On failure nothing is left running or on disk and
// the error quotes the end of the server's log. The caller must Close the
// Server.
func StartServer(ctx context.Context, opts *Options) (*Server, error) {
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	s, err := start(ctx, opts, dir, true)
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	return s, nil
}

func start(ctx context.Context, opts *Options, dir string, ownsDir bool) (*Server, error) {
	if opts == nil {
		opts = &Options{}
	}
	bin, err := Lookup()
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{
			bin:      bin,
			dir:      dir,
			ownsDir:  ownsDir,
			port:     port,
			password: opts.Password,
			args:     serverArgs(port, opts),
		}
		p, err := s.spawn()
		if err != nil {
			return nil, err
		}
		if err = s.awaitReady(ctx, p); err == nil {
			s.proc = p
			return s, nil
		}
		if kerr := p.kill(); kerr != nil {
			return nil, errors.Join(err, kerr)
		}
		if !errors.Is(err, errPortInUse) || attempt == startAttempts {
			return nil, err
		}
	}
}

// freePort returns a loopback port that the kernel had free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redistest: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

func serverArgs(port int, opts *Options) []string {
	appendonly := "no"
	if opts.Persistent {
		appendonly = "yes"
	}
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--daemonize", "no",
		"--protected-mode", "no",
		"--save", "",
		// Relative to the working directory, the data directory, so that
		// no path needs quoting for redis-server's config parser.
		"--dir", ".",
		"--logfile", logName,
		"--appendonly", appendonly,
		"--appendfsync", "always",
	}
	if opts.Password != "" {
		args = append(args, "--requirepass", opts.Password)
	}
	return append(args, opts.ExtraArgs...)
}

// spawn starts redis-server and the goroutine that reaps it; it does not
// wait for readiness.
func (s *Server) spawn() (*process, error) {
	log, err := os.OpenFile(filepath.Join(s.dir, logName), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	defer log.Close()
	offset, err := log.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir = s.dir
	// What redis-server prints before it opens its logfile, such as a bad
	// directive in ExtraArgs, goes to the log too.
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	p := &process{cmd: cmd, logOffset: offset, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // the exit status is in cmd.ProcessState
		close(p.done)
	}()
	return p, nil
}

// awaitReady blocks until p answers PING on s's port, p exits, readyTimeout
// passes or ctx is done. A PONG from another process on the port does not
// count.
func (s *Server) awaitReady(ctx context.Context, p *process) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	delay := time.Millisecond
	for {
		err := s.probe(ctx, p.cmd.Process.Pid)
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			tail := s.logTail(p)
			if strings.Contains(tail, portInUseLine) {
				return fmt.Errorf("%w: redis-server on %s exited (%v); log:\n%s", errPortInUse, s.Addr(), p.cmd.ProcessState, tail)
			}
			return fmt.Errorf("redistest: redis-server on %s exited during startup (%v); log:\n%s", s.Addr(), p.cmd.ProcessState, tail)
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("redistest: redis-server on %s did not answer PING: %w; log:\n%s", s.Addr(), err, s.logTail(p)), ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, maxProbeDelay)
	}
}

// probe makes one PING on a new connection and checks that process pid
// answered it.
func (s *Server) probe(ctx context.Context, pid int) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	c, err := s.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if reply, err := c.do("PING"); err != nil {
		return err
	} else if reply != "PONG" {
		return fmt.Errorf("redistest: PING answered %q", reply)
	}
	info, err := c.do("INFO", "server")
	if err != nil {
		return err
	}
	if got := infoField(info, "process_id"); got != strconv.Itoa(pid) {
		return fmt.Errorf("redistest: port %d is served by process %s, not %d", s.port, got, pid)
	}
	return nil
}

// logTail returns the last lines that p's run wrote to the log.
func (s *Server) logTail(p *process) string {
	b, err := os.ReadFile(filepath.Join(s.dir, logName))
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	if p.logOffset <= int64(len(b)) {
		b = b[p.logOffset:]
	}
	text := strings.TrimRight(string(b), "\n")
	if text == "" {
		return "(empty)"
	}
	lines := strings.Split(text, "\n")
	return strings.Join(lines[max(0, len(lines)-logTailLines):], "\n")
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process group, unless the process is reaped.
func (p *process) signal(sig os.Signal) error {
	if p.exited() {
		return nil
	}
	return signalGroup(p.cmd.Process, sig)
}

// kill sends SIGKILL to the process group and blocks until the process is
// reaped.
func (p *process) kill() error {
	if err := p.signal(sigKill); err != nil {
		return err
	}
	<-p.done
	return nil
}

// Addr returns "127.0.0.1:PORT". The port stays the same across restarts.
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Port returns the server's TCP port.
func (s *Server) Port() int { return s.port }

// URL returns "redis://127.0.0.1:PORT", with the password as userinfo
// (":PASSWORD@") when one is set.
func (s *Server) URL() string {
	u := url.URL{Scheme: "redis", Host: s.Addr()}
	if s.password != "" {
		u.User = url.UserPassword("", s.password)
	}
	return u.String()
}

// PID returns the process id of the running redis-server, or 0 if none is
// running.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.exited() {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// RunID returns the run_id from INFO server, which is new for every start.
// It blocks until the server answers or ctx is done; a paused server answers
// after Resume.
func (s *Server) RunID(ctx context.Context) (string, error) {
	info, err := s.info(ctx)
	if err != nil {
		if ctx.Err() != nil {
			err = errors.Join(err, ctx.Err())
		}
		return "", err
	}
	id := infoField(info, "run_id")
	if id == "" {
		return "", errors.New("redistest: no run_id in INFO server")
	}
	return id, nil
}

func (s *Server) info(ctx context.Context) (string, error) {
	c, err := s.dial(ctx)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.do("INFO", "server")
}

// Kill sends SIGKILL to the server's process group and blocks until the
// process is reaped. The port and data directory are kept for Restart. Kill
// does nothing if no process is running.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.killLocked()
}

func (s *Server) killLocked() error {
	p := s.proc
	if p == nil {
		return nil
	}
	if s.paused {
		// SIGKILL ends a stopped process anyway; continuing it first leaves
		// nothing stopped if the kill fails.
		_ = p.signal(sigCont)
	}
	if err := p.kill(); err != nil {
		return err
	}
	s.proc, s.paused = nil, false
	return nil
}

// Restart kills the running process, if any, starts a new one on the same
// port and data directory, and blocks until it answers PING, for at most
// 10 s or until ctx is done. A persistent server reloads its AOF; any other
// starts empty. On failure, for instance if the port was taken meanwhile,
// the server is left not running and the error quotes the end of its log.
// Restart returns ErrClosed after Close.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	err := s.killLocked()
	var p *process
	if err == nil {
		p, err = s.spawn()
		s.proc = p
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	// Without the lock, so that Kill, Close and the accessors do not wait for
	// readiness; whoever replaces s.proc meanwhile has reaped p.
	if err := s.awaitReady(ctx, p); err != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.proc == p {
			return errors.Join(err, s.killLocked())
		}
		return err
	}
	return nil
}

// Stop resumes the server if paused, shuts it down with SIGTERM and blocks
// until the process is reaped. A persistent server flushes its AOF first;
// any other writes nothing (its save points are off). After 10 s without
// exiting, the process is killed and Stop returns an error. Stop does
// nothing if no process is running.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil {
		return nil
	}
	if s.paused {
		if err := p.signal(sigCont); err != nil {
			return err
		}
		s.paused = false
	}
	if err := p.signal(sigTerm); err != nil {
		return err
	}
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-p.done:
		s.proc = nil
		return nil
	case <-timer.C:
		return errors.Join(
			fmt.Errorf("redistest: redis-server on %s still running %v after SIGTERM; killed", s.Addr(), stopTimeout),
			s.killLocked())
	}
}

// Pause stops the server's process group with SIGSTOP: connections stay
// open and requests go unanswered until Resume. Pausing a paused server
// does nothing. Pause returns ErrNotRunning if no process is running and
// ErrClosed after Close.
func (s *Server) Pause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.proc == nil || s.proc.exited() {
		return ErrNotRunning
	}
	if s.paused {
		return nil
	}
	if err := s.proc.signal(sigStop); err != nil {
		return err
	}
	s.paused = true
	return nil
}

// Resume continues a paused server with SIGCONT; it does nothing if the
// server is not paused.
func (s *Server) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.paused {
		return nil
	}
	if err := s.proc.signal(sigCont); err != nil {
		return err
	}
	s.paused = false
	return nil
}

// Paused reports whether Pause was called and neither Resume, Kill, Stop,
// Restart nor Close since.
func (s *Server) Paused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused
}

// Close resumes the server if paused, kills it, blocks until the process is
// reaped, and removes the data directory if StartServer created it. Later
// calls return nil.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.killLocked()
	if s.ownsDir {
		err = errors.Join(err, os.RemoveAll(s.dir))
	}
	return err
}
