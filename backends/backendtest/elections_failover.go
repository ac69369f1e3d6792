package backendtest

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/internal/lease"
	"github.com/dsync-dev/dsync/internal/testenv/proc"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	"github.com/dsync-dev/dsync/leader"
)

// Checks of failover between leader processes (workers of
// internal/testenv/proc): a leader killed, and a leader paused past its TTL.

func init() {
	// leader-run: leader.Run on "name" as "id" with "ttl", reporting
	// "leading TERM", a "tick TERM" every "tick" while leading, and
	// "stopped TERM lost|resigned"; until SIGTERM.
	registerWorker("leader-run", func(ctx context.Context, b *dsync.Backend, a workerArgs, emit proc.Emit) error {
		e, err := leader.New(b, a.Str("name"), a.Str("id"), &leader.Options{TTL: a.Duration("ttl")})
		if err != nil {
			return err
		}
		tick := a.Duration("tick")
		err = leader.Run(ctx, e, func(ctx context.Context, term uint64) error {
			tk := time.NewTicker(tick)
			defer tk.Stop()
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-tk.C:
					emit("tick", strconv.FormatUint(term, 10))
				}
			}
		}, &leader.RunOptions{
			OnStarted: func(term uint64) { emit("leading", strconv.FormatUint(term, 10)) },
			OnStopped: func(term uint64, err error) {
				how := "resigned"
				if errors.Is(err, dsync.ErrLeaseLost) {
					how = "lost"
				}
				emit("stopped", strconv.FormatUint(term, 10), how)
			},
		})
		if ctx.Err() != nil {
			return nil
		}
		return err
	})
}

// fleet is a set of leader-run workers whose events are merged into one
// stream, in the order they arrive, and kept for the final checks.
type fleet struct {
	ws     map[int]*worker // by worker index
	events chan event      // merged; closed when every worker's output has ended
	all    []event         // every event read from events
}

