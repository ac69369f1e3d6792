package lease

import (
	"sync"
	"time"

	"github.com/dsync-dev/dsync/backends"
)

// lingerFor is how long a key's release notices stay subscribed after its
// line ends. The process's next Acquire of the key within it uses them as
// they are: a process that takes a contended lock over and over neither
// subscribes and unsubscribes each time nor makes the attempt that a fresh
// subscription needs (see Acquire). maxIdle bounds the subscriptions kept
// per backend; the backend's Close closes them. BenchmarkLinger shows what
// it saves.
const (
	lingerFor = time.Second
	maxIdle   = 64
)

// idleSubs are the subscriptions of a backend's lines that ended, kept
// for lingerFor, at most keep of them. Its fields are protected by the
// lines' mutex.
type idleSubs struct {
	keep int
	idle map[string]idleSub // by key
	// expiry closes the subscriptions whose time is up; nil while none
	// are kept.
	expiry   *time.Timer
	expiring sync.WaitGroup // expiry's runs; added to under mu, before closed
	closed   bool
}

// idleSub is the release notices of a key whose line ended, kept until the
// time until.
type idleSub struct {
	sub   backends.Subscription
	until time.Time
}

// adoptLocked returns the line of key's new head: with the subscription
// kept for key, if any. Notices that came before the head's
// first attempt are dropped: the attempt sees what they say. ls.mu must be
// held.
func (ls *lines) adoptLocked(key string) *line {
	s, ok := ls.idle[key]
	if !ok {
		return &line{}
	}
	delete(ls.idle, key)
	select {
	case <-s.sub.C():
	default:
	}
	return &line{sub: s.sub}
}

// parkLocked keeps sub, the subscription of key's line that just ended,
// for lingerFor, and reports whether it did: not once the backend is
// closed or ls.keep are kept. ls.mu must be held.
func (ls *lines) parkLocked(key string, sub backends.Subscription) bool {
	if ls.closed || len(ls.idle) >= ls.keep {
		return false
	}
	ls.idle[key] = idleSub{sub, time.Now().Add(lingerFor)}
	if ls.expiry == nil {
		ls.expiry = time.AfterFunc(lingerFor, ls.expire)
	}
	return true
}

// expire closes the idle subscriptions whose time is up, and runs again
// when the next one's is.
func (ls *lines) expire() {
	ls.mu.Lock()
	if ls.closed {
		ls.mu.Unlock()
		return
	}
	ls.expiring.Add(1)
	defer ls.expiring.Done()
	now := time.Now()
	var done []backends.Subscription
	next := lingerFor
	for k, s := range ls.idle {
		if left := s.until.Sub(now); left > 0 {
			next = min(next, left)
			continue
		}
		done = append(done, s.sub)
		delete(ls.idle, k)
	}
	if len(ls.idle) > 0 {
		ls.expiry.Reset(next)
	} else {
		ls.expiry = nil
	}
	ls.mu.Unlock()
	for _, s := range done {
		s.Close()
	}
}

// Close closes the idle subscriptions, and awaits a run of expire. The
// backend calls it when it closes, after its driver.
func (ls *lines) Close() {
	ls.mu.Lock()
	ls.closed = true
	if ls.expiry != nil {
		ls.expiry.Stop()
	}
	idle := ls.idle
	ls.idle = nil
	ls.mu.Unlock()
	ls.expiring.Wait()
	for _, s := range idle {
		s.sub.Close()
	}
}
