package torture

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dsync-dev/dsync/internal/faultproxy"
	"github.com/dsync-dev/dsync/internal/redistest"
)

// Redlock timing of the scenarios: a max_ttl (the restart quarantine) of
// 2s, so that fresh and restarted nodes vote again soon, and a per-node
// timeout well above loopback latency under the race detector.
const (
	rlMaxTTL      = 2 * time.Second
	rlNodeTimeout = 150 * time.Millisecond
	rlTTL         = time.Second
)

// redlockSet is five redis-servers, each with a proxy in front of it.
type redlockSet struct {
	servers []*redistest.Server
	proxies []*faultproxy.Proxy
}

func startRedlock(t *testing.T, n int) *redlockSet {
	t.Helper()
	r := &redlockSet{servers: redistest.StartN(t, n, nil)}
	for _, s := range r.servers {
		r.proxies = append(r.proxies, faultproxy.Start(t, s.Addr()))
	}
	return r
}

func (r *redlockSet) addrs(proxied bool) []string {
	var out []string
	for i, s := range r.servers {
		if proxied {
			out = append(out, r.proxies[i].Addr())
		} else {
			out = append(out, s.Addr())
		}
	}
	return out
}

// url is the redlock:// URL of the nodes, direct or through the proxies.
func (r *redlockSet) url(proxied bool, extra ...string) string {
	q := append([]string{fmt.Sprintf("max_ttl=%v", rlMaxTTL), fmt.Sprintf("node_timeout=%v", rlNodeTimeout)}, extra...)
	return "redlock://" + strings.Join(r.addrs(proxied), ",") + "/?" + strings.Join(q, "&")
}

func (r *redlockSet) node(i int) (string, *redistest.Server) {
	return fmt.Sprintf("node %d", i), r.servers[i]
}

func TestRedlockContention(t *testing.T) {
	r := startRedlock(t, 5)
	wantOK(t, contention(t, r.url(false), rlTTL, 4, 30))
}

func TestRedlockPausedHolder(t *testing.T) {
	r := startRedlock(t, 5)
	rep, h := pausedHolder(t, r.url(false), rlTTL, false)
	wantFenced(t, rep, h)
}

// minorityFault runs contention on five nodes through their proxies,
// injects fault (on a minority) once grants flow, waits for grants under
// it, heals it, waits for grants after it: every check must pass.
func minorityFault(t *testing.T, r *redlockSet, fault Fault) {
	e := newEnv(t)
	k := key(t)
	url := r.url(true)
	e.start(3, url, lockConfig(k, rlTTL))
	e.ready()
	mark := e.awaitCount(0, 3, Is("acquired", nil), "grants before the fault")
	in := e.inject(fault)
	mark = e.awaitCount(mark, 6, Is("acquired", nil), "grants under the fault")
	e.heal(in)
	e.awaitCount(mark, 3, Is("acquired", nil), "grants after the fault")
	rep := e.finish(PrimLock, k, Spec{Prim: PrimLock, TTL: rlTTL, Fencing: true}, open(t, r.url(false)))
	wantOK(t, rep)
}

func TestRedlockMinorityKilled(t *testing.T) {
	r := startRedlock(t, 5)
	minorityFault(t, r, Group("kill-nodes", KillNode(r.node(1)), KillNode(r.node(3))))
}

func TestRedlockMinorityPaused(t *testing.T) {
	r := startRedlock(t, 5)
	minorityFault(t, r, Group("pause-nodes", PauseNode(r.node(0)), PauseNode(r.node(4))))
}

func TestRedlockMinoritySlowed(t *testing.T) {
	r := startRedlock(t, 5)
	// Slower than the per-node timeout: those nodes never count.
	minorityFault(t, r, Latency("nodes 2,3", 2*rlNodeTimeout, r.proxies[2], r.proxies[3]))
}

// TestRedlockMajorityLost: with 3 of 5 nodes killed nobody is granted the
// lock; every Acquire gives up on its own deadline with an error that says
// why (no quorum, or quarantine once the nodes are back), and grants
// resume once the restarted nodes are out of quarantine.
func TestRedlockMajorityLost(t *testing.T) {
	r := startRedlock(t, 5)
	e := newEnv(t)
	k := key(t)
	cfg := lockConfig(k, rlTTL)
	cfg.AcquireTimeout = time.Second
	e.start(3, r.url(false), cfg)
	e.ready()
	mark := e.awaitCount(0, 3, Is("acquired", nil), "grants before the fault")
	in := e.inject(Group("kill-nodes", KillNode(r.node(0)), KillNode(r.node(2)), KillNode(r.node(4))))
	mark = e.awaitCount(mark, 6, Is("unavailable", nil), "failed acquisitions without a majority")
	e.heal(in)
	e.awaitCount(mark, 3, Is("acquired", nil), "grants after the restart")
	rep := e.finish(PrimLock, k, Spec{Prim: PrimLock, TTL: rlTTL, Fencing: true}, open(t, r.url(false)))
	wantOK(t, rep)

	span := rep.Spans[0]
	classes := map[string]int{}
	for _, u := range rep.History.Unavailable {
		if u.At < span.Injected {
			continue
		}
		classes[u.Class]++
		if took := u.At - u.Asked; took > cfg.AcquireTimeout+time.Second {
			t.Errorf("an Acquire took %v to give up, above its %v deadline: a hang", took, cfg.AcquireTimeout)
		}
		if u.Class != "noquorum" && u.Class != "quarantined" {
			t.Errorf("an Acquire without a majority failed as %q, want noquorum or quarantined", u.Class)
		}
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
// (the negative control) B is granted the lock A holds.
func restartUnderHold(t *testing.T, quarantine bool) *Report {
	r := startRedlock(t, 5)
	e := newEnv(t)
	k := key(t)
	extra := fmt.Sprintf("quarantine=%v", quarantine)
	for _, p := range r.proxies[3:] {
		if err := p.Refuse(); err != nil {
			t.Fatal(err)
		}
	}
	cfg := lockConfig(k, rlMaxTTL)
	cfg.Work = 400 * time.Millisecond // A holds about 1.2s of its 2s
	a := e.start(1, r.url(true, extra), cfg)[0]
	b := e.start(1, r.url(false, extra), cfg)[0]
	e.ready()
	_, mark := e.await(0, Is("acquired", a), "a grant to A")
	in := e.inject(RestartNode(r.node(0)))
	ev, _ := e.await(mark, Is("acquired", b), "a grant to B")
	t.Logf("B granted %v after node 0 restarted", (ev.At - in.Span().Injected).Round(time.Millisecond))
	e.awaitCount(mark, 2, Is("acquired", a), "A's next grants")
	return e.finish(PrimLock, k, Spec{Prim: PrimLock, TTL: rlMaxTTL, Fencing: true}, open(t, r.url(false)))
}

func TestRedlockRestartUnderHold(t *testing.T) {
	wantOK(t, restartUnderHold(t, true))
}

// TestRedlockRestartUnderHoldNoQuarantine is the negative control of
// TestRedlockRestartUnderHold: without quarantine, two holders at once.
func TestRedlockRestartUnderHoldNoQuarantine(t *testing.T) {
	wantViolation(t, restartUnderHold(t, false), CheckExclusion)
}
