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
	// fail and tell it the revision from which the subscribers wait.
	startWait = 100 * time.Millisecond
)

// notifier keeps one watch per name that has watchers, shared by all of
// the name's subscriptions, each run by a goroutine that the notifier owns.
// A name's watch is cancelled, and its goroutine awaited, when its last
// subscription closes or the driver does.
type notifier struct {
	d *driver

	mu      sync.Mutex           // protects the fields below
	watches map[string]*keyWatch // by lock key
	closed  bool
	wg      sync.WaitGroup // the watch goroutines
}

func (n *notifier) init(d *driver) {
	n.d = d
	n.watches = map[string]*keyWatch{}
}

// keyWatch is the watch of one name: two etcd watches, of its lock key
// with its line, and of its semaphore's prefix.
type keyWatch struct {
	n      *notifier
	key    string // its lock key; its permits live below key+"/"
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns
	start  chan int64    // buffered(1): the revision of a refused attempt

	mu   sync.Mutex // protects the fields below
	subs map[*subscription]struct{}
	// permits are the keys of the holders that the last refused attempt
	// on a semaphore saw; only their deletion frees a permit. Nil: every
	// deletion counts.
	permits map[string]struct{}
	// lock is the lock and its line as the watch has seen them, for the
	// heir that notices name.
	lock lineView
}

// WatchReleases subscribes to release notices for key: its C receives a
// notice after the lock key is deleted, or, for a semaphore, a permit that
// may free a slot is, by a release or by the expiry of its lease. The
// deletion of the key of an attempt that got no permit is not a release:
// once an attempt of this driver has found the semaphore full, only the
// deletion of one of the holders it saw counts (until the next attempt).
// A lock's notice names its heir, the first waiter in its line, whose
// attempt alone can take it; another notice follows, naming the next, if
// the heir leaves the line (or its place lapses) before taking the lock.
//
// It returns at once, and the watch starts in the background, at the
// revision at which etcd creates it, so that etcd serves it from its
// synced path, as events happen: a watch from an older revision waits for
// etcd's catch-up loop, which runs every 100 ms, and that is what slows
// etcd's own Mutex down under contention. The watch then reads the lock
// and its line at that revision. When the next attempt on key found it
// held or full before the watch was created (or none did within 100 ms),
// the subscriptions get one notice unless the lock is held, since a
// release may have happened in between; no deletion after that attempt is
// missed. Subscriptions of one key share one watch of the driver's (two
// etcd watches: the lock key with its line, and the semaphore's prefix).
// The caller must Close the subscription; closing the driver ends it too.
// Its channel is never closed.
func (d *driver) WatchReleases(ctx context.Context, key string) (backends.Subscription, error) {
	if d.closed.Load() {
		return nil, backends.ErrClosed
	}
	k, err := d.key(key)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return d.notify.watch(k)
}

func (n *notifier) watch(k string) (*subscription, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, backends.ErrClosed
	}
	w := n.watches[k]
	if w == nil {
		ctx, cancel := context.WithCancel(context.Background())
		w = &keyWatch{n: n, key: k, cancel: cancel, done: make(chan struct{}), start: make(chan int64, 1), subs: map[*subscription]struct{}{}}
		n.watches[k] = w
		n.wg.Add(1)
		go w.run(ctx)
	}
	s := &subscription{w: w, c: make(chan backends.Notice, 1)}
	w.mu.Lock()
	w.subs[s] = struct{}{}
	w.mu.Unlock()
	return s, nil
}

