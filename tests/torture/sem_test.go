package torture

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dsync-dev/dsync/internal/testenv/faultproxy"
	"github.com/dsync-dev/dsync/internal/testenv/proc"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
)

const semSize = 2

func semConfig(k string, ttl time.Duration) WorkerConfig {
	c := lockConfig(k, ttl)
	c.Prim, c.Size = PrimSem, semSize
	return c
}

// TestSemContention: more workers than permits; never more than Size
// holders valid at once, and the semaphore's tokens grow.
func TestSemContention(t *testing.T) {
	forEach(t, func(t *testing.T, s *system) {
		e := newEnv(t)
		k := key(t)
		e.start(4, s.url(), semConfig(k, s.ttl))
		e.ready()
		e.awaitCount(0, 25, Is("acquired", nil), "grants")
		rep := e.finish(PrimSem, k, s.spec(PrimSem), testutil.Open(t, s.url()))
		wantOK(t, rep)
	})
}

// TestSemPausedHolder: a permit holder frozen with SIGSTOP past its TTL;
// the others go on using both permits, never more than Size valid at once,
// and once continued the frozen holder learns that it lost its permit.
func TestSemPausedHolder(t *testing.T) {
	forEach(t, func(t *testing.T, s *system) {
		type judged struct {
			rep *Report
			h   *Hold
		}
		r := untilLanded(t, func(k string) (judged, string) {
			e := newEnv(t)
			cfg := semConfig(k, s.ttl)
			cfg.Work = 100 * time.Millisecond // the pause lands in this sleep
			e.start(4, s.url(), cfg)
			e.ready()
			ev, mark := e.await(0, Is("acquired", nil), "a first holder")
			paused := e.h.WorkerOf(ev)
			in := e.inject(PauseClient(paused))
			// The others holding every permit at once proves the frozen
			// permit gone on the server; the frozen hold's expiry then
			// has passed too (the server never expires it earlier).
			mark = e.awaitCount(mark, 1, holdAtOnce(semSize, paused), "every permit held by the others at once")
			e.await(mark, func(x proc.Event) bool { return x.At > monoExpiry(t, ev) }, "the frozen permit's expiry")
			e.heal(in)
			e.await(mark, Is("released", paused), "the frozen holder's release")
			e.awaitCount(mark, 3, Is("acquired", nil), "grants after the resume")
			rep := e.finish(PrimSem, k, s.spec(PrimSem), testutil.Open(t, s.url()))
			h := rep.History.HoldOf(paused.Index(), ev.At)
			if h == nil {
				t.Fatal("the frozen hold is not in the history")
			}
			return judged{rep, h}, pauseMissed(h, rep.Spans[0], false)
		})
		wantOK(t, r.rep)
		wantLossNoticed(t, r.rep, r.h)
	})
}

// TestSemKilledHolder: a permit holder killed with SIGKILL gives its
// permit back when its TTL runs out; never more than Size holders.
func TestSemKilledHolder(t *testing.T) {
	forEach(t, func(t *testing.T, s *system) {
		rep := killedHolder(t, s, 4, 6, func(k string) WorkerConfig {
			cfg := semConfig(k, s.ttl)
			cfg.Work = 100 * time.Millisecond
			return cfg
		})
		wantOK(t, rep)
	}, "redis", "redlock")
}

// partition says which masters each client of a partitioned semaphore
// scenario reaches (the links to the others refuse), and what else
// happens to the links.
type partition struct {
	reach [3][]int
	// fault, when set, is injected once grants flow, on the clients'
	// proxies (ps[client][master]), then healed.
	fault func(ps [][]*faultproxy.Proxy) Fault
	// foreign, when set, has a client reach a redis-server outside the
	// five at its address of one master (which it reaches no more): the
	// clients no longer share their masters.
	foreign *foreignAt
}

// foreignAt: client's address of master reaches a server outside the five.
type foreignAt struct{ client, master int }

