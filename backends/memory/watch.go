package memory

import (
	"context"

	"github.com/dsync-dev/dsync/backends"
)

// WatchReleases subscribes to release notices for key: its C receives one
// coalesced notice (naming the waiter a released lock is kept for, if any)
// after each Release of a hold on key, and after holds on key
// are seen to expire (on access, or when a ManualClock moves). The
// subscription is active when WatchReleases returns. The caller must Close
// it; closing the driver closes it too.
func (d *driver) WatchReleases(ctx context.Context, key string) (backends.Subscription, error) {
	if key == "" {
		return nil, backends.Invalid("key", "empty")
	}
	now, err := d.begin(ctx)
	if err != nil {
		return nil, err
	}
	s := d.store
	defer s.mu.Unlock()
	sub := &subscription{d: d, key: key, c: make(chan backends.Notice, 1)}
	e := s.entry(key, now)
	if e.watchers == nil {
		e.watchers = map[*subscription]struct{}{}
	}
	e.watchers[sub] = struct{}{}
	d.subs[sub] = struct{}{}
	return sub, nil
}

// subscription is a backends.Subscription on one key of a store.
type subscription struct {
	d   *driver
	key string
	c   chan backends.Notice // buffered(1): a later notice replaces a pending one

	closed bool // guarded by Store.mu
}

// C receives a notice after key is released or its holds expire. It is
// never closed.
func (sub *subscription) C() <-chan backends.Notice { return sub.c }

// Close unregisters the subscription; no notice is sent after it returns. It
// is idempotent.
func (sub *subscription) Close() {
	s := sub.d.store
	s.mu.Lock()
	defer s.mu.Unlock()
	sub.unregister()
}

// unregister detaches sub from its key and driver. Store.mu must be held.
func (sub *subscription) unregister() {
	if sub.closed {
		return
	}
	sub.closed = true
	s := sub.d.store
	if e := s.keys[sub.key]; e != nil {
		delete(e.watchers, sub)
		s.tidy(sub.key, e)
	}
	delete(sub.d.subs, sub)
}