// startFleet starts n leader-run workers on name and returns once they are
// ready.
func (s *suite) startFleet(t *testing.T, name string, n int, ttl time.Duration) *fleet {
	t.Helper()
	f := &fleet{ws: map[int]*worker{}, events: make(chan event, 1024)}
	for i := range n {
		w := s.startWorker(t, "leader-run", map[string]string{
			"name": name, "id": "worker-" + strconv.Itoa(i), "ttl": ttl.String(), "tick": "20ms",
		})
		f.ws[w.Index()] = w
	}
	for _, w := range f.ws {
		w.Expect(t, "ready", 30*time.Second)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, w := range f.ws {
		wg.Add(1)
		go func() { // ends when the worker's output does (its cleanup kills it) or the test does
			defer wg.Done()
			for ev := range w.Events() {
				select {
				case f.events <- ev:
				case <-stop:
					return
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		close(f.events)
	}()
	t.Cleanup(func() { close(stop) })
	return f
}

// until returns the next event named name, from worker w (nil: any),
// failing the test on a worker's failure or after timeout.
func (f *fleet) until(t *testing.T, name string, w *worker, timeout time.Duration) event {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-f.events:
			if !ok {
				t.Fatalf("every worker ended before the event %q", name)
			}
			f.all = append(f.all, ev)
			if ev.Name == "fail" {
				t.Fatalf("worker %d failed: %v", ev.Worker, ev.Fields)
			}
			if ev.Name == name && (w == nil || ev.Worker == w.Index()) {
				return ev
			}
		case <-deadline:
			t.Fatalf("no event %q within %v", name, timeout)
		}
	}
}

// finish stops the live workers with SIGTERM, reads their last events, and
// checks that they exited cleanly.
func (f *fleet) finish(t *testing.T, dead *worker) {
	t.Helper()
	for _, w := range f.ws {
		if w != dead {
			w.Signal(t, syscall.SIGTERM)
		}
	}
	deadline := time.After(30 * time.Second)
	for done := false; !done; {
		select {
		case ev, ok := <-f.events:
			if !ok {
				done = true
				break
			}
			f.all = append(f.all, ev)
			if ev.Name == "fail" {
				t.Errorf("worker %d failed: %v", ev.Worker, ev.Fields)
			}
		case <-deadline:
			t.Fatal("workers did not exit within 30s of SIGTERM")
		}
	}
	for _, w := range f.ws {
		if w == dead {
			continue
		}
		<-w.Exited()
		if w.Err() != nil {
			t.Errorf("worker %d: %v; stderr:\n%s", w.Index(), w.Err(), w.Stderr())
		}
	}
	slices.SortFunc(f.all, func(a, b event) int { return int(a.At - b.At) })
}

func termOf(ev event) uint64 {
	term, _ := strconv.ParseUint(ev.Fields[0], 10, 64)
	return term
}

// testElectKilledLeader: a leader process killed with SIGKILL (no
// resignation) is replaced once its hold expires, within the TTL plus the
// retry period, by a leader of a greater term; no process works as leader
// (ticks) on the machine's clock once a later leader has begun.
func (s *suite) testElectKilledLeader(t *testing.T) {
	s.needCrossProcess(t)
	name := testutil.UniqueKey(t)
	ttl := max(s.h.ShortTTL, time.Second)
	retryPeriod := min(ttl/4, leader.DefaultMaxRetryPeriod) // the workers' default
	f := s.startFleet(t, name, 3, ttl)
	first := f.ws[f.until(t, "leading", nil, 30*time.Second).Worker]
	f.until(t, "tick", first, 10*time.Second) // it works as leader
	first.Kill(t)
	killed := monotonic()
	ev := f.until(t, "leading", nil, 3*ttl+10*time.Second)
	failover := ev.At - killed
	second := f.ws[ev.Worker]
	t.Logf("failover %v after the leader was killed (ttl %v, retry period %v)", failover.Round(time.Millisecond), ttl, retryPeriod)
	if bound := ttl + retryPeriod*6/5 + 2*time.Second; failover > bound {
		t.Errorf("failover took %v, above ttl + retry period + 2s = %v", failover, bound)
	}
	f.until(t, "tick", second, 10*time.Second)
	f.finish(t, first)

	// Two processes lead at once when the earlier one works (ticks) after
	// the later one began leading. Its "stopped" event alone may come
	// late on a loaded machine: a leader whose validity ran out stops when
	// it next runs, and its term ended on the server before that, as the
	// new grant shows.
	fencing := lease.Driver(s.backend(t)).Capabilities().Fencing
	leading := map[int]uint64{}    // worker -> term, while it leads
	superseded := map[int]uint64{} // worker -> term of the leader that began after it, until it stops
	var maxTerm uint64
	for _, ev := range f.all {
		if ev.Worker == first.Index() && ev.At > killed {
			t.Fatalf("event of the killed worker after its death: %v", ev)
		}
		switch ev.Name {
		case "leading":
			// The killed leader leads until its death; its term ends on
			// the server later, so the failover cannot overlap it.
			if ev.At > killed {
				delete(leading, first.Index())
			}
			for w := range leading {
				superseded[w] = termOf(ev)
			}
			if fencing && termOf(ev) <= maxTerm {
				t.Errorf("term %d after term %d", termOf(ev), maxTerm)
			}
			leading[ev.Worker], maxTerm = termOf(ev), max(maxTerm, termOf(ev))
		case "tick":
			if next, ok := superseded[ev.Worker]; ok {
				t.Errorf("worker %d worked as leader (term %s) after a leader of term %d began", ev.Worker, ev.Fields[0], next)
			}
			if fencing && termOf(ev) != maxTerm {
				t.Errorf("worker %d wrote with term %d after term %d began", ev.Worker, termOf(ev), maxTerm)
			}
		case "stopped":
			delete(leading, ev.Worker)
			delete(superseded, ev.Worker)
		}
	}
}

// testElectPausedLeader: a leader process frozen with SIGSTOP past its TTL
// is replaced by a leader of a greater term; once resumed, the stale leader
// learns of its loss from its own clock, and every write it may make before
// that carries its old term, which a fencing resource rejects.
func (s *suite) testElectPausedLeader(t *testing.T) {
	s.needCrossProcess(t)
	name := testutil.UniqueKey(t)
	ttl := max(s.h.ShortTTL, time.Second)
	f := s.startFleet(t, name, 2, ttl)
	ev := f.until(t, "leading", nil, 30*time.Second)
	paused, term1 := f.ws[ev.Worker], termOf(ev)
	f.until(t, "tick", paused, 10*time.Second)
	paused.Signal(t, syscall.SIGSTOP)
	stoppedAt := monotonic()
	ev = f.until(t, "leading", nil, 3*ttl+10*time.Second)
	term2 := termOf(ev)
	t.Logf("the other candidate led %v after the leader was paused (ttl %v)", (ev.At - stoppedAt).Round(time.Millisecond), ttl)
	fencing := lease.Driver(s.backend(t)).Capabilities().Fencing
	if fencing && term2 <= term1 {
		t.Fatalf("term %d after the paused leader's term %d", term2, term1)
	}
	f.until(t, "tick", f.ws[ev.Worker], 10*time.Second) // the new leader writes
	paused.Signal(t, syscall.SIGCONT)
	resumed := monotonic()
	ev = f.until(t, "stopped", paused, 10*time.Second)
	if ev.Fields[1] != "lost" {
		t.Errorf("the paused leader's term ended as %q, want lost", ev.Fields[1])
	}
	t.Logf("the resumed leader knew of its loss %v after SIGCONT", (ev.At - resumed).Round(time.Millisecond))
	f.finish(t, nil)

	// A fencing resource accepts a write only if its term is at least the
	// highest it has seen. The stale leader's writes after the new term's
	// first write must all be rejected; they are counted, not failed: a
	// paused process cannot know, which is why fencing exists.
	var highest uint64
	rejected := 0
	for _, ev := range f.all {
		if ev.Name != "tick" {
			continue
		}
		switch term := termOf(ev); {
		case term >= highest:
			if ev.Worker == paused.Index() && highest > term1 {
				t.Errorf("the stale leader's write with term %d was accepted after term %d", term, highest)
			}
			highest = term
		default:
			if ev.Worker != paused.Index() || term != term1 {
				t.Errorf("worker %d wrote with term %d after term %d", ev.Worker, term, highest)
			}
			rejected++
		}
	}
	if !fencing {
		t.Logf("the backend has no fencing: the %d stale writes could not be told apart", rejected)
		return
	}
	t.Logf("%d stale writes of the resumed leader, all rejected by their term", rejected)
}
