package redlock

import (
	"context"
	"reflect"
	"sync"

	"github.com/dsync-dev/dsync/backends"
)

// WatchReleases subscribes to release notices on every node (a release
// publishes on each) and merges them into one coalesced channel, so that a
// waiter wakes as long as any node is up. One goroutine per subscription
// does the merging; Close stops and awaits it.
func (d *Driver) WatchReleases(ctx context.Context, key string) (backends.Subscription, error) {
	if d.closed.Load() {
		return nil, backends.ErrClosed
	}
	s := &mergedSub{c: make(chan struct{}, 1), stop: make(chan struct{})}
	cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(s.stop)}}
	for _, n := range d.nodes {
		sub, err := n.drv.WatchReleases(ctx, key)
		if err != nil {
			continue // a hint only: the other nodes still notify
		}
		s.subs = append(s.subs, sub)
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(sub.C())})
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			if i, _, _ := reflect.Select(cases); i == 0 {
				return
			}
			select {
			case s.c <- struct{}{}:
			default:
			}
		}
	}()
	return s, nil
}

type mergedSub struct {
	c    chan struct{}
	stop chan struct{}
	subs []backends.Subscription
	wg   sync.WaitGroup
	once sync.Once
}

func (s *mergedSub) C() <-chan struct{} { return s.c }

func (s *mergedSub) Close() {
	s.once.Do(func() {
		close(s.stop)
		s.wg.Wait()
		for _, sub := range s.subs {
			sub.Close()
		}
	})
}
