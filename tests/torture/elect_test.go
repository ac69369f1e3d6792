package torture

import (
	"testing"
	"time"

	"github.com/dsync-dev/dsync/internal/testenv/faultproxy"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
)

// electConfig: terms last longer than the TTL, so that a leader lives on
// its renewals, and end with a resignation.
func electConfig(k string, ttl time.Duration) WorkerConfig {
	c := lockConfig(k, ttl)
	c.Prim, c.Writes, c.Work = PrimElect, 8, 150*time.Millisecond
	return c
}

// TestElectContention: candidates take turns leading; one leader at a
// time, one leader per term, terms growing.
func TestElectContention(t *testing.T) {
	forEach(t, func(t *testing.T, s *system) {
		e := newEnv(t)
		k := key(t)
		e.start(3, s.url(), electConfig(k, s.ttl))
		e.ready()
		e.awaitCount(0, 4, Is("acquired", nil), "terms")
		wantOK(t, e.finish(PrimElect, k, s.spec(PrimElect), testutil.Open(t, s.url())))
	})
}

// TestElectPausedLeader: a leader frozen past its TTL is replaced by a
// leader of a greater term; once continued, its late write carries its old
// term and is rejected, and it learns that its term ended.
func TestElectPausedLeader(t *testing.T) {
	forEach(t, func(t *testing.T, s *system) {
		rep, h := pausedHolder(t, s, electConfig(key(t), s.ttl))
		wantFenced(t, rep, h)
	})
}

// TestElectKilledLeader: a leader killed with SIGKILL is replaced within
// the TTL plus slack.
func TestElectKilledLeader(t *testing.T) {
	forEach(t, func(t *testing.T, s *system) {
		rep := killedHolder(t, s, 3, 2, func(k string) WorkerConfig { return electConfig(k, s.ttl) })
		wantOK(t, rep)
		if r := rep.Result(CheckUnavailable); r.Skipped != "" {
			t.Errorf("the unavailability check did not run: %s", r.Skipped)
		}
	})
}

// TestElectCutOffLeader: every link of the leader to the backend drops
// its traffic (a partition): it cannot renew, its term ends on its own
// clock, another candidate leads after the TTL, never at the same time,
// and once the link heals the old leader campaigns again.
func TestElectCutOffLeader(t *testing.T) {
	forEach(t, func(t *testing.T, s *system) {
		e := newEnv(t)
		k := key(t)
		cfg := electConfig(k, s.ttl)
		// Terms of 3.6s: the cut-off leader's validity (the TTL from its
		// last renewal) must run out before its term would end with a
		// resignation, even if the cut lands after a renewal or two.
		cfg.Writes = 24
		links := map[*Worker][]*faultproxy.Proxy{}
		for range 3 {
			url, ps := s.proxied()
			links[e.start(1, url, cfg)[0]] = ps
		}
		e.ready()
		ev, mark := e.await(0, Is("acquired", nil), "a first leader")
		cut := e.h.WorkerOf(ev)
		ps := links[cut]
		in := e.inject(Blackhole(cut.ID(), ps...))
		_, mark2 := e.await(mark, IsNot("acquired", cut), "a new leader")
		e.await(mark, Is("lost", cut), "the cut-off leader to learn of its loss")
		e.heal(in)
		e.awaitCount(mark2, 2, Is("acquired", nil), "terms after the heal")
		rep := e.finish(PrimElect, k, s.spec(PrimElect), testutil.Open(t, s.url()))
		wantOK(t, rep)
	})
}
