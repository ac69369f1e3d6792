package torture

import (
	"strings"
	"testing"
	"time"

	"github.com/dsync-dev/dsync/internal/testenv/proc"
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
		rep := e.finish(PrimSem, k, s.spec(PrimSem), open(t, s.url()))
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
			mark = e.awaitCount(mark, 1, othersHoldAll(paused, semSize), "every permit held by the others at once")
			e.await(mark, func(x proc.Event) bool { return x.At > monoExpiry(t, ev) }, "the frozen permit's expiry")
			e.heal(in)
			e.await(mark, Is("released", paused), "the frozen holder's release")
			e.awaitCount(mark, 3, Is("acquired", nil), "grants after the resume")
			rep := e.finish(PrimSem, k, s.spec(PrimSem), open(t, s.url()))
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

// partitionedSem: three clients of a semaphore of size 2 on 5 Redis nodes,
// each reaching only 3 of them (A: 0,1,2; B: 2,3,4; C: 0,1,3; the links
// to the others refuse), hold permits for a while, over and over. A naive
// majority vote over per-node sets of holders admits all three (no node
// sees more than 2); the Redlock semaphore, built from slot locks, admits
// at most 2.
func partitionedSem(t *testing.T, prim string) *Report {
	t.Parallel()
	s := newSystem(t, "redlock")
	e := newEnv(t)
	k := key(t)
	cfg := semConfig(k, rlMaxTTL)
	cfg.Prim = prim
	cfg.Writes, cfg.Work = 4, 300*time.Millisecond
	for _, reach := range [][]int{{0, 1, 2}, {2, 3, 4}, {0, 1, 3}} {
		url, ps := s.proxied()
		var addrs []string
		for i, p := range ps {
			addrs = append(addrs, p.Addr())
			if !contains(reach, i) {
				if err := p.Refuse(); err != nil {
					t.Fatal(err)
				}
			}
		}
		c := cfg
		c.Nodes = strings.Join(addrs, ",")
		e.start(1, url, c)
	}
	e.ready()
	e.awaitCount(0, 6, Is("acquired", nil), "grants")
	return e.finish(prim, k, Spec{Prim: prim, Size: semSize, TTL: rlMaxTTL, Fencing: prim == PrimSem}, nil)
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func TestRedlockSemPartitioned(t *testing.T) {
	rep := partitionedSem(t, PrimSem)
	wantOK(t, rep)
}

// TestNaiveSemPartitioned is the negative control of
// TestRedlockSemPartitioned: the naive majority semaphore admits three
// holders of two permits, and the exclusion check says so.
func TestNaiveSemPartitioned(t *testing.T) {
	wantViolation(t, partitionedSem(t, PrimNaive), CheckExclusion)
}
