package etcd

import (
	"context"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsync-dev/dsync/backends"
)

const (
	// rewatchDelay spaces out the re-creation of a watch that etcd ended
	// (after a compaction, for instance), so that a watch that keeps
	// failing cannot spin.
	rewatchDelay = 100 * time.Millisecond
	// startWait is how long a new watch waits for an attempt on its key to
	// fail and tell it the revision to start from.
	startWait = 100 * time.Millisecond
)

// notifier keeps one etcd watch per key that has watchers, shared by all of
// the key's subscriptions, each run by a goroutine that the notifier owns.
// A key's watch is cancelled, and its goroutine awaited, when its last
// subscription closes or the driver does.
type notifier struct {
	d *Driver

	mu      sync.Mutex           // protects the fields below
	watches map[string]*keyWatch // by etcd key
	closed  bool
	wg      sync.WaitGroup // the watch goroutines
}

func (n *notifier) init(d *Driver) {
	n.d = d
	n.watches = map[string]*keyWatch{}
}

// keyWatch is the watch of one etcd key.
type keyWatch struct {
	n      *notifier
	name   string // the lock's name
	key    string // its etcd key
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns
	start  chan int64    // buffered(1): the revision of a failed attempt

	mu   sync.Mutex // protects subs
	subs map[*subscription]struct{}
}

// WatchReleases subscribes to release notices for key: its C receives a
// value after the key is deleted, by a release or by the expiry of its
// lease. It returns at once, and the watch starts in the background, just
// after the revision at which the next attempt on key finds it held (or,
// if no attempt fails within 100 ms, after the highest revision the driver
// has seen). It misses no deletion after that revision, and etcd serves it
// from its synced path, as events happen: a watch from an older revision
// waits for etcd's catch-up loop, which runs every 100 ms, and that is what
// slows etcd's own Mutex down under contention. Subscriptions of one key
// share one etcd watch. The caller must Close the subscription; closing the
// driver ends it too. Its channel is never closed.
func (d *Driver) WatchReleases(ctx context.Context, key string) (backends.Subscription, error) {
	if d.closed.Load() {
		return nil, backends.ErrClosed
	}
	k, err := d.Key(key)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return d.notify.watch(key, k)
}

func (n *notifier) watch(name, k string) (*subscription, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, backends.ErrClosed
	}
	w := n.watches[k]
	if w == nil {
		ctx, cancel := context.WithCancel(context.Background())
		w = &keyWatch{n: n, name: name, key: k, cancel: cancel, done: make(chan struct{}), start: make(chan int64, 1), subs: map[*subscription]struct{}{}}
		n.watches[k] = w
		n.wg.Add(1)
		go w.run(ctx)
	}
	s := &subscription{w: w, c: make(chan struct{}, 1)}
	w.mu.Lock()
	w.subs[s] = struct{}{}
	w.mu.Unlock()
	return s, nil
}

// run watches the key's deletions until ctx ends, re-creating the watch if
// etcd ends it. The client retries a broken watch stream on its own,
// resuming after the last revision it delivered.
func (w *keyWatch) run(ctx context.Context) {
	defer w.n.wg.Done()
	defer close(w.done)
	d := w.n.d
	var rev int64
	select {
	case r := <-w.start:
		rev = r + 1
	case <-time.After(startWait):
		rev = d.rev.Load() + 1
	case <-ctx.Done():
		return
	}
	for {
		for resp := range d.client.Watch(ctx, w.key, clientv3.WithRev(rev), clientv3.WithFilterPut()) {
			if resp.CompactRevision != 0 {
				// Deletions before it are lost; one may have been ours.
				rev = resp.CompactRevision
				w.notify()
				continue
			}
			if resp.Err() != nil {
				w.notify() // the watch ends; a waiter should look for itself
				continue
			}
			d.seen(resp.Header)
			for _, ev := range resp.Events {
				if ev.Type == mvccpb.DELETE {
					rev = ev.Kv.ModRevision + 1
					d.holds.deleted(w.name, ev.Kv.ModRevision)
					w.notify()
				}
			}
		}
		if ctx.Err() != nil || d.client.Ctx().Err() != nil {
			return // cancelled, or the client was closed
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(rewatchDelay):
		}
	}
}

// notify sends a notice to every subscription that has none pending.
func (w *keyWatch) notify() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for s := range w.subs {
		select {
		case s.c <- struct{}{}:
		default:
		}
	}
}

// held tells a watch of k that has not started yet the revision at which an
// attempt found k held.
func (n *notifier) held(k string, rev int64) {
	n.mu.Lock()
	w := n.watches[k]
	n.mu.Unlock()
	if w != nil {
		select {
		case w.start <- rev:
		default: // started already, or told by another attempt
		}
	}
}

// released tells the key's local subscriptions at once that this driver
// has released k, without waiting for the watch to report the deletion
// (which it will, a moment later: one more notice, coalesced or spurious).
func (n *notifier) released(k string) {
	n.mu.Lock()
	w := n.watches[k]
	n.mu.Unlock()
	if w != nil {
		w.notify()
	}
}

func (n *notifier) unwatch(s *subscription) {
	w := s.w
	n.mu.Lock()
	w.mu.Lock()
	delete(w.subs, s)
	last := len(w.subs) == 0
	w.mu.Unlock()
	stop := last && n.watches[w.key] == w
	if stop {
		delete(n.watches, w.key)
		w.cancel()
	}
	n.mu.Unlock()
	if stop {
		<-w.done
	}
}

// close cancels every watch and awaits the goroutines.
func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	for k, w := range n.watches {
		w.cancel()
		delete(n.watches, k)
	}
	n.mu.Unlock()
	n.wg.Wait()
}

// subscription is one watcher of one key's releases.
type subscription struct {
	w    *keyWatch
	c    chan struct{} // buffered(1): notices coalesce
	once sync.Once
}

// C receives a value after the key is released or its hold expires;
// releases before the last value is received coalesce into it. It is never
// closed.
func (s *subscription) C() <-chan struct{} { return s.c }

// Close ends the subscription; when it was the key's last, it cancels the
// key's watch and awaits its goroutine, which takes no network round trip.
// It is idempotent.
func (s *subscription) Close() { s.once.Do(func() { s.w.n.unwatch(s) }) }
