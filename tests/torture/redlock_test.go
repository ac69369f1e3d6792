package torture

import (
	"fmt"
	"testing"
	"time"

	"github.com/dsync-dev/dsync/internal/testenv/testutil"
)

// minorityFault runs contention on five nodes through their proxies,
// injects fault (on a minority) once grants flow, waits for grants under
// it, heals it, waits for grants after it: every check must pass.
func minorityFault(t *testing.T, s *system, url string, fault Fault) {
	e := newEnv(t)
	k := key(t)
	e.start(3, url, lockConfig(k, s.ttl))
	e.ready()
	mark := e.awaitCount(0, 3, Is("acquired", nil), "grants before the fault")
	in := e.inject(fault)
	mark = e.awaitCount(mark, 6, Is("acquired", nil), "grants under the fault")
	e.heal(in)
	e.awaitCount(mark, 3, Is("acquired", nil), "grants after the fault")
	wantOK(t, e.finish(PrimLock, k, s.spec(PrimLock), testutil.Open(t, s.url())))
}

// TestRedlockMinority: 2 of 5 nodes killed (restarted empty), paused, or
// slowed beyond the per-node timeout: grants go on and every check passes.
func TestRedlockMinority(t *testing.T) {
	t.Parallel()
	t.Run("killed", func(t *testing.T) {
		t.Parallel()
		s := newSystem(t, "redlock")
		minorityFault(t, s, s.url(), Group("kill-nodes", KillNode(s.node(1)), KillNode(s.node(3))))
	})
	t.Run("paused", func(t *testing.T) {
		t.Parallel()
		s := newSystem(t, "redlock")
		minorityFault(t, s, s.url(), Group("pause-nodes", PauseNode(s.node(0)), PauseNode(s.node(4))))
	})
	t.Run("slowed", func(t *testing.T) {
		t.Parallel()
		s := newSystem(t, "redlock")
		// Every worker shares the proxies; slower than the per-node
		// timeout, those nodes never count.
		url, ps := s.proxied()
		minorityFault(t, s, url, Latency("nodes 2,3", 2*rlNodeTimeout, ps[2], ps[3]))
	})
}

// TestRedlockMajorityLost: with 3 of 5 nodes killed nobody is granted the
// lock; every Acquire gives up on its own deadline with an error that says
// why (no quorum, or quarantine once the nodes are back), and grants
// resume once the restarted nodes are out of quarantine.
func TestRedlockMajorityLost(t *testing.T) {
	t.Parallel()
	s := newSystem(t, "redlock")
	e := newEnv(t)
	k := key(t)
	cfg := lockConfig(k, s.ttl)
	cfg.AcquireTimeout = time.Second
	e.start(3, s.url(), cfg)
	e.ready()
	mark := e.awaitCount(0, 3, Is("acquired", nil), "grants before the fault")
	in := e.inject(Group("kill-nodes", KillNode(s.node(0)), KillNode(s.node(2)), KillNode(s.node(4))))
	mark = e.awaitCount(mark, 6, Is("unavailable", nil), "failed acquisitions without a majority")
	e.heal(in)
	e.awaitCount(mark, 3, Is("acquired", nil), "grants after the restart")
	rep := e.finish(PrimLock, k, s.spec(PrimLock), testutil.Open(t, s.url()))
	wantOK(t, rep)

	span := rep.Spans[0]
	classes := map[string]int{}
	for _, u := range rep.History.Unavailable {
		if u.Asked < span.Injected {
			continue // it may have waited behind a holder before the fault
		}
		classes[u.Class]++
		if took := u.At - u.Asked; took > cfg.AcquireTimeout+time.Second {
			t.Errorf("an Acquire took %v to give up, above its %v deadline: a hang", took, cfg.AcquireTimeout)
		}
		// Within a TTL of the fault a hold granted before it may still
		// live on the two nodes left: those refusals are contention. On a
		// loaded machine an Acquire's deadline may also cut its only
		// attempt short ("timeout"), which says nothing wrong; most must
		// say why.
		if u.Class != "noquorum" && u.Class != "quarantined" && u.Class != "timeout" && u.Asked > span.Injected+s.ttl {
			t.Errorf("an Acquire without a majority failed as %q, want noquorum or quarantined", u.Class)
		}
	}
	if said := classes["noquorum"] + classes["quarantined"]; said <= classes["timeout"] {
		t.Errorf("failed acquisitions by cause %v: most must say why (noquorum or quarantined)", classes)
	}
	var first time.Duration
	for _, h := range rep.History.Holds {
		if h.Acquired > span.Injected+rlNodeTimeout && h.Acquired < span.Healed {
			t.Errorf("%s was granted token %d while 3 of 5 nodes were down", h.ID, h.Token)
		}
		if first == 0 && h.Acquired > span.Healed {
			first = h.Acquired
		}
	}
	t.Logf("failed acquisitions by cause: %v; first grant %v after the restart (max_ttl %v)", classes, (first - span.Healed).Round(time.Millisecond), rlMaxTTL)
	if first-span.Healed < rlMaxTTL-time.Second {
		t.Errorf("a grant %v after the restart of 3 nodes: their quarantine should last about max_ttl %v", first-span.Healed, rlMaxTTL)
	}
}

