package torture

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
)

// lockConfig is the workers' configuration of the lock scenarios.
func lockConfig(k string, ttl time.Duration) WorkerConfig {
	return WorkerConfig{
		Prim: PrimLock, Key: k, TTL: ttl, Writes: 3, Work: 20 * time.Millisecond,
		Gap: 5 * time.Millisecond, AcquireTimeout: 5*ttl + 5*time.Second,
	}
}

func lockSpec(ttl time.Duration) Spec { return Spec{Prim: PrimLock, TTL: ttl, Fencing: true} }

// TestLockContention: workers contend for a lock with no fault; every
// check must pass.
func TestLockContention(t *testing.T) {
	forEach(t, func(t *testing.T, s *system) {
		e := newEnv(t)
		k := key(t)
		e.start(4, s.url(), lockConfig(k, s.ttl))
		e.ready()
		e.awaitCount(0, 25, Is("acquired", nil), "grants")
		wantOK(t, e.finish(PrimLock, k, s.spec(PrimLock), testutil.Open(t, s.url())))
	})
}

// pausedHolder: the first holder is frozen with SIGSTOP right after its
// grant, in the sleep before its first write, and continued only once
// another holder's write was accepted, long past its lease. Its write then
// leaves late, like one held up by a GC pause. Fencing must reject it, and
// the holder must learn that it lost the lease; with fencing off (the
// negative control) the store accepts it and the stale-writes check must
// say so. It returns the report and the paused worker's hold. The
// workers' first sleep (cfg.Work) must be long enough for the pause to
// land in it; a trial in which it did not (the holder had written or was
// releasing when SIGSTOP arrived) runs again. The store is on a
// redis-server (see pausedHolderOn).
func pausedHolder(t *testing.T, s *system, cfg WorkerConfig) (*Report, *Hold) {
	return pausedHolderOn(t, s, cfg, "redis")
}

// pausedHolderOn is pausedHolder with the fenced store of kind store (see
// newEnvOn), and so through its guard.
func pausedHolderOn(t *testing.T, s *system, cfg WorkerConfig, store string) (*Report, *Hold) {
	type judged struct {
		rep *Report
		h   *Hold
	}
	r := untilLanded(t, func(k string) (judged, string) {
		cfg := cfg
		cfg.Key = k
		e := newEnvOn(t, store)
		e.start(3, s.url(), cfg)
		e.ready()
		ev, mark := e.await(0, Is("acquired", nil), "a first holder")
		paused := e.h.WorkerOf(ev)
		in := e.inject(PauseClient(paused))
		// Another holder's accepted write proves the paused hold gone on
		// the server. On an SQL store none comes if the pause caught the
		// holder inside its write (see blocksWriters): that is judged
		// below, once the holder is continued.
		ctx, cancel := context.WithTimeout(e.ctx, stepTimeout)
		_, next, stalled := e.h.Await(ctx, mark, AcceptedWrite(paused, true))
		cancel()
		e.heal(in)
		if stalled == nil {
			e.await(next, Is("released", paused), "the paused holder's release")
			e.awaitCount(next, 3, Is("acquired", nil), "grants after the resume")
		}
		rep := e.finish(cfg.Prim, k, Spec{Prim: cfg.Prim, TTL: s.ttl, Fencing: !cfg.NoFencing}, testutil.Open(t, s.url()))
		h := rep.History.HoldOf(paused.Index(), ev.At)
		if h == nil {
			t.Fatal("the paused hold is not in the history")
		}
		if stalled != nil {
			if w := writeDuring(h, rep.Spans[0]); w != nil && blocksWriters(store, !cfg.Unguarded && !cfg.NoFencing) {
				return judged{rep, h}, fmt.Sprintf("the pause (%v after the grant) caught the holder inside its write %d (sent %v after the grant), which the next writers waited for",
					ms(rep.Spans[0].Injected-h.Acquired), w.Seq, ms(w.Start-h.Acquired))
			}
			e.dump()
			t.Fatalf("waiting for an accepted write of the next holder: %v", stalled)
		}
		return judged{rep, h}, pauseMissed(h, rep.Spans[0], true)
	})
	return r.rep, r.h
}

// blocksWriters reports whether a writer paused inside its write to a
// store of kind store stops the next writers of the resource until it is
// continued, as a real client paused there would: a guarded write to an
// SQL store is a transaction holding, until it ends, the fence row's lock
// (PostgreSQL) or the database's write lock (SQLite), and an unguarded
// one to SQLite a statement holding the write lock. Redis and etcd take a
// write in one request, and PostgreSQL's unguarded INSERTs do not wait for
// each other.
func blocksWriters(store string, guarded bool) bool {
	return store == "sqlite" || store == "postgres" && guarded
}

