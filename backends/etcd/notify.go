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
	d *Driver

	mu      sync.Mutex           // protects the fields below
	watches map[string]*keyWatch // by lock key
	closed  bool
	wg      sync.WaitGroup // the watch goroutines
}

func (n *notifier) init(d *Driver) {
	n.d = d
	n.watches = map[string]*keyWatch{}
}

// keyWatch is the watch of one name: two etcd watches, of its lock key and
// of its semaphore's prefix.
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
	// line are the driver's waiters in the lock's line, by line key,
	// registered by their refused attempts. While there are some, a
	// release wakes the subscriptions only if one of them is at the head.
	line map[string]*waiting
	// releasedAt is the revision of the last release known: the driver's
	// own, or one the watch saw.
	releasedAt int64
	// dels are the last deletions of line keys that the watch saw, oldest
	// first, at most maxDels; it saw every one from revision delsFrom on
	// (0: its watch is not created yet). A waiter registered after its
	// look counts those that came after the look (inLine).
	dels     []lineDel
	delsFrom int64
}

// lineDel is the deletion of a line key, at revision rev.
type lineDel struct {
	key string
	rev int64
}

// maxDels bounds keyWatch.dels: about the hand-overs of the time between
// a look and its registration, many times over.
const maxDels = 64

// WatchReleases subscribes to release notices for key: its C receives a
// value after the lock key is deleted, or, for a semaphore, a permit that
// may free a slot is, by a release or by the expiry of its lease. The
// deletion of the key of an attempt that got no permit is not a release:
// once an attempt of this driver has found the semaphore full, only the
// deletion of one of the holders it saw counts (until the next attempt).
//
// It returns at once, and the watch starts in the background, at the
// revision at which etcd creates it, so that etcd serves it from its
// synced path, as events happen: a watch from an older revision waits for
// etcd's catch-up loop, which runs every 100 ms, and that is what slows
// etcd's own Mutex down under contention. When the next attempt on key
// found it held or full before the watch was created (or none did within
// 100 ms), the subscriptions get one notice, since a release may have
// happened in between; no deletion after that attempt is missed.
// Subscriptions of one key
// share one watch of the driver's (two etcd watches: the lock key and the
// semaphore's prefix). The caller must Close the subscription; closing the
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

// run watches the name's deletions until ctx ends, re-creating the watches
// if etcd ends one. The client retries a broken watch stream on its own,
// resuming after the last revision it delivered.
func (w *keyWatch) run(ctx context.Context) {
	defer w.n.wg.Done()
	defer close(w.done)
	d := w.n.d
	var rev int64 // 0: from the revision at which the watch is created
	for {
		rev = w.watchFrom(ctx, rev)
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

// watchFrom watches the lock key and the semaphore prefix from rev until
// either watch ends, and returns the revision to resume both from. The two
// share the client's watch stream.
//
// With rev 0, the watches start at the revision at which etcd creates
// them, so that etcd serves them from its synced path at once; a watch
// from an older revision waits for etcd's catch-up loop, which runs every
// 100 ms, and that is what slows etcd's own Mutex down under contention.
// The deletions between the first refused attempt of the subscribers and
// the watches' creation are not reported one by one: when the attempt
// (see refused) came before the creation, or none came within startWait,
// the subscribers get one notice, which may be spurious.
func (w *keyWatch) watchFrom(ctx context.Context, rev int64) int64 {
	d := w.n.d
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opts := []clientv3.OpOption{clientv3.WithFilterPut()}
	if rev != 0 {
		opts = append(opts, clientv3.WithRev(rev))
	} else {
		opts = append(opts, clientv3.WithCreatedNotify())
	}
	chans := [2]clientv3.WatchChan{
		// The lock key and its line (linePrefix).
		d.client.Watch(wctx, w.key, append(opts, clientv3.WithRange(w.key+"\x01"))...),
		d.client.Watch(wctx, w.key+"/", append(opts, clientv3.WithPrefix())...),
	}
	next := [2]int64{rev, rev}
	// While the watches start from their creation: how many are still to
	// be created, then the first refused attempt's revision, awaited.
	creating := 0
	var created int64 // the highest creation revision
	var start <-chan int64
	var startTimer <-chan time.Time
	if rev == 0 {
		creating = len(chans)
	}
	for open := len(chans); open > 0; {
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
				w.notify()
			}
			continue
		case <-startTimer:
			start, startTimer = nil, nil
			w.notify()
			continue
		}
		if !ok {
			chans[i] = nil
			open--
			cancel() // one ended: end the other, and start both again
			continue
		}
		if resp.Created && creating > 0 {
			d.seen(resp.Header)
			next[i] = resp.Header.Revision + 1
			if i == 0 {
				w.mu.Lock()
				w.dels, w.delsFrom = w.dels[:0], next[i]
				w.mu.Unlock()
			}
			created = max(created, resp.Header.Revision)
			if creating--; creating == 0 {
				start, startTimer = w.start, time.After(startWait)
			}
			continue
		}
		if resp.CompactRevision != 0 {
			// Deletions before it are lost; one may have been a release.
			next[i] = max(next[i], resp.CompactRevision)
			if i == 0 {
				w.lostDelsBefore(resp.CompactRevision)
			}
			w.notify()
			continue
		}
		if resp.Err() != nil {
			w.notify() // the watch ends; a waiter should look for itself
			continue
		}
		d.seen(resp.Header)
		for _, ev := range resp.Events {
			if ev.Type != mvccpb.DELETE {
				continue
			}
			k := string(ev.Kv.Key)
			next[i] = ev.Kv.ModRevision + 1
			switch {
			case i == 1:
				if w.frees(k) {
					w.notify()
				}
			case k == w.key:
				w.released(ev.Kv.ModRevision)
			default:
				w.passed(k, ev.Kv.ModRevision)
			}
		}
	}
	if next[0] == 0 || next[1] == 0 {
		// Ended before it was created: resume from where the driver is,
		// and tell the subscribers to look for themselves.
		rev := d.rev.Load() + 1
		w.lostDelsBefore(rev)
		w.notify()
		return rev
	}
	return min(next[0], next[1])
}

