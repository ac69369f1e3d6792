package memory

import (
	"sync"
	"time"
	"weak"
)

// Clock tells a Store the time. Implementations must be safe for concurrent
// use. The Store only compares and subtracts the times a clock returns; it
// never sleeps on them.
type Clock interface {
	Now() time.Time
}

// realClock is the default Clock: time.Now, monotonic reading included.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// ManualClock is a Clock that moves only when told to. Its times carry no
// monotonic clock reading. It is safe for concurrent use; the zero value
// reads the zero time.
//
// Set and Advance sweep every Store built on the clock (NewStore), dropping
// the holds that have expired at the new time and waking their keys' release
// watchers, before they return. The clock refers to those stores weakly, so
// it does not keep them alive.
type ManualClock struct {
	mu     sync.Mutex // protects now and stores
	now    time.Time
	stores []weak.Pointer[Store] // stores to sweep after the time moves
}

// NewManualClock returns a ManualClock that reads start (stripped of its
// monotonic clock reading) until it is moved.
func NewManualClock(start time.Time) *ManualClock {
	return &ManualClock{now: start.Round(0)}
}

// Now returns the clock's current time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t, which may be earlier than the current time (holds
// then live longer), and sweeps the clock's stores.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t.Round(0)
	c.mu.Unlock()
	c.sweep()
}

// Advance moves the clock by d, which may be negative, and sweeps the
// clock's stores.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	c.sweep()
}

// attach makes Set and Advance sweep s.
func (c *ManualClock) attach(s *Store) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stores = append(c.stores, weak.Make(s))
}

// sweep sweeps every live store of c, without holding c.mu: a store's sweep
// reads the clock.
func (c *ManualClock) sweep() {
	c.mu.Lock()
	var live []*Store
	kept := c.stores[:0]
	for _, p := range c.stores {
		if s := p.Value(); s != nil {
			live = append(live, s)
			kept = append(kept, p)
		}
	}
	clear(c.stores[len(kept):])
	c.stores = kept
	c.mu.Unlock()
	for _, s := range live {
		s.sweep()
	}
}
