package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/fence"
	"github.com/dsync-dev/dsync/internal/testenv/etcdtest"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	"github.com/dsync-dev/dsync/locker"
)

// staleWrite shows what fencing is for: w1 holds the lock and "pauses"
// (it stops renewing, as a process stopped by SIGSTOP or a long GC pause
// would) past its TTL; w2, on a backend of its own as another process
// would be, takes the lock over; then w1 wakes up and writes. The
// resource's guard must refuse w1's write by its token. w2's grant is the
// proof that w1's hold really expired on the servers.
func staleWrite(ctx context.Context, b *dsync.Backend, url, key string, res *resource, s *story, r *backendReport) {
	const name = "stale write refused by its fencing token"
	r.stale = "ERROR"
	b2, err := dsync.Open(ctx, url)
	if err != nil {
		r.check(name, false, err.Error())
		return
	}
	defer b2.Close()
	l1, err1 := locker.New(b, key, &locker.Options{TTL: staleTTL})
	l2, err2 := locker.New(b2, key, &locker.Options{TTL: staleTTL})
	if err := errors.Join(err1, err2); err != nil {
		r.check(name, false, err.Error())
		return
	}
	// A fence per backend: tokens of different backends do not compare.
	fenced := key + "@" + r.name
	w1, err := l1.Acquire(ctx)
	if err != nil {
		r.check(name, false, "w1: "+err.Error())
		return
	}
	t1 := w1.Token()
	defer func() { _ = w1.Release(context.WithoutCancel(ctx)) }() // ErrNotHeld by then: nothing to undo
	first := res.write(ctx, fenced, t1, "w1")
	s.event("w1  acquired, token %d; its write accepted: %v; then it pauses, renewing nothing", t1, first == nil)
	paused := time.Now()
	actx, cancel := context.WithTimeout(ctx, 10*staleTTL)
	w2, err := l2.Acquire(actx)
	cancel()
	if err != nil {
		r.check(name, false, "w2 never took over: "+err.Error())
		return
	}
	tookOver := time.Since(paused)
	t2 := w2.Token()
	defer func() { _ = w2.Release(context.WithoutCancel(ctx)) }()
	s.event("w2  acquired after %v, token %d", roundDur(tookOver), t2)
	second := res.write(ctx, fenced, t2, "w2")
	late := res.write(ctx, fenced, t1, "w1, late") // w1 wakes up, unaware, and writes
	s.say("stale write: w1 took the lock with token %d, then paused past its ttl %v", t1, staleTTL)
	s.say("  w2 took over %v later with token %d; its write is accepted", roundDur(tookOver), t2)
	switch {
	case t1 == 0 || t2 == 0:
		r.stale = "no token"
		s.say("  this backend gives no fencing tokens: nothing can tell w1's late write from w2's")
		r.check(name, false, "no fencing tokens")
	case second != nil || !errors.Is(late, fence.ErrStale):
		r.stale = "ACCEPTED"
		r.check(name, false, fmt.Sprintf("w2's write: %v; w1's late write: %v", second, late))
	default:
		r.stale = "refused"
		s.say("  w1 wakes up and writes; the guard refuses it: %v", late)
		r.check(name, true, "")
	}
}

// burst acquires and releases l n times, one at a time, each Acquire
// retrying for at most 5 s (a loaded machine may slow a node past its
// per-node timeout now and then).
func burst(ctx context.Context, l *locker.Locker, n int) (granted int, took time.Duration) {
	start := time.Now()
	for range n {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		lease, err := l.Acquire(actx)
		cancel()
		if err != nil {
			continue
		}
		granted++
		_ = lease.Release(ctx)
	}
	return granted, time.Since(start)
}

