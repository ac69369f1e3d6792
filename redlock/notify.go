package redlock

import (
	"context"
	"sync"
	"time"

	"github.com/dsync-dev/dsync/backends"
)

// WatchReleases subscribes to release notices on every node and merges
// them into one coalesced channel (the latest notice of any node), so that a waiter wakes as long as any
// node is up. Each node is subscribed by a goroutine of its own, within the
// per-node timeout; WatchReleases returns once a quorum of them have sent
// their SUBSCRIBE (or all have given up, or ctx is done). A release deletes
// the key, and publishes, on a quorum of nodes at least, one of which is
// then subscribed; a node that is down, paused or cut off never delays the
// caller. The subscription's Close stops the goroutines without waiting
// for them; the driver's Close awaits them. For a semaphore, the
// release of any slot is published on its key's channel.
func (d *driver) WatchReleases(ctx context.Context, key string) (backends.Subscription, error) {
	if d.closed.Load() {
		return nil, backends.ErrClosed
	}
	if key == "" {
		return nil, backends.Invalid("key", "empty")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	nt, _ := d.timeoutFor(d.maxTTL)
	s := &mergedSub{c: make(chan backends.Notice, 1), stop: make(chan struct{})}
	subscribed := make(chan bool, len(d.nodes)) // never blocks a sender
	for _, n := range d.nodes {
		if !d.spawn(func() { s.forward(d.ctx, n, key, nt, subscribed) }) {
			s.Close()
			return nil, backends.ErrClosed
		}
	}
	for ok, answered := 0, 0; ok < d.quorum && answered < len(d.nodes); answered++ {
		select {
		case good := <-subscribed:
			if good {
				ok++
			}
		case <-ctx.Done():
			s.Close()
			return nil, ctx.Err()
		}
	}
	return s, nil
}

type mergedSub struct {
	c    chan backends.Notice
	stop chan struct{} // closed by Close
	once sync.Once
}

// forward subscribes to one node's notices, reports whether that worked,
// and passes the notices on until the subscription or the driver (ctx) is
// closed.
func (s *mergedSub) forward(ctx context.Context, n *node, key string, nt time.Duration, subscribed chan<- bool) {
	sctx, cancel := context.WithTimeout(ctx, nt)
	sub, err := n.notices.Watch(sctx, key)
	cancel()
	subscribed <- err == nil
	if err != nil {
		return // a hint only: the other nodes still notify
	}
	defer sub.Close()
	for {
		select {
		case <-s.stop:
			return
		case <-ctx.Done():
			return
		case n := <-sub.C():
			backends.Deliver(s.c, n)
		}
	}
}

func (s *mergedSub) C() <-chan backends.Notice { return s.c }

func (s *mergedSub) Close() { s.once.Do(func() { close(s.stop) }) }