// run watches the name until ctx ends, re-creating the watches if etcd
// ends one. The client retries a broken watch stream on its own, resuming
// after the last revision it delivered.
func (w *keyWatch) run(ctx context.Context) {
	defer w.n.wg.Done()
	defer close(w.done)
	d := w.n.d
	for {
		w.watchOnce(ctx)
		// A release may have gone unseen: the subscribers look for
		// themselves.
		w.mu.Lock()
		w.lock.forget()
		w.mu.Unlock()
		w.notify("")
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

// watchOnce watches the lock key with its line and the semaphore prefix
// until either watch ends, etcd compacts past what it delivered, or ctx
// ends. The two share the client's watch stream, and start at the revision
// at which etcd creates them, so that etcd serves them from its synced
// path at once; the lock and its line are read at the lock watch's
// creation revision, and kept up with its events since (puts included:
// they say who holds and who joins). The deletions between the first
// refused attempt of the subscribers and the watches' creation are not
// reported one by one: when the attempt (see refused) came before the
// creation, or none came within startWait, the subscribers get one notice
// (see wake), which may be spurious.
func (w *keyWatch) watchOnce(ctx context.Context) {
	d := w.n.d
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	chans := [2]clientv3.WatchChan{
		d.client.Watch(ctx, w.key, clientv3.WithRange(w.key+"\x01"), clientv3.WithCreatedNotify()),
		d.client.Watch(ctx, w.key+"/", clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify()),
	}
	// While the watches are created: how many are still to be, then the
	// first refused attempt's revision, awaited.
	creating := len(chans)
	var created int64 // the highest creation revision
	var read int64    // the revision at which the lock and its line were read
	var start <-chan int64
	var startTimer <-chan time.Time
	for {
		var (
			i    int
			resp clientv3.WatchResponse
			ok   bool
		)
		select {
		case resp, ok = <-chans[0]:
		case resp, ok = <-chans[1]:
			i = 1
		case r := <-start:
			start, startTimer = nil, nil
			if r < created {
				w.wake()
			}
			continue
		case <-startTimer:
			start, startTimer = nil, nil
			w.wake()
			continue
		}
		if !ok || resp.Err() != nil { // ended, cancelled, or compacted past
			return
		}
		d.seen(resp.Header)
		if resp.Created {
			created = max(created, resp.Header.Revision)
			if i == 0 {
				read = resp.Header.Revision
				if !w.readLock(ctx, read) {
					return
				}
			}
			if creating--; creating == 0 {
				start, startTimer = w.start, time.After(startWait)
			}
			continue
		}
		if i == 1 {
			for _, ev := range resp.Events {
				if ev.Type == mvccpb.DELETE && w.frees(string(ev.Kv.Key)) {
					w.notify("")
				}
			}
			continue
		}
		// The events of the lock and its line, one revision at a time;
		// those up to the read are in it already.
		for evs := resp.Events; len(evs) > 0; {
			rev := evs[0].Kv.ModRevision
			n := 1
			for n < len(evs) && evs[n].Kv.ModRevision == rev {
				n++
			}
			if rev > read {
				w.applyLock(evs[:n])
			}
			evs = evs[n:]
		}
	}
}

// readLock reads the lock key and its line at revision rev into the view,
// and reports whether it could.
func (w *keyWatch) readLock(ctx context.Context, rev int64) bool {
	d := w.n.d
	ctx, cancel := d.bound(ctx)
	defer cancel()
	resp, err := d.client.Get(ctx, w.key, clientv3.WithRange(w.key+"\x01"), clientv3.WithRev(rev), clientv3.WithKeysOnly())
	if err != nil {
		return false
	}
	w.mu.Lock()
	w.lock.reset(w.key, resp.Kvs)
	w.mu.Unlock()
	return true
}

// applyLock applies the events of one revision of the lock and its line,
// and tells the subscriptions when the heir's turn has come.
func (w *keyWatch) applyLock(evs []*clientv3.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lock.apply(w.key, evs) {
		w.deliverLocked(w.lock.heir())
	}
}

// frees reports whether the deletion of the permit key k may free a slot.
func (w *keyWatch) frees(k string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.permits == nil {
		return true
	}
	_, ok := w.permits[k]
	return ok
}

// notify sends a notice naming heir to every subscription.
func (w *keyWatch) notify(heir string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.deliverLocked(heir)
}

func (w *keyWatch) deliverLocked(heir string) {
	for s := range w.subs {
		backends.Deliver(s.c, backends.Notice{Heir: heir})
	}
}

// wake tells the subscriptions that a release may have gone unseen, unless
// the lock is held: the notice names the heir, if the view knows one.
func (w *keyWatch) wake() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.lock.held {
		w.deliverLocked(w.lock.heir())
	}
}

// refused tells the watch of lock key k, if there is one, that an attempt
// found the name held or full at revision rev: a watch that has not
// started yet starts just after it. permits are the holders that a
// semaphore's attempt saw (nil for a lock): from now on only their
// deletion counts as a release.
func (n *notifier) refused(k string, rev int64, permits []string) {
	w := n.watchOf(k)
	if w == nil {
		return
	}
	var set map[string]struct{}
	if permits != nil {
		set = make(map[string]struct{}, len(permits))
		for _, p := range permits {
			set[p] = struct{}{}
		}
	}
	w.mu.Lock()
	w.permits = set
	w.mu.Unlock()
	select {
	case w.start <- rev:
	default: // started already, or told by another attempt
	}
}

// watchOf returns the watch of key k, or nil when nobody watches it.
func (n *notifier) watchOf(k string) *keyWatch {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.watches[k]
}

// released tells the local subscriptions of lock key k at once that this
// driver has released its lock or one of its permits, without waiting for
// the watch to report the deletion (which it will, a moment later, naming
// the heir: one more notice, coalesced or spurious). The notice names
// nobody, since the watch's view of the line may lag behind the release.
func (n *notifier) released(k string) {
	if w := n.watchOf(k); w != nil {
		w.notify("")
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
	c    chan backends.Notice // buffered(1): notices coalesce
	once sync.Once
}

// C receives a value after the key is released or its hold expires (for a
// semaphore: one of its permits);
// releases before the last value is received coalesce into it. It is never
// closed.
func (s *subscription) C() <-chan backends.Notice { return s.c }

// Close ends the subscription; when it was the key's last, it cancels the
// key's watch and awaits its goroutine, which takes no network round trip.
// It is idempotent.
func (s *subscription) Close() { s.once.Do(func() { s.w.n.unwatch(s) }) }
