package torture

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/lease"
	"github.com/dsync-dev/dsync/internal/testenv/proc"
)

// Spawner starts a worker process of a role on the backend at url:
// proc.Start in a test, proc.Spawn in a program.
type Spawner func(role, url string, args map[string]string) (*proc.Worker, error)

// Harness runs torture workers, records what they report and the faults
// injected meanwhile, and checks the result. Every time it records is
// CLOCK_MONOTONIC (proc.Monotonic), the clock of the workers' events. Its
// methods are safe for concurrent use.
type Harness struct {
	spawn Spawner
	store *Store

	mu      sync.Mutex // protects the fields below
	events  []proc.Event
	changed chan struct{} // closed and replaced at every event
	workers []*Worker
	spans   []*Injection
	stopped bool

	readers sync.WaitGroup // one reader per worker, until its output ends
}

// Worker is a worker process of a harness.
type Worker struct {
	h   *Harness
	w   *proc.Worker
	cfg WorkerConfig
	url string

	mu     sync.Mutex // protects died and paused
	died   time.Duration
	paused bool
}

// New returns a harness that starts workers with spawn and whose workers
// write to store. The caller keeps ownership of store and must call Stop.
func New(spawn Spawner, store *Store) *Harness {
	return &Harness{spawn: spawn, store: store, changed: make(chan struct{})}
}

// Start starts a worker on the backend at url; it does not wait for it to
// be ready (see AwaitReady).
func (h *Harness) Start(url string, cfg WorkerConfig) (*Worker, error) {
	h.mu.Lock()
	stopped := h.stopped
	h.mu.Unlock()
	if stopped {
		return nil, errors.New("torture: harness stopped")
	}
	pw, err := h.spawn(Role, url, cfg.Args())
	if err != nil {
		return nil, err
	}
	w := &Worker{h: h, w: pw, cfg: cfg, url: url}
	h.mu.Lock()
	h.workers = append(h.workers, w)
	h.mu.Unlock()
	h.readers.Go(func() {
		for ev := range pw.Events() {
			h.record(ev)
		}
	})
	return w, nil
}

func (h *Harness) record(ev proc.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, ev)
	close(h.changed)
	h.changed = make(chan struct{})
}

// Index is the worker's proc index (proc.Event.Worker).
func (w *Worker) Index() int { return w.w.Index() }

// ID is the worker's ID.
func (w *Worker) ID() string { return w.cfg.ID }

// Config is the worker's configuration.
func (w *Worker) Config() WorkerConfig { return w.cfg }

// Died is when the worker was killed, or 0.
func (w *Worker) Died() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.died
}

// Pause stops the worker with SIGSTOP.
func (w *Worker) Pause() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.w.Send(syscall.SIGSTOP); err != nil {
		return err
	}
	w.paused = true
	return nil
}

// Resume continues a paused worker with SIGCONT.
func (w *Worker) Resume() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.w.Send(syscall.SIGCONT); err != nil {
		return err
	}
	w.paused = false
	return nil
}

// Kill kills the worker with SIGKILL and returns once it is gone.
func (w *Worker) Kill() {
	w.w.Close()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.died == 0 {
		w.died = proc.Monotonic()
	}
}

// Workers returns the harness's workers in the order they were started.
func (h *Harness) Workers() []*Worker {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.workers)
}

// Live returns the workers not killed.
func (h *Harness) Live() []*Worker {
	var live []*Worker
	for _, w := range h.Workers() {
		if w.Died() == 0 {
			live = append(live, w)
		}
	}
	return live
}

// Mark is the number of events recorded so far: Await(ctx, Mark(), ...)
// waits for an event recorded from now on.
func (h *Harness) Mark() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.events)
}

// Events returns every event recorded so far, in the order they arrived
// (each worker's in the order it reported them).
func (h *Harness) Events() []proc.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.events)
}

// Await returns the first event at or after index from that satisfies
// match, and the index after it, waiting for it until ctx ends. A "fail"
// event (a worker's error) ends the wait with an error.
func (h *Harness) Await(ctx context.Context, from int, match func(proc.Event) bool) (proc.Event, int, error) {
	for {
		h.mu.Lock()
		evs, changed := h.events, h.changed
		h.mu.Unlock()
		for i := from; i < len(evs); i++ {
			if evs[i].Name == "fail" {
				return proc.Event{}, i + 1, fmt.Errorf("torture: worker %d failed: %s", evs[i].Worker, strings.Join(evs[i].Fields, " "))
			}
			if match(evs[i]) {
				return evs[i], i + 1, nil
			}
		}
		from = len(evs)
		select {
		case <-changed:
		case <-ctx.Done():
			return proc.Event{}, from, fmt.Errorf("torture: no such event: %w", ctx.Err())
		}
	}
}

// Is matches events named name, of worker w (nil: any) or, with not set,
// of any worker but w.
func Is(name string, w *Worker) func(proc.Event) bool {
	return func(ev proc.Event) bool { return ev.Name == name && (w == nil || ev.Worker == w.Index()) }
}

