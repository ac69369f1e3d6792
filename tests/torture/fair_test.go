package torture

import (
	"slices"
	"testing"
	"time"

	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/lease"
	"github.com/dsync-dev/dsync/internal/testenv/proc"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
)

// TestFairAcrossProcesses: 8 worker processes contend for one lock with
// the defaults (but the scenarios' TTL), each holding it for one fenced write and 100 µs of work and
// asking again at once. Every check must pass, and on a backend that
// serves waiters in order the least served worker gets at least half the
// busiest one's grants. The figures
// (grants per worker, worst wait, grants per second) are logged; they are
// the separate-processes row of docs/performance.md.
func TestFairAcrossProcesses(t *testing.T) {
	const workers, grants = 8, 400
	forEach(t, func(t *testing.T, s *system) {
		e := newEnv(t)
		k := key(t)
		cfg := WorkerConfig{Prim: PrimLock, Key: k, TTL: s.ttl, Writes: 1, Work: 100 * time.Microsecond, AcquireTimeout: time.Minute}
		e.start(workers, s.url(), cfg)
		e.ready()
		// Every worker runs and the servers grant (a fresh Redlock master
		// votes only after its quarantine): count from here.
		_, from := e.await(e.h.Mark(), Is("acquired", nil), "a first grant")
		e.awaitCount(from, grants, Is("acquired", nil), "grants")
		b := testutil.Open(t, s.url())
		rep := e.finish(PrimLock, k, s.spec(PrimLock), b)
		wantOK(t, rep)

		st := fairness(e.h.Events(), from)
		t.Logf("%s, 8 processes: grants per worker %v (fewest/most %.2f), worst wait %v, %.0f grants/s",
			s.name, st.counts, st.ratio(), st.worst.Round(time.Millisecond), st.rate())
		if lo, hi := slices.Min(st.counts), slices.Max(st.counts); lease.Driver(b).Capabilities().Order != backends.NoOrder && 2*lo < hi {
			t.Errorf("unfair: the least served worker got %d grants, the busiest %d", lo, hi)
		}
	})
}

// fairStats are the grants of each worker from an event on, and the
// longest any of them waited.
type fairStats struct {
	counts      []int
	worst       time.Duration
	first, last time.Duration // the first and last grant counted
}

func (s fairStats) ratio() float64 {
	return float64(slices.Min(s.counts)) / float64(max(slices.Max(s.counts), 1))
}

func (s fairStats) rate() float64 {
	n := 0
	for _, c := range s.counts {
		n += c
	}
	return float64(n-1) / max(s.last-s.first, time.Millisecond).Seconds()
}

// fairness counts the grants ("acquired") of each worker at or after
// event index from, and the longest wait from an "asked" at or after from
// to its grant (a worker that asked earlier may have waited for the
// servers to start, or a Redlock master's quarantine to end).
func fairness(evs []proc.Event, from int) fairStats {
	var st fairStats
	asked := map[int]time.Duration{} // -1: before from
	count := map[int]int{}
	for i, ev := range evs {
		switch ev.Name {
		case "asked":
			asked[ev.Worker] = -1
			if i >= from {
				asked[ev.Worker] = ev.At
			}
		case "acquired":
			if i < from {
				continue
			}
			if st.first == 0 {
				st.first = ev.At
			}
			st.last = ev.At
			count[ev.Worker]++
			if at := asked[ev.Worker]; at >= 0 {
				st.worst = max(st.worst, ev.At-at)
			}
		}
	}
	for w := range asked { // a worker never granted counts 0
		st.counts = append(st.counts, count[w])
	}
	return st
}