// redisFaults restarts the single redis-server without persistence: every
// key is gone, fence counters included, yet tokens must not go back.
func redisFaults(srv *redistest.Server) func(context.Context, *dsync.Backend, *story, *backendReport) {
	return func(ctx context.Context, b *dsync.Backend, s *story, r *backendReport) {
		const name = "tokens grow across a restart without persistence"
		l, err := locker.New(b, "demo/restart", &locker.Options{TTL: demoTTL})
		if err != nil {
			r.check(name, false, err.Error())
			return
		}
		before, err := l.Acquire(ctx)
		if err != nil {
			r.check(name, false, err.Error())
			return
		}
		t1 := before.Token()
		_ = before.Release(ctx)
		if err := srv.Restart(ctx); err != nil {
			r.check(name, false, "restart: "+err.Error())
			return
		}
		restarted := time.Now()
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		after, err := l.Acquire(actx)
		cancel()
		if err != nil {
			r.check(name, false, "no grant after the restart: "+err.Error())
			return
		}
		t2 := after.Token()
		_ = after.Release(ctx)
		s.say("fault: redis-server restarted empty (no persistence: every key lost, the fence counter too)")
		s.say("  first grant %v later, token %d > %d before: the counter is re-seeded from the server's clock",
			roundDur(time.Since(restarted)), t2, t1)
		r.check(name, t2 > t1, fmt.Sprintf("token %d after the restart, %d before", t2, t1))
		r.faults = append(r.faults, "restarted empty: tokens grew")
	}
}

// redlockFaults kills two of the five masters (a quorum of three still
// grants), then restarts a live one without persistence: it may have
// forgotten locks it granted, so it must not vote until max_ttl has
// passed; meanwhile two voters are below quorum and nothing is granted.
func redlockFaults(masters []*redistest.Server) func(context.Context, *dsync.Backend, *story, *backendReport) {
	return func(ctx context.Context, b *dsync.Backend, s *story, r *backendReport) {
		l, err := locker.New(b, "demo/faults", &locker.Options{TTL: demoTTL})
		if err != nil {
			r.check("Redlock faults", false, err.Error())
			return
		}
		for _, i := range []int{3, 4} {
			if err := masters[i].Kill(); err != nil {
				r.check("kill a master", false, err.Error())
				return
			}
		}
		granted, took := burst(ctx, l, 10)
		s.say("fault: nodes 3 and 4 killed (SIGKILL): 3 of 5 still vote, quorum 3: %d of 10 acquisitions granted in %v",
			granted, roundDur(took))
		r.check("grants go on with 2 of 5 masters killed", granted == 10, fmt.Sprintf("%d of 10 granted", granted))

		const restartedNode = 1
		if err := masters[restartedNode].Restart(ctx); err != nil {
			r.check("restart a master", false, err.Error())
			return
		}
		restarted := time.Now()
		s.say("fault: node %d restarted empty: it may have forgotten the locks it granted, so it must not vote for max_ttl",
			restartedNode)
		var (
			seen, grantedAgain bool
			refused            int
			unsafe             []string
			quarantine         time.Duration // from the restart until the node's quarantine ended
			deadline           = restarted.Add(demoMaxTTL + 5*time.Second)
		)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			qBefore := quarantined(ctx, b, restartedNode)
			if qBefore && !seen {
				seen = true
				s.say("  node %d quarantined: 2 of 5 vote, below quorum 3, so acquisitions are refused", restartedNode)
			}
			if seen && !qBefore && quarantine == 0 {
				quarantine = time.Since(restarted)
			}
			lease, err := l.TryAcquire(ctx)
			if err != nil {
				refused++
				time.Sleep(100 * time.Millisecond)
				continue
			}
			if qBefore && quarantined(ctx, b, restartedNode) {
				unsafe = append(unsafe, fmt.Sprintf("token %d granted while node %d was quarantined", lease.Token(), restartedNode))
			}
			_ = lease.Release(ctx)
			grantedAgain = true
			if quarantine == 0 {
				quarantine = time.Since(restarted)
			}
			break
		}
		if grantedAgain {
			s.say("  node %d quarantined for %v (max_ttl %v + uptime rounding); %d acquisitions refused, then grants resume",
				restartedNode, roundDur(quarantine), demoMaxTTL, refused)
			r.faults = append(r.faults, "2 of 5 killed: grants went on", fmt.Sprintf("restart: quarantined %v", roundDur(quarantine)))
		}
		r.check("restarted master quarantined", seen, fmt.Sprintf("node %d was never reported quarantined", restartedNode))
		r.check("nothing granted below quorum", len(unsafe) == 0, fmt.Sprint(unsafe))
		r.check("grants resume after the quarantine", grantedAgain, fmt.Sprintf("no grant within %v of the restart", time.Since(restarted).Round(time.Second)))
	}
}