// lostDelsBefore records that line deletions before revision rev may not
// have been seen: a waiter whose look is older looks again.
func (w *keyWatch) lostDelsBefore(rev int64) {
	w.mu.Lock()
	w.delsFrom = max(w.delsFrom, rev)
	w.mu.Unlock()
}

// released wakes the subscriptions after a release of the lock, unless
// every waiter of the driver's in its line is known to have someone
// ahead: that one's process is woken instead.
func (w *keyWatch) released(rev int64) {
	w.mu.Lock()
	wake := len(w.line) == 0
	w.releasedAt = max(w.releasedAt, rev)
	for _, x := range w.line {
		if head, known := x.head(); head || !known {
			wake = true
		}
	}
	w.mu.Unlock()
	if wake {
		w.notify()
	}
}

// passed counts the deletion, at revision rev, of the line key k (a
// waiter served, gone, or lapsed) for the driver's waiters behind it, and
// wakes the subscriptions when one of them reaches the head, so that it
// looks for itself: the lock may be free (a waiter that left), or held by
// the one served, in which case the look, while it works, tells the new
// head to write at once when it is released.
func (w *keyWatch) passed(k string, rev int64) {
	w.mu.Lock()
	if n := len(w.dels); n > 0 && (rev < w.dels[n-1].rev || rev == w.dels[n-1].rev && k == w.dels[n-1].key) {
		w.mu.Unlock()
		return // seen already: a watch resumed from before it
	}
	if len(w.dels) == maxDels {
		w.delsFrom = w.dels[0].rev + 1
		w.dels = append(w.dels[:0], w.dels[1:]...)
	}
	w.dels = append(w.dels, lineDel{k, rev})
	wake := false
	for wk, x := range w.line {
		if k < wk && x.passed(rev) {
			wake = true
		}
	}
	w.mu.Unlock()
	if wake {
		w.notify()
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

// notify sends a notice to every subscription. It names no heir: in
// strict order the lock goes to the head of the line, whose attempt alone
// can take it.
func (w *keyWatch) notify() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for s := range w.subs {
		backends.Deliver(s.c, backends.Notice{})
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

// inLine registers the driver's waiter x, whose key is wk, in the line of
// lock key k, for the watch of k if there is one, with what its attempt
// saw at revision rev: ahead waiters ahead of it, or, with ahead < 0, no
// look. The deletions ahead of x that the watch saw after rev are counted
// now, under the lock that counts the later ones, so that none is missed
// or counted twice; the subscriptions are woken if x is then at the head.
// A look older than what the watch saw all of (it started after, or let
// them go) cannot be kept up: x then looks again at the next release.
func (n *notifier) inLine(k, wk string, x *waiting, ahead, rev int64) {
	w := n.watchOf(k)
	if w == nil {
		if ahead >= 0 {
			x.looked(true, ahead, rev)
		}
		return
	}
	w.mu.Lock()
	if w.line == nil {
		w.line = map[string]*waiting{}
	}
	w.line[wk] = x
	wake := false
	switch {
	case ahead < 0:
	case w.delsFrom != 0 && w.delsFrom <= rev+1:
		look, passed := rev, false
		for _, del := range w.dels {
			if del.rev > look {
				if del.key < wk {
					ahead, passed = ahead-1, true
				}
				rev = del.rev
			}
		}
		x.looked(true, ahead, rev)
		// At the head now: its attempt's view is out of date if a
		// waiter ahead went, or the lock was released, since.
		wake = ahead <= 0 && (passed || w.releasedAt > look)
	default:
		x.looked(false, 0, rev)
		wake = w.delsFrom != 0 // the start notice covers a watch not yet created
	}
	w.mu.Unlock()
	if wake {
		w.notify()
	}
}

// outOfLine forgets the driver's waiter whose key is wk in the line of
// lock key k: served, gone, or lapsed.
func (n *notifier) outOfLine(k, wk string) {
	w := n.watchOf(k)
	if w == nil {
		return
	}
	w.mu.Lock()
	delete(w.line, wk)
	w.mu.Unlock()
}

// released tells the local subscriptions of lock key k at once that this
// driver has released its lock or one of its permits, at revision rev,
// without waiting for the watch to report the deletion (which it will, a
// moment later: one more notice, coalesced or spurious).
func (n *notifier) released(k string, rev int64) {
	w := n.watchOf(k)
	if w != nil {
		w.mu.Lock()
		w.releasedAt = max(w.releasedAt, rev)
		w.mu.Unlock()
		w.notify()
	}
}

// lastRelease is the revision of the last release of lock key k that the
// driver knows of: its own, or one its watch of k saw; 0 if none.
func (n *notifier) lastRelease(k string) int64 {
	w := n.watchOf(k)
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.releasedAt
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