// writeDuring returns h's write that was in flight when the pause began
// (sent before SIGSTOP may have arrived, answered after), or nil.
func writeDuring(h *Hold, pause Span) *Write {
	for i, w := range h.Writes {
		if w.Start < pause.Injected && w.At > pause.Began {
			return &h.Writes[i]
		}
	}
	return nil
}

// pausedConfig is the workers' configuration of the paused-holder
// scenarios. The pause must land in the sleep before the first write: the
// harness sends SIGSTOP once it has read the grant, which on two busy
// cores under the race detector takes from a few ms to over 300 ms. Two
// writes after 250 ms each keep a hold well inside its TTL of 1s.
func pausedConfig(k string, ttl time.Duration, noFencing bool) WorkerConfig {
	c := lockConfig(k, ttl)
	c.Writes = 2
	c.Work = 250 * time.Millisecond // the pause lands in this sleep
	c.NoFencing = noFencing
	return c
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
	wantLossNoticed(t, rep, h)
}

// wantLossNoticed checks that a holder paused past its TTL learned that it
// lost its hold once continued: from its lease, or from its release.
func wantLossNoticed(t *testing.T, rep *Report, h *Hold) {
	t.Helper()
	resumed := rep.Spans[0].Healed
	switch {
	case h.Lost > 0:
		t.Logf("the paused holder learned of its loss from its lease %v after SIGCONT", (h.Lost - resumed).Round(time.Millisecond))
	case h.Outcome == "notheld":
		t.Logf("the paused holder learned of its loss from its release (ErrNotHeld), %v after SIGCONT; its lease had not reported it yet",
			(h.Released - resumed).Round(time.Millisecond))
	default:
		t.Errorf("the paused holder never learned that it lost its lease (release: %q)", h.Outcome)
	}
}

// stores are the kinds of fenced store, each written through its guard:
// package fence's Redis guard, fence/etcdfence, and package fence's SQL
// guard on PostgreSQL and on SQLite.
var stores = []string{"redis", "etcd", "postgres", "sqlite"}

// TestLockPausedHolder: a holder paused past its TTL is replaced; its late
// write is rejected by its fencing token, through each guard, and it
// learns of its loss.
func TestLockPausedHolder(t *testing.T) {
	forEach(t, func(t *testing.T, s *system) {
		for _, store := range stores {
			t.Run(store+"-guard", func(t *testing.T) {
				rep, h := pausedHolderOn(t, s, pausedConfig(key(t), s.ttl, false), store)
				wantFenced(t, rep, h)
			})
		}
	})
}

// TestLockPausedHolderUnguarded is the negative control of the guards in
// TestLockPausedHolder: the holds carry their fencing tokens, but the
// writes go to each store without its guard; the store accepts the late
// write after the next holder's, and the stale-writes check reports it.
func TestLockPausedHolderUnguarded(t *testing.T) {
	forEach(t, func(t *testing.T, s *system) {
		for _, store := range stores {
			t.Run(store+"-store", func(t *testing.T) {
				cfg := pausedConfig(key(t), s.ttl, false)
				cfg.Unguarded = true
				rep, _ := pausedHolderOn(t, s, cfg, store)
				wantViolation(t, rep, CheckStaleWrites)
			})
		}
	})
}

// TestLockPausedHolderNoFencing is the negative control of
// TestLockPausedHolder: without fencing tokens the late write is accepted
// after the next holder's, and the checker reports it; the paused holder
// past its expiry is still no overlap.
func TestLockPausedHolderNoFencing(t *testing.T) {
	forEach(t, func(t *testing.T, s *system) {
		rep, _ := pausedHolder(t, s, pausedConfig(key(t), s.ttl, true))
		wantViolation(t, rep, CheckStaleWrites)
		if r := rep.Result(CheckExclusion); !r.OK() {
			t.Errorf("a paused holder past its expiry counted as an overlap: %v", r.Violations)
		}
	}, "redis")
}

// TestLockKilledHolder: a holder killed with SIGKILL (no release) holds
// the lock until its TTL runs out; the next grant comes within the TTL
// plus slack, and the checks pass.
func TestLockKilledHolder(t *testing.T) {
	forEach(t, func(t *testing.T, s *system) {
		rep := killedHolder(t, s, 3, 3, func(k string) WorkerConfig {
			cfg := lockConfig(k, s.ttl)
			cfg.Work = 100 * time.Millisecond
			return cfg
		})
		wantOK(t, rep)
		if r := rep.Result(CheckUnavailable); r.Skipped != "" {
			t.Errorf("the unavailability check did not run: %s", r.Skipped)
		}
	})
}

