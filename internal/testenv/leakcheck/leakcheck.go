// Package leakcheck is the goroutine-leak check every test package runs
// from TestMain.
package leakcheck

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// settle is how long goroutines get to end after the tests: goleak's own
// retries give up after about a second, but some dependencies end theirs
// only a few seconds after their owner closes: etcd's peer connections
// between members (rafthttp over net/http) close when etcd's 5 s read
// timeout expires after a member is stopped, and go-redis's dial prober
// (started after PoolSize failed dials to a dead node) checks for its
// pool's closing between one-second sleeps. What is still there after
// settle is a leak, with two exceptions in test tooling (see toxiproxyStuck
// and etcdKilledPeerVersion).
const settle = 10 * time.Second

// toxiproxyStuck is a goroutine of toxiproxy v2.12 (the fault proxy of the
// tests, never of dsync) that can block for good: when a toxic is removed
// from a link while its connection is closing, the stage before it may be
// left sending into a channel nobody reads any more (toxics.NoopToxic.Pipe,
// in "chan send"). internal/faultproxy avoids the worst case (removing a
// black hole from live connections), not every interleaving.
var toxiproxyStuck = goleak.IgnoreTopFunction("github.com/Shopify/toxiproxy/v2/toxics.(*NoopToxic).Pipe")

// etcdKilledPeerVersion is a goroutine of the embedded etcd server (test
// tooling, never dsync): a peer's version request served while the member
// is killed can block for good reading the storage version, on the lock of
// a backend that the kill left held (seen once in the torture suite, after
// TestEtcdMemberStopped/leader-killed).
var etcdKilledPeerVersion = goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/etcdserver/api/etcdhttp.newPeerHandler.versionHandler.func1")

// VerifyTestMain runs the tests, then fails the run if goroutines are left
// behind once they have had settle to end.
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(settle)
		for {
			err := goleak.Find(append(opts, toxiproxyStuck, etcdKilledPeerVersion)...)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "goleak: goroutines left after the tests: %v\n", err)
				code = 1
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	os.Exit(code)
}
