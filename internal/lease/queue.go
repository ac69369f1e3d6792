package lease

import (
	"context"
	"sync"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
)

// The waiters of one process for one key of one backend line up here,
// first come first served, and only the head of the line contends on the
// backend. Goroutines sharing a process therefore never starve one another
// (a releaser that asks again queues behind those already waiting, instead
// of winning the race it is best placed to win), and a crowd of local
// waiters costs the backend one poller, like etcd's waiters that each watch
// their predecessor. Contention between processes is still settled by the
// backend, with jittered retry and release notices.

// lines are the waiting lines of one backend, kept on it (State).
type lines struct {
	mu       sync.Mutex
	m        map[string]*line // by key; protected by mu
	idleSubs                  // protected by mu
}

// linesKey is the key of a backend's lines in its state.
type linesKey struct{}

// linesOf returns b's waiting lines, looked up once per primitive (New),
// not once per Acquire.
func linesOf(b *dsync.Backend) *lines {
	return State(b, linesKey{}, func() *lines { return newLines(maxIdle) })
}

// newLines returns empty lines that keep at most keep idle subscriptions
// (see linger.go).
func newLines(keep int) *lines {
	return &lines{m: map[string]*line{}, idleSubs: idleSubs{idle: map[string]idleSub{}, keep: keep}}
}

// line is the queue of one key while some waiter is at its head: turns
// holds the channels of the others, in arrival order. sub is the key's
// release notices, which the heads of the line share: subscribed by the
// first head that meets contention, closed when the line ends, so that a
// hand-over between two waiters of the process costs no subscription.
type line struct {
	turns []chan struct{}
	sub   backends.Subscription
}

// turn is a waiter's place at the head of a line.
type turn struct {
	ls     *lines
	key    string
	handed bool // passed on by a waiter of this process (pass)
}

// waitTurn blocks until the caller is at the head of c.Key's line, or ctx
// ends (the error is ctx's, and the caller has left the line). On success
// the caller must call pass once it is done contending.
func waitTurn(ctx context.Context, c *Config) (turn, error) {
	ls := c.lines
	t := turn{ls: ls, key: c.Key}
	ls.mu.Lock()
	l := ls.m[c.Key]
	if l == nil {
		ls.m[c.Key] = ls.adoptLocked(c.Key)
		ls.mu.Unlock()
		return t, nil
	}
	ch := make(chan struct{})
	l.turns = append(l.turns, ch)
	ls.mu.Unlock()

	select {
	case <-ch:
		t.handed = true
		return t, nil
	case <-ctx.Done():
		ls.mu.Lock()
		for i, other := range l.turns {
			if other == ch {
				l.turns = append(l.turns[:i], l.turns[i+1:]...)
				ls.mu.Unlock()
				return turn{}, ctx.Err()
			}
		}
		ls.mu.Unlock()
		// The turn was handed over as ctx ended: pass it on.
		t.pass()
		return turn{}, ctx.Err()
	}
}

// watch returns the release notices of the line's key for its head,
// subscribing with d when the line has none yet; fresh reports a new
// subscription, which may miss a release of the instant before.
func (t turn) watch(ctx context.Context, d backends.Driver) (sub backends.Subscription, fresh bool, err error) {
	t.ls.mu.Lock()
	l := t.ls.m[t.key]
	t.ls.mu.Unlock()
	if l.sub != nil { // only the head sets it, and the head is the caller
		return l.sub, false, nil
	}
	sub, err = d.WatchReleases(ctx, t.key)
	if err != nil {
		return nil, false, err
	}
	t.ls.mu.Lock()
	l.sub = sub
	t.ls.mu.Unlock()
	return sub, true, nil
}

// subscribed reports whether the line has the key's release notices
// already: kept from the process's last Acquire of the key, which met
// contention.
func (t turn) subscribed() bool {
	t.ls.mu.Lock()
	defer t.ls.mu.Unlock()
	return t.ls.m[t.key].sub != nil
}

// pass hands the head of the line to the next waiter, or frees the line
// and keeps its subscription for the process's next Acquire of the key
// (see linger.go).
func (t turn) pass() {
	ls := t.ls
	ls.mu.Lock()
	l := ls.m[t.key]
	if len(l.turns) > 0 {
		next := l.turns[0]
		l.turns = l.turns[1:]
		close(next)
		ls.mu.Unlock()
		return
	}
	delete(ls.m, t.key)
	kept := l.sub == nil || ls.parkLocked(t.key, l.sub)
	ls.mu.Unlock()
	if !kept {
		l.sub.Close()
	}
}
