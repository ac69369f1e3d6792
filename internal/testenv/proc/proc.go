// Package proc runs test workers as separate OS processes, for checks that
// need a client to die or freeze for real (a holder killed with SIGKILL, a
// leader stopped with SIGSTOP past its TTL) or contention between
// processes rather than goroutines. A worker is the test binary started
// again with Env set, which RunIfWorker (called first in TestMain) turns
// into a call of the registered worker function named in it instead of the
// tests. A worker opens its backend from a URL and reports what it does as
// lines of events on its standard output, each stamped with
// CLOCK_MONOTONIC, a clock all the processes of the machine share, so that
// the parent can order events of different processes.
package proc

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
)

// Env carries a worker's spec (JSON) to the child process.
const Env = "DSYNC_TEST_WORKER"

// RunIfWorker runs the worker and exits when this process is a worker;
// otherwise it returns at once. Call it first in TestMain.
func RunIfWorker() {
	if spec := os.Getenv(Env); spec != "" {
		os.Exit(runWorker(spec))
	}
}

// workerSpec tells a worker process what to do.
type workerSpec struct {
	Role string
	URL  string
	Args map[string]string
}

// Func is the body of a worker role. It reports through emit and returns
// when its work is done or ctx ends (SIGTERM). Its error is reported as a
// "fail" event and a non-zero exit status. The worker has emitted "ready"
// (its backend is open) before Func is called.
type Func func(ctx context.Context, b *dsync.Backend, args Args, emit Emit) error

// Emit reports an event: a name and fields without spaces.
type Emit func(name string, fields ...string)

var (
	rolesMu sync.Mutex
	roles   = map[string]Func{} // protected by rolesMu
)

// Register makes fn the worker role named role. Packages register their
// roles from init functions; a role registered twice panics.
func Register(role string, fn Func) {
	rolesMu.Lock()
	defer rolesMu.Unlock()
	if _, dup := roles[role]; dup {
		panic("proc: worker role registered twice: " + role)
	}
	roles[role] = fn
}

func lookup(role string) Func {
	rolesMu.Lock()
	defer rolesMu.Unlock()
	return roles[role]
}

// Args are a worker's named arguments. The accessors panic on a malformed
// value: the parent wrote it, so it is a bug in the test.
type Args map[string]string

// Str returns the argument name.
func (a Args) Str(name string) string { return a[name] }

// Int returns the argument name as an int.
func (a Args) Int(name string) int {
	n, err := strconv.Atoi(a[name])
	if err != nil {
		panic(fmt.Sprintf("proc: worker argument %s=%q: %v", name, a[name], err))
	}
	return n
}

// Duration returns the argument name as a time.Duration.
func (a Args) Duration(name string) time.Duration {
	d, err := time.ParseDuration(a[name])
	if err != nil {
		panic(fmt.Sprintf("proc: worker argument %s=%q: %v", name, a[name], err))
	}
	return d
}

// Monotonic reads CLOCK_MONOTONIC, which every process of the machine
// shares (Go's own monotonic readings are relative to the process).
func Monotonic() time.Duration {
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
		fmt.Fprintf(os.Stderr, "proc worker: bad spec %q: %v\n", spec, err)
		return 2
	}
	fn := lookup(ws.Role)
	if fn == nil {
		fmt.Fprintf(os.Stderr, "proc worker: unknown role %q\n", ws.Role)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	emit := func(name string, fields ...string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "%s %d %s\n", name, Monotonic(), strings.Join(fields, " "))
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

// Event is one line a worker reported.
type Event struct {
	Worker int           // index of the worker in the order they were started
	Name   string        // "ready", "acquired", ...
	At     time.Duration // CLOCK_MONOTONIC
	Fields []string
}

// Worker is a running worker process, owned by the test that started it:
// the test's cleanup kills it if it is still running and awaits it.
type Worker struct {
	index  int
	cmd    *exec.Cmd
	events chan Event // every event, in order; closed when stdout ends
	exited chan struct{}
	err    error // the exit status; set before exited is closed
	stderr strings.Builder
}

// Index numbers the worker in the order workers were started (Event.Worker).
func (w *Worker) Index() int { return w.index }

// Events delivers the worker's events in order; it is closed when the
// worker's output ends. Next, Expect and Wait read from it too.
func (w *Worker) Events() <-chan Event { return w.events }

// Exited is closed once the worker process has exited and been awaited.
func (w *Worker) Exited() <-chan struct{} { return w.exited }

// Err is the worker's exit status, once Exited is closed.
func (w *Worker) Err() error { return w.err }

// Stderr is what the worker wrote to its standard error, once Exited is
// closed.
func (w *Worker) Stderr() string { return w.stderr.String() }

var workerCount struct {
	sync.Mutex
	n int
}

// Start starts a worker process of the given role, on the backend at url.
func Start(t testing.TB, role, url string, args map[string]string) *Worker {
	t.Helper()
	if lookup(role) == nil {
		t.Fatalf("proc: unknown worker role %q", role)
	}
	spec, err := json.Marshal(workerSpec{Role: role, URL: url, Args: args})
	if err != nil {
		t.Fatal(err)
	}
	workerCount.Lock()
	index := workerCount.n
	workerCount.n++
	workerCount.Unlock()

	w := &Worker{index: index, events: make(chan Event, 4096), exited: make(chan struct{})}
	w.cmd = exec.Command(os.Args[0])
	w.cmd.Env = append(os.Environ(), Env+"="+string(spec))
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

func (w *Worker) readEvents(r io.Reader) {
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
		w.events <- Event{Worker: w.index, Name: f[0], At: time.Duration(at), Fields: f[2:]}
	}
}

// Next returns the worker's next event, failing the test if the worker
// ends or reports a failure first, or nothing comes within timeout.
func (w *Worker) Next(t testing.TB, timeout time.Duration) Event {
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
		return Event{}
	}
}

// Expect returns the worker's next event, failing the test unless it is
// named name.
func (w *Worker) Expect(t testing.TB, name string, timeout time.Duration) Event {
	t.Helper()
	ev := w.Next(t, timeout)
	if ev.Name != name {
		t.Fatalf("worker %d: event %q %v, want %q", w.index, ev.Name, ev.Fields, name)
	}
	return ev
}

// Signal sends sig to the worker process.
func (w *Worker) Signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := w.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("worker %d: %v: %v", w.index, sig, err)
	}
}

// Kill kills the worker with SIGKILL and waits until it is gone: it never
// runs another instruction, let alone a release.
func (w *Worker) Kill(t testing.TB) {
	t.Helper()
	_ = w.cmd.Process.Kill()
	<-w.exited
}

// Wait waits until the worker exits and returns its events not yet read,
// failing the test if it does not exit within timeout or exits with an
// error.
func (w *Worker) Wait(t testing.TB, timeout time.Duration) []Event {
	t.Helper()
	var evs []Event
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
