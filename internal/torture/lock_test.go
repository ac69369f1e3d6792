package torture

import (
	"testing"
	"time"

	"github.com/dsync-dev/dsync/internal/proc"
	"github.com/dsync-dev/dsync/internal/redistest"
)

// lockConfig is the workers' configuration of the lock scenarios.
func lockConfig(k string, ttl time.Duration) WorkerConfig {
	return WorkerConfig{
		Prim: PrimLock, Key: k, TTL: ttl, Writes: 3, Work: 20 * time.Millisecond,
		Gap: 5 * time.Millisecond, AcquireTimeout: 5*ttl + 5*time.Second,
	}
}

// contention: workers contend for a lock with no fault until holds grants
// were made; every check must pass.
func contention(t *testing.T, url string, ttl time.Duration, workers, holds int) *Report {
	e := newEnv(t)
	k := key(t)
	e.start(workers, url, lockConfig(k, ttl))
	e.ready()
	e.awaitCount(0, holds, Is("acquired", nil), "grants")
	return e.finish(PrimLock, k, Spec{Prim: PrimLock, TTL: ttl, Fencing: true}, open(t, url))
}

func TestRedisContention(t *testing.T) {
	s := redistest.Start(t, nil)
	wantOK(t, contention(t, s.URL(), time.Second, 4, 40))
}

// pausedHolder: the first holder is frozen with SIGSTOP right after its
// grant, in the sleep before its first write, and continued only once
// another holder's write was accepted, long past its lease. Its write then
// leaves late, like one held up by a GC pause. Fencing must reject it, and
// the holder must learn that it lost the lease; with fencing off (the
// negative control) the store accepts it and the stale-writes check must
// say so. It returns the report and the paused worker's hold.
func pausedHolder(t *testing.T, url string, ttl time.Duration, noFencing bool) (*Report, *Hold) {
	e := newEnv(t)
	k := key(t)
	cfg := lockConfig(k, ttl)
	cfg.Work = 100 * time.Millisecond // the pause lands in this sleep
	cfg.NoFencing = noFencing
	e.start(3, url, cfg)
	e.ready()
	ev, mark := e.await(0, Is("acquired", nil), "a first holder")
	paused := e.h.WorkerOf(ev)
	in := e.inject(PauseClient(paused))
	_, mark = e.await(mark, AcceptedWrite(paused, true), "an accepted write of the next holder")
	e.heal(in)
	resumed := proc.Monotonic()
	lost, _ := e.await(mark, Is("lost", paused), "the paused holder to learn of its loss")
	t.Logf("the paused holder learned of its loss %v after SIGCONT", (lost.At - resumed).Round(time.Millisecond))
	e.awaitCount(mark, 3, Is("acquired", nil), "grants after the resume")
	rep := e.finish(PrimLock, k, Spec{Prim: PrimLock, TTL: ttl, Fencing: !noFencing}, open(t, url))
	for _, h := range rep.History.Holds {
		if h.Worker == paused.Index() && h.Acquired == ev.At {
			return rep, h
		}
	}
	t.Fatal("the paused hold is not in the history")
	return nil, nil
}

// wantFenced checks what fencing must have done to the paused holder: its
// late write rejected, and no write of its accepted after it lost.
func wantFenced(t *testing.T, rep *Report, h *Hold) {
	t.Helper()
	wantOK(t, rep)
	rejected := 0
	for _, w := range h.Writes {
		switch {
		case w.Outcome == "rejected":
			rejected++
		case w.Outcome == "ok" && w.Start > h.Expiry:
			t.Errorf("the paused holder's write %d, sent %v after its expiry, was accepted", w.Seq, w.Start-h.Expiry)
		}
	}
	if rejected == 0 {
		t.Errorf("the paused holder's late write was not rejected: writes %+v", h.Writes)
	}
	if h.Lost == 0 {
		t.Error("the paused holder never learned that it lost its lease")
	}
}

func TestRedisPausedHolder(t *testing.T) {
	s := redistest.Start(t, nil)
	rep, h := pausedHolder(t, s.URL(), time.Second, false)
	wantFenced(t, rep, h)
}

// TestRedisPausedHolderNoFencing is the negative control of
// TestRedisPausedHolder: without fencing tokens the late write is
// accepted after the next holder's, and the checker reports it.
func TestRedisPausedHolderNoFencing(t *testing.T) {
	s := redistest.Start(t, nil)
	rep, _ := pausedHolder(t, s.URL(), time.Second, true)
	wantViolation(t, rep, CheckStaleWrites)
	if r := rep.Result(CheckExclusion); !r.OK() {
		t.Errorf("a paused holder past its expiry counted as an overlap: %v", r.Violations)
	}
}