// restartUnderHold: worker A reaches nodes 3 and 4 through proxies that
// refuse, so that its holds rest on exactly nodes 0, 1 and 2; worker B
// reaches all five. Once A holds, node 0 is restarted without persistence,
// forgetting A's key: nodes 0, 3 and 4 are a free majority for B while A's
// lease is valid. With quarantine node 0 may not vote and B waits; without
// (the negative control) B is granted the lock A holds. The restart landed
// only if node 0 was back while A's hold lasted; without quarantine, only
// if B was granted the lock then. A trial in which it did not runs again.
func restartUnderHold(t *testing.T, quarantine bool) *Report {
	t.Parallel()
	s := newSystem(t, "redlock")
	extra := fmt.Sprintf("quarantine=%v", quarantine)
	return untilLanded(t, func(k string) (*Report, string) {
		e := newEnv(t)
		aURL, ps := s.proxied(extra)
		for _, p := range ps[3:] {
			if err := p.Refuse(); err != nil {
				t.Fatal(err)
			}
		}
		cfg := lockConfig(k, rlMaxTTL)
		cfg.Work = 400 * time.Millisecond // A holds about 1.2s of its 2s
		a := e.start(1, aURL, cfg)[0]
		b := e.start(1, s.url(extra), cfg)[0]
		e.ready()
		first, mark := e.await(0, Is("acquired", a), "a grant to A")
		in := e.inject(RestartNode(s.node(0)))
		ev, _ := e.await(mark, Is("acquired", b), "a grant to B")
		t.Logf("B granted %v after node 0 was killed to restart", (ev.At - in.Span().Began).Round(time.Millisecond))
		e.awaitCount(mark, 2, Is("acquired", a), "A's next grants")
		rep := e.finish(PrimLock, k, lockSpec(rlMaxTTL), testutil.Open(t, s.url()))
		h := rep.History.HoldOf(first.Worker, first.At)
		if h == nil {
			t.Fatal("A's first hold is not in the history")
		}
		back := rep.Spans[0].Injected
		switch {
		case back >= h.End():
			return rep, fmt.Sprintf("node 0 was back %v after A's hold ended", ms(back-h.End()))
		case !quarantine && ev.At >= h.End():
			return rep, fmt.Sprintf("B was granted the lock %v after A's hold ended", ms(ev.At-h.End()))
		}
		return rep, ""
	})
}

func TestRedlockRestartUnderHold(t *testing.T) {
	wantOK(t, restartUnderHold(t, true))
}

// TestRedlockRestartUnderHoldNoQuarantine is the negative control of
// TestRedlockRestartUnderHold: without quarantine, two holders at once.
func TestRedlockRestartUnderHoldNoQuarantine(t *testing.T) {
	wantViolation(t, restartUnderHold(t, false), CheckExclusion)
}
