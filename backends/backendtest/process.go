package backendtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/internal/leakcheck"
)

// Checks that need a client to die or freeze for real (a holder killed
// with SIGKILL, a leader stopped with SIGSTOP past its TTL), or contention
// between processes rather than goroutines, run workers: the test binary
// started again with workerEnv set, which Main turns into a call of the
// worker function named in it instead of the tests. A worker opens the
// backend from Harness.URL and reports what it does as lines of events on
// its standard output, each stamped with CLOCK_MONOTONIC, a clock all the
// processes of the machine share, so that the parent can order events of
// different processes.

// workerEnv carries a worker's spec (JSON) to the child process.
const workerEnv = "DSYNC_BACKENDTEST_WORKER"

// Main is the TestMain of a package that runs the conformance suite: in a
// worker process it runs the worker and exits; otherwise it runs the tests
// with the goroutine-leak check of internal/leakcheck.
//
//	func TestMain(m *testing.M) { backendtest.Main(m) }
func Main(m *testing.M) {
	if spec := os.Getenv(workerEnv); spec != "" {
		os.Exit(runWorker(spec))
	}
	leakcheck.VerifyTestMain(m)
}

// workerSpec tells a worker process what to do.
type workerSpec struct {
	Role string
	URL  string
	Args map[string]string
}

// workerFunc is the body of a worker role. It reports through emit and
// returns when its work is done or ctx ends (SIGTERM). Its error is
// reported as a "fail" event and a non-zero exit status.
type workerFunc func(ctx context.Context, b *dsync.Backend, args workerArgs, emit func(name string, fields ...string)) error

// workerRoles maps role names to their functions. Files of this package
// register roles from init functions.
var workerRoles = map[string]workerFunc{}

func registerWorker(role string, fn workerFunc) {
	if _, dup := workerRoles[role]; dup {
		panic("backendtest: worker role registered twice: " + role)
	}
	workerRoles[role] = fn
}

// workerArgs are a worker's named arguments.
type workerArgs map[string]string

func (a workerArgs) str(name string) string { return a[name] }

func (a workerArgs) int(name string) int {
	n, err := strconv.Atoi(a[name])
	if err != nil {
		panic(fmt.Sprintf("backendtest: worker argument %s=%q: %v", name, a[name], err))
	}
	return n
}

func (a workerArgs) duration(name string) time.Duration {
	d, err := time.ParseDuration(a[name])
	if err != nil {
		panic(fmt.Sprintf("backendtest: worker argument %s=%q: %v", name, a[name], err))
	}
	return d
}

// monotonic reads CLOCK_MONOTONIC, which every process of the machine
// shares (Go's own monotonic readings are relative to the process).
func monotonic() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return time.Duration(ts.Nano())
}

// runWorker runs the worker described by spec in this process and returns
// its exit status.
func runWorker(spec string) int {
	var ws workerSpec
	if err := json.Unmarshal([]byte(spec), &ws); err != nil {
		fmt.Fprintf(os.Stderr, "backendtest worker: bad spec %q: %v\n", spec, err)
		return 2
	}
	fn := workerRoles[ws.Role]
	if fn == nil {
		fmt.Fprintf(os.Stderr, "backendtest worker: unknown role %q\n", ws.Role)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	emit := func(name string, fields ...string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "%s %d %s\n", name, monotonic(), strings.Join(fields, " "))
		_ = out.Flush() // the parent reads events as they come, and may kill us next
	}
	b, err := dsync.Open(ctx, ws.URL)
	if err != nil {
		emit("fail", "open:", err.Error())
		return 1
	}
	defer b.Close()
	emit("ready")
	if err := fn(ctx, b, ws.Args, emit); err != nil {
		emit("fail", err.Error())
		return 1
	}
	emit("exit")
	return 0
}

// event is one line a worker reported.
type event struct {
	Worker int           // index of the worker in the order they were started
	Name   string        // "ready", "acquired", ...
	At     time.Duration // CLOCK_MONOTONIC
	Fields []string
}

// worker is a running worker process, owned by the test that started it:
// the test's cleanup kills it if it is still running and awaits it.
type worker struct {
	index  int
	cmd    *exec.Cmd
	events chan event // every event, in order; closed when stdout ends
	exited chan struct{}
	err    error // the exit status; set before exited is closed
	stderr strings.Builder
}

