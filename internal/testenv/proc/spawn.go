package proc

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// Spawn starts a worker process of the given role, on the backend at url,
// outside a test: exe is the program to run, which must call RunIfWorker
// before anything else (the dsync command, or a test binary). Unlike Start,
// nothing ends the worker for the caller, who must call Close once done
// with it. The caller must also keep reading Events (directly or through
// Next, Wait...) while the worker runs: a worker whose output is not read
// blocks once a few thousand events are pending. The role must be
// registered in this process too (exe is normally this program).
func Spawn(exe, role, url string, args map[string]string) (*Worker, error) {
	if lookup(role) == nil {
		return nil, fmt.Errorf("proc: unknown worker role %q", role)
	}
	spec, err := json.Marshal(workerSpec{Role: role, URL: url, Args: args})
	if err != nil {
		return nil, fmt.Errorf("proc: %w", err)
	}
	workerCount.Lock()
	index := workerCount.n
	workerCount.n++
	workerCount.Unlock()

	w := &Worker{index: index, events: make(chan Event, 4096), exited: make(chan struct{})}
	w.cmd = exec.Command(exe)
	w.cmd.Env = append(os.Environ(), Env+"="+string(spec))
	w.cmd.Stderr = &w.stderr
	stdout, err := w.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("proc: %w", err)
	}
	if err := w.cmd.Start(); err != nil {
		return nil, fmt.Errorf("proc: starting worker: %w", err)
	}
	go func() {
		defer close(w.exited)
		w.readEvents(stdout)
		w.err = w.cmd.Wait()
	}()
	return w, nil
}

// Pid is the worker's process id.
func (w *Worker) Pid() int { return w.cmd.Process.Pid }

// Send sends sig to the worker process; it returns an error once the
// process has exited.
func (w *Worker) Send(sig syscall.Signal) error {
	return w.cmd.Process.Signal(sig)
}

// Close kills the worker with SIGKILL, continuing it first if it was
// stopped, and blocks until it has exited and its output has been read to
// the end (by the caller, from Events). It does nothing to a worker that
// has exited. Close is what Start's test cleanup does.
func (w *Worker) Close() {
	select {
	case <-w.exited:
		return
	default:
	}
	_ = w.cmd.Process.Signal(syscall.SIGCONT) // a stopped process cannot die
	_ = w.cmd.Process.Kill()
	<-w.exited
}