// partitionedSem: three clients of a semaphore of size 2 on 5 Redis nodes,
// each reaching only 3 of them, hold permits for a while, over and over.
// Any two sets of 3 of the 5 masters share one, so the Redlock semaphore,
// built from slot locks, admits at most 2. A naive majority vote over
// per-node sets of holders admits all three (no node sees more than 2) in
// the first partition (A: 0,1,2; B: 2,3,4; C: 0,1,3). Each worker reports
// where each permit is held ("held"), and the masters are read every 50
// ms, so that a violation names the slots, the masters and what each
// master held then: those views, one per violation described, are logged
// and returned.
func partitionedSem(t *testing.T, prim string, pt partition) (*Report, []string) {
	t.Parallel()
	s := newSystem(t, "redlock")
	e := newEnv(t)
	k := key(t)
	cfg := semConfig(k, rlMaxTTL)
	cfg.Prim = prim
	cfg.Writes, cfg.Work = 4, 300*time.Millisecond
	var ps [][]*faultproxy.Proxy
	for client, reach := range pt.reach {
		url, cps := s.proxied()
		ps = append(ps, cps)
		var addrs []string
		for i, p := range cps {
			addrs = append(addrs, p.Addr())
			switch {
			case pt.foreign != nil && *pt.foreign == foreignAt{client, i}:
				if err := p.Refuse(); err != nil {
					t.Fatal(err)
				}
				f := redistest.Start(t, nil)
				url = strings.Replace(url, p.Addr(), f.Addr(), 1)
				addrs[i] = f.Addr()
			case !slices.Contains(reach, i):
				if err := p.Refuse(); err != nil {
					t.Fatal(err)
				}
			}
		}
		c := cfg
		c.Nodes = strings.Join(addrs, ",")
		e.start(1, url, c)
	}
	seen := WatchMasters(s.addrs(), k, 50*time.Millisecond)
	defer seen.Stop()
	e.ready()
	mark := e.awaitCount(0, 3, Is("acquired", nil), "grants")
	if pt.fault != nil {
		in := e.inject(pt.fault(ps))
		mark = e.awaitCount(mark, 3, Is("acquired", nil), "grants under the fault")
		e.heal(in)
	}
	if pt.foreign != nil {
		// A's holds never meet B's: three at once comes within a few
		// holds, at the first moment when both hold one slot and C the
		// other.
		e.awaitWithin(mark, holdAtOnce(semSize+1, nil), "three holders at once", foreignTimeout)
	} else {
		e.awaitCount(mark, 3, Is("acquired", nil), "grants")
	}
	rep := e.finish(prim, k, Spec{Prim: prim, Size: semSize, TTL: rlMaxTTL, Fencing: prim == PrimSem}, nil)
	var views []string
	if r := rep.Result(CheckExclusion); prim == PrimSem && !r.OK() {
		names := map[string]string{}
		for _, h := range rep.History.Holds {
			if h.Place != nil {
				names[h.Place.Hold] = fmt.Sprintf("%s/%d", h.ID, h.Token)
			}
		}
		for _, at := range r.At {
			v := seen.Around(rep.History, at, names)
			t.Logf("at the violation at %s:\n%s", rep.History.at(at), v)
			views = append(views, v)
		}
	}
	return rep, views
}

// The partitions of the scenario: each client reaches 3 of the 5 masters.
var (
	partitionABC = [3][]int{{0, 1, 2}, {2, 3, 4}, {0, 1, 3}}
	partitionDEF = [3][]int{{0, 2, 4}, {1, 2, 3}, {0, 3, 4}}
)

func TestRedlockSemPartitioned(t *testing.T) {
	rep, _ := partitionedSem(t, PrimSem, partition{reach: partitionABC})
	wantOK(t, rep)
}

// TestRedlockSemPartitionedOtherwise: the masters split another way.
func TestRedlockSemPartitionedOtherwise(t *testing.T) {
	rep, _ := partitionedSem(t, PrimSem, partition{reach: partitionDEF})
	wantOK(t, rep)
}

// TestRedlockSemPartitionedLateReplies: the partition, with the replies of
// master 2 to every client held back past the per-node timeout for a
// while: its votes land after their rounds were decided (the commands
// apply on time), so late grants are withdrawn while other rounds go on.
func TestRedlockSemPartitionedLateReplies(t *testing.T) {
	rep, _ := partitionedSem(t, PrimSem, partition{reach: partitionABC, fault: func(ps [][]*faultproxy.Proxy) Fault {
		return Latency("master 2's replies", 2*rlNodeTimeout, ps[0][2], ps[1][2], ps[2][2])
	}})
	wantOK(t, rep)
}

// TestNaiveSemPartitioned is the negative control of
// TestRedlockSemPartitioned: the naive majority semaphore admits three
// holders of two permits, and the exclusion check says so.
func TestNaiveSemPartitioned(t *testing.T) {
	rep, _ := partitionedSem(t, PrimNaive, partition{reach: partitionABC})
	wantViolation(t, rep, CheckExclusion)
}

// foreignTimeout bounds TestRedlockSemForeignMaster's wait for three
// holders at once: some holds of the three workers, each of about 1.5s.
const foreignTimeout = time.Minute

// TestRedlockSemForeignMaster is the mechanism of an over-admission once
// seen in TestRedlockSemPartitioned, when a refused link closed its
// proxy's port and the kernel could hand the port to another test's
// server: a client's address of a master reaches a server outside the
// five. Here client A's master 2 is such a server, so A's majority
// {0, 1, foreign} shares no master with B's {2, 3, 4}: both hold one slot
// while C holds the other, three holders of two permits, each on what its
// client counts as a majority, with tokens that may go back (a majority
// that misses the other's counter). faultproxy.Refuse keeps its port for
// that reason: the Redlock argument holds for clients that reach the same
// masters, and only for them. It is also the test of the diagnostics: the
// violation names slots and masters, and the masters' view its holders.
func TestRedlockSemForeignMaster(t *testing.T) {
	rep, views := partitionedSem(t, PrimSem, partition{reach: partitionABC, foreign: &foreignAt{0, 2}})
	r := wantViolation(t, rep, CheckExclusion)
	// The violation explains itself: each holder's slot and masters, and
	// what the real masters held then, by holder.
	if r != nil && !r.OK() && !strings.Contains(r.Violations[0], " on masters ") {
		t.Errorf("the violation names no slot and masters: %s", r.Violations[0])
	}
	if len(views) == 0 || !strings.Contains(views[0], "=w") {
		t.Errorf("the masters' view at the violation names no holder: %q", views)
	}
}