// TestLockRepliesDelayed: one client's replies are delayed past the TTL
// (its requests reach the servers at once, so its holds are applied in
// time, but it hears of them too late). It must never believe it holds the
// lock unless its validity says so, and the others must go on.
func TestLockRepliesDelayed(t *testing.T) {
	forEach(t, func(t *testing.T, s *system) {
		e := newEnv(t)
		k := key(t)
		cfg := lockConfig(k, s.ttl)
		url, ps := s.proxied()
		slow := e.start(1, url, cfg)[0]
		e.start(2, s.url(), cfg)
		e.ready()
		mark := e.awaitCount(0, 3, Is("acquired", nil), "grants before the fault")
		in := e.inject(Latency(slow.ID(), s.ttl+s.ttl/2, ps...))
		mark = e.awaitCount(mark, 8, IsNot("acquired", slow), "grants to the others under the fault")
		e.heal(in)
		e.awaitCount(mark, 3, Is("acquired", nil), "grants after the fault")
		rep := e.finish(PrimLock, k, s.spec(PrimLock), testutil.Open(t, s.url()))
		wantOK(t, rep)
		span := rep.Spans[0]
		for _, h := range rep.History.Holds {
			if h.Worker == slow.Index() && h.Acquired > span.Injected+s.ttl && h.Acquired < span.Healed {
				t.Errorf("the slow client believed it held token %d (valid %v) while its replies were %v late",
					h.Token, h.Expiry-h.Acquired, s.ttl+s.ttl/2)
			}
		}
	})
}

// TestLockScriptFlush: the Redis servers' script cache is emptied while
// workers contend; the clients load their scripts again and every check
// passes.
func TestLockScriptFlush(t *testing.T) {
	forEach(t, func(t *testing.T, s *system) {
		e := newEnv(t)
		k := key(t)
		e.start(3, s.url(), lockConfig(k, s.ttl))
		e.ready()
		mark := e.awaitCount(0, 3, Is("acquired", nil), "grants before the flush")
		e.inject(ScriptFlush(s.addrs()...))
		mark = e.awaitCount(mark, 5, Is("acquired", nil), "grants after the flush")
		e.inject(ScriptFlush(s.addrs()...))
		e.awaitCount(mark, 5, Is("acquired", nil), "grants after the second flush")
		wantOK(t, e.finish(PrimLock, k, s.spec(PrimLock), testutil.Open(t, s.url())))
	}, "redis", "redlock")
}

// redisRestart: the single Redis server is killed and restarted right
// after a grant, while its holder works on.
//
// Without persistence, the scenario is the negative control of exclusion:
// its fault landed only if another worker was granted the lock after the
// restart and before the first holder's hold ended, and a trial in which
// the restart took too long for that runs again.
func redisRestart(t *testing.T, persistent bool) *Report {
	t.Parallel()
	srv := redistest.Start(t, &redistest.Options{Persistent: persistent})
	return untilLanded(t, func(k string) (*Report, string) {
		e := newEnv(t)
		cfg := lockConfig(k, time.Second)
		cfg.Work = 250 * time.Millisecond // 3 writes: the first hold lasts until its expiry
		e.start(3, srv.URL(), cfg)
		e.ready()
		first, mark := e.await(0, Is("acquired", nil), "a first holder")
		e.inject(RestartNode("redis", srv))
		e.awaitCount(mark, 4, Is("acquired", nil), "grants after the restart")
		rep := e.finish(PrimLock, k, lockSpec(time.Second), testutil.Open(t, srv.URL()))
		if persistent {
			return rep, ""
		}
		h := rep.History.HoldOf(first.Worker, first.At)
		if h == nil {
			t.Fatal("the first hold is not in the history")
		}
		// The kill is sent as the injection begins, and the restarted
		// server may grant before Restart returns (it waits for the server
		// to answer): a grant after the kill is the new process's.
		killed := rep.Spans[0].Began
		for _, o := range rep.History.Holds {
			if o.Worker != h.Worker && o.Acquired > killed && o.Acquired < h.End() {
				return rep, ""
			}
		}
		return rep, fmt.Sprintf("no other worker was granted the lock between the kill (%v after the first grant) and the end of the first hold",
			ms(killed-h.Acquired))
	})
}

// TestRedisRestartPersistent: with the append-only file fsynced on every
// write, a restart keeps the holds (with their expiry) and the fencing
// counters: every check passes.
func TestRedisRestartPersistent(t *testing.T) {
	wantOK(t, redisRestart(t, true))
}

// TestRedisRestartEphemeral shows what single Redis does not promise: a
// server restarted without persistence forgets the hold, so a second
// client is granted the lock while the first still holds it. The
// exclusion check must say so. The fencing counter is forgotten too, but
// starts again at the server's clock, so tokens still grow and the first
// holder's late writes are rejected: the token checks pass.
func TestRedisRestartEphemeral(t *testing.T) {
	rep := redisRestart(t, false)
	wantViolation(t, rep, CheckExclusion)
	for _, check := range []string{CheckTokens, CheckTerms, CheckStaleWrites} {
		if r := rep.Result(check); r == nil || !r.OK() {
			t.Errorf("%s after a restart without persistence: %v, want no violation (counters restart at the clock)", check, r)
		}
	}
}
