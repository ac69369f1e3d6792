package redisnode

import (
	"context"
	"sync"
	"time"

	"github.com/dsync-dev/dsync/backends"
)

// HandOver is how long a released lock is kept for the first live waiter
// in its line (backends.Request.Waiter), so that the waiter woken by the
// release notice takes it before anyone else. A waiter that lets it lapse
// (slow, or dead) loses its turn: the lock is free, anyone may take it,
// and that waiter counts again from its next attempt, at its old place.
// It is many round trips and a notice's delivery, so that the woken
// waiter makes it on a loaded machine too (under the race detector and
// CPU hogs, 50 ms was missed often enough to unsettle the order); a dead
// waiter costs the others one window.
const HandOver = 200 * time.Millisecond

// LineKeep is how long a lock's line lasts at least after a waiter last
// joined it (or its TTL, if longer). A lock's release tells waiters only
// while its line has someone in it: an uncontended release publishes
// nothing. A waiter keeps its place in the line with every refused
// attempt, so it is woken by a release unless it has made none for this
// long (and for its TTL); then its own retry timer wakes it.
const LineKeep = 10 * time.Minute

// Leave takes waiter out of key's line on this node; if the lock was kept
// for waiter, it goes to the next live waiter in line, or is freed, and
// the key's waiters are told.
func (n *Node) Leave(ctx context.Context, key, waiter string) error {
	own, err := n.ownKey(key)
	if err != nil {
		return err
	}
	if waiter == "" {
		return backends.Invalid("waiter", "empty")
	}
	if err := backends.CheckWaiter(waiter); err != nil {
		return err
	}
	n.waiting.done(key, waiter)
	return leaveScript.Run(ctx, n.client, []string{own}, waiter).Err()
}

// maxWaiting bounds a node's record of the waiters in its lines.
const maxWaiting = 4096

// waiting remembers the waiters that this node's attempts put in a line
// (refused with a Waiter), until they are granted or leave, so that their
// next attempts, fenced or not, go to acquire.lua, which takes a lock kept
// for them in one round trip; a plain SET NX would be refused by the
// reservation first, and, granted, would leave the waiter's place behind.
// It is only a hint: a waiter forgotten costs a round trip, or a lapsed
// hand-over window.
type waiting struct {
	mu sync.Mutex
	m  map[placeRef]struct{} // protected by mu
}

// placeRef names a waiter's place: its key and name.
type placeRef struct{ key, waiter string }

func (w *waiting) has(key, waiter string) bool {
	if waiter == "" {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.m[placeRef{key, waiter}]
	return ok
}

func (w *waiting) add(key, waiter string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil || len(w.m) >= maxWaiting {
		// Full of waiters that left without a word: start over.
		w.m = map[placeRef]struct{}{}
	}
	w.m[placeRef{key, waiter}] = struct{}{}
}

func (w *waiting) done(key, waiter string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, placeRef{key, waiter})
}
