package memory

import (
	"slices"
	"sync"
	"time"

	"github.com/dsync-dev/dsync/backends"
)

// Store is the state of one in-process "server": the holds of every key, a
// fence counter per key, and release watchers. Several Drivers may share a
// Store; it is safe for concurrent use and never closed. Make one with
// NewStore or Named; the zero Store is not usable.
//
// Expired holds are forgotten, but a key's fence counter is kept for the life
// of the store, so memory grows with the number of distinct keys ever
// acquired with Request.Fence set.
type Store struct {
	clock Clock

	// mu protects keys and sweepAt, and the fields of every entry, driver
	// and subscription marked "guarded by Store.mu". It is held for every
	// whole operation, which makes each one atomic.
	mu      sync.Mutex
	keys    map[string]*entry // an entry exists while it has holds, watchers or a fence drawn
	sweepAt int               // sweep every key when len(keys) reaches it
}

// entry is the state of one key. Guarded by Store.mu.
type entry struct {
	holds    []hold                     // may include expired holds until pruned
	limit    int                        // the Limit the holds were acquired with; meaningless without holds
	fence    uint64                     // last fencing token drawn; kept for the life of the store
	watchers map[*subscription]struct{} // woken on each release or observed expiry
	line     line                       // the lock's waiters, when they are served in order
}

// hold is one holder of a key.
type hold struct {
	token   string
	value   []byte // a private copy
	expires time.Time
	fence   uint64 // its fencing token; 0 if it drew none
}

// minSweep is the number of keys below which the amortized sweep never runs.
const minSweep = 64

// NewStore returns an empty store that reads the time from clock; nil means
// the real clock (time.Now). If clock is a *ManualClock, its Set and Advance
// also expire the store's holds and wake their watchers.
func NewStore(clock Clock) *Store {
	if clock == nil {
		clock = realClock{}
	}
	s := &Store{clock: clock, keys: map[string]*entry{}, sweepAt: minSweep}
	if mc, ok := clock.(*ManualClock); ok {
		mc.attach(s)
	}
	return s
}

var (
	namedMu sync.Mutex
	named   = map[string]*Store{} // protected by namedMu
)

// Named returns the process-wide store registered under name, on the real
// clock, creating it on first use. memory://name opens drivers on it. Named
// stores are never removed; names are compared exactly.
func Named(name string) *Store {
	namedMu.Lock()
	defer namedMu.Unlock()
	s, ok := named[name]
	if !ok {
		s = NewStore(nil)
		named[name] = s
	}
	return s
}

// lookup returns key's entry after dropping its expired holds (and waking its
// watchers if any were dropped), or nil if it has none. s.mu must be held.
func (s *Store) lookup(key string, now time.Time) *entry {
	e := s.keys[key]
	if e != nil {
		s.expire(key, e, now)
	}
	return s.keys[key]
}

// entry returns key's entry, creating it if needed. s.mu must be held.
func (s *Store) entry(key string, now time.Time) *entry {
	if e := s.lookup(key, now); e != nil {
		return e
	}
	e := &entry{}
	s.keys[key] = e
	return e
}

// expire drops e's expired holds, wakes its watchers if any were dropped,
// and forgets e once it holds nothing worth keeping. s.mu must be held.
func (s *Store) expire(key string, e *entry, now time.Time) {
	n := len(e.holds)
	e.holds = slices.DeleteFunc(e.holds, func(h hold) bool { return !now.Before(h.expires) })
	e.line.prune(now)
	if len(e.holds) < n {
		e.notify()
	}
	s.tidy(key, e)
}

// tidy forgets e if it has no holds, no watchers and no fence to remember.
// s.mu must be held.
func (s *Store) tidy(key string, e *entry) {
	if len(e.holds) == 0 && len(e.watchers) == 0 && e.fence == 0 && e.line.empty() {
		delete(s.keys, key)
	}
}

// maybeSweep sweeps every key once the map has doubled since the last sweep,
// so that keys nobody touches again cannot grow the map without bound, at an
// amortized constant cost per call. s.mu must be held.
func (s *Store) maybeSweep(now time.Time) {
	if len(s.keys) < s.sweepAt {
		return
	}
	s.sweepLocked(now)
	s.sweepAt = max(minSweep, 2*len(s.keys))
}

// sweep expires every key's holds at the clock's current time.
func (s *Store) sweep() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(s.clock.Now())
}

func (s *Store) sweepLocked(now time.Time) {
	for key, e := range s.keys {
		s.expire(key, e, now) // deleting the current key while ranging is allowed
	}
}

// notify sends one coalesced notice to each of e's watchers, naming the
// waiter the lock is kept for, if any.
func (e *entry) notify() {
	n := backends.Notice{Heir: e.line.reserved}
	for sub := range e.watchers {
		backends.Deliver(sub.c, n)
	}
}

// find returns the index of token's hold in e, or -1.
func (e *entry) find(token string) int {
	return slices.IndexFunc(e.holds, func(h hold) bool { return h.token == token })
}
