package redisnode

import (
	"context"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync/backends"
)

// releasedNotice is the message of a release that leaves the key free
// (see release.lua); any other names the waiter the lock is kept for.
const releasedNotice = "released"

// unsubscribeTimeout bounds the UNSUBSCRIBE a Subscription.Close sends when
// it was the channel's last watcher; Close has no context of its own.
const unsubscribeTimeout = 2 * time.Second

// Notifier multiplexes every watcher of a node's release notices over one
// pub/sub connection, created on the first Watch. A channel is subscribed
// on the server while it has at least one watcher. Close awaits its one
// goroutine.
type Notifier struct {
	node *Node

	// subMu serializes SUBSCRIBE and UNSUBSCRIBE with the reference counts
	// they follow, so that a channel's last watcher leaving and a new one
	// arriving reach the server in the order they happened. It is held
	// across network I/O; mu is not.
	subMu sync.Mutex

	mu       sync.Mutex                        // protects the fields below
	ps       *goredis.PubSub                   // nil until the first watcher
	watchers map[string]map[*subscription]bool // by channel name
	started  bool                              // dispatcher goroutine started
	closing  bool                              // driver closed: no new ps or watcher
	wg       sync.WaitGroup                    // the dispatcher
}

// NewNotifier returns the release notices of node's keys.
func NewNotifier(node *Node) *Notifier {
	return &Notifier{node: node, watchers: map[string]map[*subscription]bool{}}
}

// Watch subscribes to release notices for key. It returns once the
// SUBSCRIBE is written to the shared pub/sub connection (dialing it first if
// needed, within ctx), without waiting for the server to confirm it: a
// release in the next instant may go unnoticed. The caller must Close the
// subscription. The subscription's channel is never closed. After Close it
// returns ErrClosed.
func (n *Notifier) Watch(ctx context.Context, key string) (backends.Subscription, error) {
	channel, err := n.node.Channel(key)
	if err != nil {
		return nil, err
	}
	s := &subscription{n: n, channel: channel, c: make(chan backends.Notice, 1)}

	n.subMu.Lock()
	defer n.subMu.Unlock()

	n.mu.Lock()
	if n.closing {
		n.mu.Unlock()
		return nil, backends.ErrClosed
	}
	if n.ps == nil {
		n.ps = n.node.client.Subscribe(context.Background()) // no channel: no I/O yet
	}
	ps := n.ps
	subs := n.watchers[channel]
	first := subs == nil
	if first {
		subs = map[*subscription]bool{}
		n.watchers[channel] = subs
	}
	subs[s] = true
	n.mu.Unlock()

	if first {
		if err := ps.Subscribe(ctx, channel); err != nil {
			// go-redis keeps the channel in its set and will subscribe it
			// again on its next reconnect; with no watcher left, the
			// dispatcher ignores what it delivers.
			n.mu.Lock()
			n.removeLocked(s)
			closing := n.closing
			n.mu.Unlock()
			if closing {
				return nil, backends.ErrClosed
			}
			return nil, err
		}
	}

	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closing {
		// The driver closed during the SUBSCRIBE: nothing will be
		// dispatched to this watcher.
		n.removeLocked(s)
		return nil, backends.ErrClosed
	}
	if !n.started {
		// Channel starts go-redis's receive and health-check goroutines,
		// which end when the PubSub is closed; the receive goroutine
		// closes msgs just before it returns, which ends ours.
		msgs := ps.Channel()
		n.started = true
		n.wg.Add(1)
		go n.dispatch(msgs)
	}
	return s, nil
}

// dispatch hands each release message to the watchers of its channel as
// a notice naming the heir, if any (see line.lua), without blocking: a
// watcher that has not taken the last notice yet gets this one instead.
func (n *Notifier) dispatch(msgs <-chan *goredis.Message) {
	defer n.wg.Done()
	for m := range msgs {
		var notice backends.Notice
		if m.Payload != releasedNotice {
			notice.Heir = m.Payload
		}
		n.mu.Lock()
		for s := range n.watchers[m.Channel] {
			backends.Deliver(s.c, notice)
		}
		n.mu.Unlock()
	}
}

func (n *Notifier) unwatch(s *subscription) {
	n.subMu.Lock()
	defer n.subMu.Unlock()

	n.mu.Lock()
	last := n.removeLocked(s)
	ps, closing := n.ps, n.closing
	n.mu.Unlock()

	if last && !closing {
		ctx, cancel := context.WithTimeout(context.Background(), unsubscribeTimeout)
		// On failure the server may keep sending this channel's notices
		// until the connection is replaced (go-redis has already dropped it
		// from the set it resubscribes); the dispatcher ignores them.
		_ = ps.Unsubscribe(ctx, s.channel)
		cancel()
	}
}

// removeLocked removes s from its channel's watchers and reports whether it
// was the last one. n.mu must be held.
func (n *Notifier) removeLocked(s *subscription) (last bool) {
	subs := n.watchers[s.channel]
	if !subs[s] {
		return false
	}
	delete(subs, s)
	if len(subs) > 0 {
		return false
	}
	delete(n.watchers, s.channel)
	return true
}

// Close ends the pub/sub connection and awaits the dispatcher. It is
// idempotent.
func (n *Notifier) Close() {
	n.mu.Lock()
	n.closing = true
	ps := n.ps
	n.mu.Unlock()
	if ps != nil {
		// Its only error is a failure to close the socket, which leaves
		// nothing to undo.
		_ = ps.Close()
	}
	n.wg.Wait()
}

// subscription is one watcher of one key's release channel.
type subscription struct {
	n       *Notifier
	channel string
	c       chan backends.Notice // buffered(1): notices coalesce
	once    sync.Once
}

// C receives a notice after the key is released; releases that happen
// before the last notice is received coalesce into it. It is never closed.
func (s *subscription) C() <-chan backends.Notice { return s.c }

// Close ends the subscription, unsubscribing the channel on the server when
// it was the key's last watcher (which may take one bounded round trip). It
// is idempotent.
func (s *subscription) Close() { s.once.Do(func() { s.n.unwatch(s) }) }
