package torture

import (
	"testing"

	"github.com/dsync-dev/dsync/internal/testenv/testutil"
)

// TestEtcdMemberStopped: an etcd member, the leader or a follower, is
// stopped (gracefully, handing leadership over, or killed abruptly) while
// workers contend, and restarted: grants go on, and every check passes
// (etcd keeps leases alive across a change of leader; a follower's loss
// leaves a majority).
func TestEtcdMemberStopped(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		member int
		kill   bool
	}{
		{"leader-stopped", LeaderMember, false},
		{"leader-killed", LeaderMember, true},
		{"follower-killed", FollowerMember, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newSystem(t, "etcd")
			e := newEnv(t)
			k := key(t)
			e.start(3, s.url(), lockConfig(k, s.ttl))
			e.ready()
			mark := e.awaitCount(0, 3, Is("acquired", nil), "grants before the fault")
			in := e.inject(StopMember(s.cluster, c.member, c.kill))
			mark = e.awaitCount(mark, 6, Is("acquired", nil), "grants without the member")
			e.heal(in)
			e.awaitCount(mark, 3, Is("acquired", nil), "grants after the restart")
			wantOK(t, e.finish(PrimLock, k, s.spec(PrimLock), testutil.Open(t, s.url())))
		})
	}
}