// quarantined reports whether b's health report has node i in restart
// quarantine.
func quarantined(ctx context.Context, b *dsync.Backend, i int) bool {
	h, err := b.Health(ctx)
	return err == nil && i < len(h.Nodes) && h.Nodes[i].QuarantinedUntil.After(time.Now())
}

// etcdFaults kills the member that leads the raft group: the other two
// elect a new leader and grants go on. The kill runs beside the
// measurement: a killed member takes seconds to close the streams its
// clients keep open, this stage's backend among them, which is closed here.
func etcdFaults(c *etcdtest.Cluster) func(context.Context, *dsync.Backend, *story, *backendReport) {
	return func(ctx context.Context, b *dsync.Backend, s *story, r *backendReport) {
		const name = "grants go on after the leader member was killed"
		l, err := locker.New(b, "demo/failover", &locker.Options{TTL: demoTTL})
		if err != nil {
			r.check(name, false, err.Error())
			return
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		cl, err := c.NewClient()
		if err != nil {
			r.check(name, false, err.Error())
			return
		}
		defer cl.Close()
		old, err := c.Leader(wctx)
		if err != nil {
			r.check(name, false, err.Error())
			return
		}
		ids := map[uint64]int{} // member ID to index
		for i, ep := range c.Endpoints() {
			st, err := cl.Status(wctx, ep)
			if err != nil {
				r.check(name, false, err.Error())
				return
			}
			ids[st.Header.MemberId] = i
		}
		killed := time.Now()
		var wg sync.WaitGroup
		defer wg.Wait()
		defer b.Close()
		wg.Go(func() { c.Kill(old) })

		// The new leader, as the survivors report it.
		elected, now := time.Duration(0), -1
		for now < 0 && wctx.Err() == nil {
			for i, ep := range c.Endpoints() {
				if i == old {
					continue
				}
				sctx, scancel := context.WithTimeout(wctx, 100*time.Millisecond)
				st, err := cl.Status(sctx, ep)
				scancel()
				if err != nil {
					continue
				}
				if j, ok := ids[st.Leader]; ok && j != old {
					now, elected = j, time.Since(killed)
					break
				}
			}
			if now < 0 {
				time.Sleep(5 * time.Millisecond)
			}
		}
		lease, err := l.Acquire(wctx)
		if err != nil {
			r.check(name, false, "no grant: "+err.Error())
			return
		}
		firstGrant := time.Since(killed)
		_ = lease.Release(ctx)
		granted, took := burst(ctx, l, 10)
		if now < 0 {
			s.say("fault: the raft leader, member %d, killed: no survivor reported a new leader within 10s", old)
		} else {
			s.say("fault: the raft leader, member %d, killed: member %d leads %v later", old, now, roundDur(elected))
		}
		s.say("  first grant %v after the kill; then %d of 10 granted in %v by the 2 members left", roundDur(firstGrant), granted, roundDur(took))
		r.check("a new raft leader after the leader was killed", now >= 0, "no new leader reported")
		r.check(name, granted == 10, fmt.Sprintf("%d of 10 granted", granted))
		r.faults = append(r.faults, fmt.Sprintf("leader killed: new leader in %v, grants after %v", roundDur(elected), roundDur(firstGrant)))
	}
}
