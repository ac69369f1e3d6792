package torture

import (
	"testing"
)

// TestEtcdLeaderStopped: the etcd member that leads the cluster is stopped
// (gracefully, handing leadership over, or killed abruptly) while workers
// contend, and restarted: grants go on, and every check passes (etcd keeps
// leases alive across a change of leader).
func TestEtcdLeaderStopped(t *testing.T) {
	t.Parallel()
	for _, kill := range []bool{false, true} {
		name := "stopped"
		if kill {
			name = "killed"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newSystem(t, "etcd")
			e := newEnv(t)
			k := key(t)
			e.start(3, s.url(), lockConfig(k, s.ttl))
			e.ready()
			mark := e.awaitCount(0, 3, Is("acquired", nil), "grants before the fault")
			in := e.inject(StopMember(s.cluster, -1, kill))
			mark = e.awaitCount(mark, 6, Is("acquired", nil), "grants without the old leader")
			e.heal(in)
			e.awaitCount(mark, 3, Is("acquired", nil), "grants after the restart")
			wantOK(t, e.finish(PrimLock, k, s.spec(PrimLock), open(t, s.url())))
		})
	}
}
