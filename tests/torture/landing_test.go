package torture

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsync-dev/dsync/internal/testenv/proc"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
)

// maxTrials bounds the reruns of a fault scenario whose fault did not land
// as its judgement needs (a loaded machine delays an injection or
// stretches a step past the moment the fault was meant for).
const maxTrials = 5

// untilLanded runs trial, each time on a key of its own, until its fault
// landed as the scenario's judgement needs, at most maxTrials times. trial
// returns "" when the fault landed, else why it did not; only a trial
// whose fault landed is returned and judged. It logs how many trials that
// took, and fails the test, saying it cannot judge, if none landed.
func untilLanded[T any](t *testing.T, trial func(key string) (T, string)) T {
	t.Helper()
	var missed []string
	for i := 1; i <= maxTrials; i++ {
		got, miss := trial(fmt.Sprintf("%s-trial%d", key(t), i))
		if miss == "" {
			t.Logf("the fault landed in trial %d of at most %d", i, maxTrials)
			return got
		}
		t.Logf("trial %d cannot be judged, so it runs again: %s", i, miss)
		missed = append(missed, miss)
	}
	t.Fatalf("cannot judge: the fault did not land in %d trials: %s", maxTrials, strings.Join(missed, "; "))
	panic("unreachable")
}

// pauseMissed says why a pause of h's holder did not land as a paused-
// holder scenario needs, or "": it must begin before the holder began to
// release and end after the hold's expiry, and, with lateWrite, the
// holder must send a write after the hold's expiry and after SIGSTOP was
// sent (Injected), which a stopped process can only do once resumed: a
// write sent before, still in flight during the pause, may have reached
// the store before the next holder's, and is no late write. (Not "after
// the resume" as the harness clocks it: the holder, woken by SIGCONT, may
// stamp its write before the harness stamps the resume.)
func pauseMissed(h *Hold, pause Span, lateWrite bool) string {
	switch {
	case h.Releasing > 0 && h.Releasing < pause.Injected:
		return fmt.Sprintf("the pause came %v after the holder began its release", ms(pause.Injected-h.Releasing))
	case pause.Healed <= h.Expiry:
		return fmt.Sprintf("the pause ended %v before the hold's expiry", ms(h.Expiry-pause.Healed))
	}
	if lateWrite {
		for _, w := range h.Writes {
			if w.Start > h.Expiry && w.Start > pause.Injected {
				return ""
			}
		}
		starts := make([]time.Duration, len(h.Writes))
		for i, w := range h.Writes {
			starts[i] = ms(w.Start - h.Acquired)
		}
		return fmt.Sprintf("the holder sent no write after both its hold's expiry and the pause (after its grant: pause %v to %v, expiry %v, writes at %v)",
			ms(pause.Injected-h.Acquired), ms(pause.Healed-h.Acquired), ms(h.Expiry-h.Acquired), starts)
	}
	return ""
}

func ms(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

// holdAtOnce matches the event at which n workers other than except (nil:
// none) hold at once, as their events tell. With except a frozen holder and
// n a semaphore's size, it proves except's hold gone on the server, for a
// semaphore that keeps its bound. It keeps state: give each Await a new
// one.
func holdAtOnce(n int, except *Worker) func(proc.Event) bool {
	holding := map[int]bool{}
	return func(ev proc.Event) bool {
		if except != nil && ev.Worker == except.Index() {
			return false
		}
		switch ev.Name {
		case "acquired":
			holding[ev.Worker] = true
		case "lost", "releasing", "released":
			delete(holding, ev.Worker)
		}
		return len(holding) >= n
	}
}

// monoExpiry is the expiry an "acquired" event reports, on the events'
// clock.
func monoExpiry(t *testing.T, acquired proc.Event) time.Duration {
	t.Helper()
	if len(acquired.Fields) < 2 {
		t.Fatalf("acquired event %v has no expiry", acquired)
	}
	x, err := strconv.ParseInt(acquired.Fields[1], 10, 64)
	if err != nil {
		t.Fatalf("acquired event %v: %v", acquired, err)
	}
	return time.Duration(x)
}

// killedHolder runs a trial until its kill landed (see untilLanded):
// workers started with config(key), the first holder killed with SIGKILL,
// then grants more grants awaited; it returns the judged trial's report.
func killedHolder(t *testing.T, s *system, workers, grants int, config func(key string) WorkerConfig) *Report {
	t.Helper()
	return untilLanded(t, func(k string) (*Report, string) {
		e := newEnv(t)
		cfg := config(k)
		e.start(workers, s.url(), cfg)
		e.ready()
		ev, mark := e.await(0, Is("acquired", nil), "a first holder")
		e.inject(KillClient(e.h.WorkerOf(ev)))
		e.awaitCount(mark, grants, Is("acquired", nil), "grants after the death")
		rep := e.finish(cfg.Prim, k, s.spec(cfg.Prim), testutil.Open(t, s.url()))
		return rep, killMissed(t, rep, ev)
	})
}

// killMissed says why the kill of the worker of the "acquired" event ev
// did not land in that hold, or "": it must come before the holder began
// to release it.
func killMissed(t *testing.T, rep *Report, ev proc.Event) string {
	t.Helper()
	h := rep.History.HoldOf(ev.Worker, ev.At)
	switch {
	case h == nil:
		t.Fatal("the killed holder's hold is not in the history")
	case h.Died == 0:
		return fmt.Sprintf("the holder was not holding when SIGKILL came (release: %q)", h.Outcome)
	}
	return ""
}
