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
// pool's closing between one-second sleeps. Nothing is ignored: what is
// still there after settle is a leak.
const settle = 10 * time.Second

// VerifyTestMain runs the tests, then fails the run if goroutines are left
// behind once they have had settle to end.
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(settle)
		for {
			err := goleak.Find(opts...)
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
