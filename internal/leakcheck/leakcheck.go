// Package leakcheck is the goroutine-leak check every test package runs
// from TestMain, with the few third-party goroutines that outlive a clean
// shutdown by design listed once, with the reason.
package leakcheck

import (
	"testing"

	"go.uber.org/goleak"
)

// ignored are goroutines of dependencies that end on their own shortly
// after their owner is closed.
var ignored = []goleak.Option{
	// go-redis starts a dial prober after PoolSize failed dials in a row (a
	// dead node); it checks for the pool's closing between one-second
	// sleeps, so it ends within a second of Client.Close.
	goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
}

// VerifyTestMain runs the tests, then fails if goroutines are left behind.
func VerifyTestMain(m *testing.M, extra ...goleak.Option) {
	goleak.VerifyTestMain(m, append(ignored, extra...)...)
}
