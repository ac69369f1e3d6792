package lease

import (
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/deadline"
)

// The attempts and releases on one driver share a deadline.Clock, whatever
// Config they come from: a program that makes a locker per key per call
// (locker.New costs no I/O) still shares deadlines between calls. A clock
// is keyed by its driver, so that drivers made inside a testing/synctest
// bubble (whose clock is fake) never share one with drivers outside.
var (
	clocks    sync.Map // backends.Driver → *deadline.Clock
	numClocks atomic.Int32
)

// maxClocks bounds the cache, which holds on to drivers after they are
// closed: past it, the cache starts again empty.
const maxClocks = 256

// clockFor returns the clock of d's calls.
func clockFor(d backends.Driver) *deadline.Clock {
	if d == nil || !reflect.TypeOf(d).Comparable() {
		return new(deadline.Clock) // cannot be a map key: no sharing
	}
	if c, ok := clocks.Load(d); ok {
		return c.(*deadline.Clock)
	}
	if numClocks.Add(1) > maxClocks {
		clocks.Clear()
		numClocks.Store(1)
	}
	c, loaded := clocks.LoadOrStore(d, new(deadline.Clock))
	if loaded {
		numClocks.Add(-1)
	}
	return c.(*deadline.Clock)
}