var workerCount struct {
	sync.Mutex
	n int
}

// startWorker starts a worker process of the given role on the backend at
// s.h.URL. The test fails if the harness has no URL; callers check
// s.crossProcess first.
func (s *suite) startWorker(t testing.TB, role string, args map[string]string) *worker {
	t.Helper()
	if s.h.URL == "" {
		t.Fatal("backendtest: startWorker needs Harness.URL")
	}
	if workerRoles[role] == nil {
		t.Fatalf("backendtest: unknown worker role %q", role)
	}
	spec, err := json.Marshal(workerSpec{Role: role, URL: s.h.URL, Args: args})
	if err != nil {
		t.Fatal(err)
	}
	workerCount.Lock()
	index := workerCount.n
	workerCount.n++
	workerCount.Unlock()

	w := &worker{index: index, events: make(chan event, 4096), exited: make(chan struct{})}
	w.cmd = exec.Command(os.Args[0])
	w.cmd.Env = append(os.Environ(), workerEnv+"="+string(spec))
	w.cmd.Stderr = &w.stderr
	stdout, err := w.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		t.Fatalf("starting worker: %v", err)
	}
	go func() {
		defer close(w.exited)
		w.readEvents(stdout)
		w.err = w.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = w.cmd.Process.Signal(syscall.SIGCONT) // a stopped process cannot die
		_ = w.cmd.Process.Kill()
		<-w.exited
	})
	return w
}

func (w *worker) readEvents(r io.Reader) {
	defer close(w.events)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		at, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		w.events <- event{Worker: w.index, Name: f[0], At: time.Duration(at), Fields: f[2:]}
	}
}

// next returns the worker's next event, failing the test if the worker
// ends or reports a failure first, or nothing comes within timeout.
func (w *worker) next(t testing.TB, timeout time.Duration) event {
	t.Helper()
	select {
	case ev, ok := <-w.events:
		if !ok {
			<-w.exited
			t.Fatalf("worker %d ended (%v) before its next event; stderr:\n%s", w.index, w.err, w.stderr.String())
		}
		if ev.Name == "fail" {
			t.Fatalf("worker %d failed: %s", w.index, strings.Join(ev.Fields, " "))
		}
		return ev
	case <-time.After(timeout):
		t.Fatalf("worker %d: no event within %v", w.index, timeout)
		return event{}
	}
}

// expect returns the worker's next event, failing the test unless it is
// named name.
func (w *worker) expect(t testing.TB, name string, timeout time.Duration) event {
	t.Helper()
	ev := w.next(t, timeout)
	if ev.Name != name {
		t.Fatalf("worker %d: event %q %v, want %q", w.index, ev.Name, ev.Fields, name)
	}
	return ev
}

// signal sends sig to the worker process.
func (w *worker) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := w.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("worker %d: %v: %v", w.index, sig, err)
	}
}

// kill kills the worker with SIGKILL and waits until it is gone: it never
// runs another instruction, let alone a release.
func (w *worker) kill(t testing.TB) {
	t.Helper()
	_ = w.cmd.Process.Kill()
	<-w.exited
}

// wait waits until the worker exits and returns its events not yet read,
// failing the test if it does not exit within timeout or exits with an
// error.
func (w *worker) wait(t testing.TB, timeout time.Duration) []event {
	t.Helper()
	var evs []event
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-w.events:
			if !ok {
				<-w.exited
				if w.err != nil {
					t.Fatalf("worker %d: %v; stderr:\n%s", w.index, w.err, w.stderr.String())
				}
				return evs
			}
			if ev.Name == "fail" {
				t.Fatalf("worker %d failed: %s", w.index, strings.Join(ev.Fields, " "))
			}
			evs = append(evs, ev)
		case <-deadline:
			t.Fatalf("worker %d did not exit within %v", w.index, timeout)
		}
	}
}

// crossProcess reports whether the backend can be shared between
// processes (it has a URL), logging why the check does not apply when not.
func (s *suite) crossProcess(t testing.TB) bool {
	t.Helper()
	if s.h.URL == "" {
		t.Log("not run: the harness has no URL, so the backend cannot be shared with other processes (the memory backend lives in one process)")
		return false
	}
	return true
}