// IsNot matches events named name of any worker but w.
func IsNot(name string, w *Worker) func(proc.Event) bool {
	return func(ev proc.Event) bool { return ev.Name == name && ev.Worker != w.Index() }
}

// AcceptedWrite matches a write the store accepted, of worker w (nil:
// any) or with not of any worker but w.
func AcceptedWrite(w *Worker, not bool) func(proc.Event) bool {
	return func(ev proc.Event) bool {
		if ev.Name != "write" || len(ev.Fields) < 5 || ev.Fields[4] != "ok" {
			return false
		}
		return w == nil || (ev.Worker == w.Index()) != not
	}
}

// AwaitReady waits until every worker started so far reported "ready".
func (h *Harness) AwaitReady(ctx context.Context) error {
	for _, w := range h.Workers() {
		if _, _, err := h.Await(ctx, 0, Is("ready", w)); err != nil {
			return fmt.Errorf("torture: worker %s not ready: %w", w.ID(), err)
		}
	}
	return nil
}

// WorkerOf returns the worker of an event.
func (h *Harness) WorkerOf(ev proc.Event) *Worker {
	for _, w := range h.Workers() {
		if w.Index() == ev.Worker {
			return w
		}
	}
	return nil
}

// Spans returns the faults injected so far.
func (h *Harness) Spans() []Span {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Span, len(h.spans))
	for i, in := range h.spans {
		out[i] = in.Span()
	}
	return out
}

// Stop heals every fault still in effect, stops the live workers with
// SIGTERM and waits up to timeout for each to exit, killing those that do
// not. It returns the left-behind check: every worker that was not killed
// exited on its own with status 0. Stop is idempotent; later calls return
// the same check.
func (h *Harness) Stop(ctx context.Context, timeout time.Duration) *Result {
	r := &Result{Name: CheckLeftBehind}
	h.mu.Lock()
	h.stopped = true
	spans := slices.Clone(h.spans)
	h.mu.Unlock()
	for _, in := range spans {
		if err := h.Heal(ctx, in); err != nil {
			r.violate("%v", err)
		}
	}
	live := h.Live()
	readyBy := time.Now().Add(timeout)
	for _, w := range live {
		_ = w.Resume()
		// A worker started moments ago (a replacement after a kill) may
		// not handle SIGTERM yet: Go's default action would kill it.
		h.awaitOwn(w, "ready", readyBy)
		_ = w.w.Send(syscall.SIGTERM)
	}
	deadline := time.After(timeout)
	for _, w := range live {
		select {
		case <-w.w.Exited():
			if err := w.w.Err(); err != nil {
				r.violate("worker %s exited with %v; stderr: %s", w.ID(), err, lastLines(w.w.Stderr(), 5))
			}
		case <-deadline:
			r.violate("worker %s did not exit within %v of SIGTERM", w.ID(), timeout)
		}
	}
	for _, w := range h.Workers() {
		w.w.Close()
	}
	h.readers.Wait()
	r.note("%d workers stopped, %d killed during the run", len(live), len(h.Workers())-len(live))
	r.finish()
	return r
}

// awaitOwn waits until w reported an event named name, exited, or the
// deadline passed.
func (h *Harness) awaitOwn(w *Worker, name string, deadline time.Time) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		h.mu.Lock()
		evs, changed := h.events, h.changed
		h.mu.Unlock()
		if slices.ContainsFunc(evs, Is(name, w)) {
			return
		}
		select {
		case <-changed:
		case <-w.w.Exited():
			return
		case <-timer.C:
			return
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

// CheckReleased adds to r a violation if key still has a holder on b once
// within has passed: a hold left behind by a worker that exited (a killed
// worker's hold must be gone within its TTL).
func CheckReleased(ctx context.Context, r *Result, b *dsync.Backend, key string, within time.Duration) {
	deadline := time.Now().Add(within)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := lease.Driver(b).Holder(cctx, key)
		cancel()
		if errors.Is(err, backends.ErrNotHeld) {
			r.note("nothing held on %q at the end", key)
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			r.violate("%q still held %v after the workers stopped (last answer: %v)", key, within, err)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// History builds the history of the events recorded so far.
func (h *Harness) History() *History {
	return BuildHistory(h.Events(), h.Members())
}

// Members describes the workers for the checks.
func (h *Harness) Members() []Member {
	var ms []Member
	for _, w := range h.Workers() {
		ms = append(ms, Member{Worker: w.Index(), ID: w.ID(), Died: w.Died()})
	}
	return ms
}

// Check stops the harness if it is not stopped (see Stop), reads the
// store's writes to resource and runs every check. left is the result of
// Stop, possibly with more findings (CheckReleased).
func (h *Harness) Check(ctx context.Context, resource string, spec Spec, left *Result) (*Report, error) {
	store, err := h.store.Writes(ctx, resource)
	if err != nil {
		return nil, fmt.Errorf("torture: reading the store: %w", err)
	}
	hist := h.History()
	results := append(Check(hist, store, h.Members(), spec), left)
	left.finish()
	return &Report{Spec: spec, History: hist, Store: store, Results: results, Spans: h.Spans(), Members: h.Members()}, nil
}
