package etcd

import (
	"context"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsync-dev/dsync/backends"
)

// The line of a lock's waiters (Request.Waiter). Each waiter that a lock
// refused has a key below linePrefix(lk), named after it, so that etcd's
// key order is the order of the waiters' names, which is their arrival
// order. A key is on a lease of its waiter's (the lease its next attempt
// holds the lock on), which its attempts renew: a waiter that stops
// attempting, its process dead, loses its place within the lease's TTL.
// The lock is free for a waiter only when no key of the line sorts before
// its own, and for a lone attempt only when the line is empty: one compare
// of the acquiring transaction, which also deletes the winner's key. A
// release thus goes to the head of the line, and a releaser who asks again
// joins at the back.
//
// Whom a release is for, the release watch reads from etcd's events
// (lineView), and its notices name that heir, so that the layer above wakes
// only the heir's Acquire. The driver keeps nothing of its waiters but the
// leases their keys are on.

// linePrefix is the prefix of the line of the lock whose key is lk: lk
// and a NUL byte, which no key has (backends.CheckKey), so that no other
// lock's key nor any permit key starts with it, and so that one watch of
// [lk, lk+"\x01") sees the lock key and its line, in revision order.
func linePrefix(lk string) string { return lk + "\x00" }

// waiting is the lease that the key of one of the driver's waiters is on.
type waiting struct {
	lease clientv3.LeaseID
	secs  int64 // the lease's requested TTL
}

// lineView is a lock as its release watch has seen it: whether the lock
// key exists, and who waits in its line. Read at the watch's creation and
// kept up with the watch's events since, it serves only to name a
// release's heir.
type lineView struct {
	known bool     // read, and kept up since
	held  bool     // the lock key exists
	line  []string // the waiters' names, sorted: line[0] is the heir
}

// reset makes v what a read of the keys from lk to lk+"\x01" (keys only,
// in key order) returned.
func (v *lineView) reset(lk string, kvs []*mvccpb.KeyValue) {
	v.known, v.held, v.line = true, false, v.line[:0]
	for _, kv := range kvs {
		if k := string(kv.Key); k == lk {
			v.held = true
		} else if name, ok := strings.CutPrefix(k, linePrefix(lk)); ok {
			v.line = append(v.line, name)
		}
	}
}

// forget marks v unknown: the watch may have missed events.
func (v *lineView) forget() { v.known, v.held, v.line = false, false, v.line[:0] }

// apply applies evs, the events of one revision of the keys from lk to
// lk+"\x01", and reports whether the lock is then free and either was
// released or has a new heir: the heir's turn has come.
func (v *lineView) apply(lk string, evs []*clientv3.Event) bool {
	if !v.known {
		return false
	}
	heir, released := v.heir(), false
	for _, ev := range evs {
		put := ev.Type == mvccpb.PUT
		k := string(ev.Kv.Key)
		if k == lk {
			released = released || !put
			v.held = put
			continue
		}
		name, ok := strings.CutPrefix(k, linePrefix(lk))
		if !ok {
			continue
		}
		switch i, found := slices.BinarySearch(v.line, name); {
		case put && !found:
			v.line = slices.Insert(v.line, i, name)
		case !put && found:
			v.line = slices.Delete(v.line, i, i+1)
		}
	}
	return !v.held && (released || v.heir() != heir)
}

// heir is the waiter a free lock is kept for: the first in line, or ""
// when nobody waits or the view is not known.
func (v *lineView) heir() string {
	if len(v.line) == 0 {
		return ""
	}
	return v.line[0]
}

// Leave deletes waiter's key in key's line, so that the waiters behind it
// move up, and keeps its lease, which then holds no key, for a later
// Acquire. A key that is not there (never written, lapsed, or the
// waiter's attempt won the lock) is no error. It makes one request.
func (d *driver) Leave(ctx context.Context, key, waiter string) error {
	if d.closed.Load() {
		return backends.ErrClosed
	}
	lk, err := d.key(key)
	if err != nil {
		return err
	}
	if err := backends.CheckWaiter(waiter); err != nil || waiter == "" {
		return err
	}
	wk := linePrefix(lk) + waiter
	w, mine := d.pool.leave(wk)
	ctx, cancel := d.bound(ctx)
	defer cancel()
	resp, err := d.client.Delete(ctx, wk)
	if err != nil {
		return d.wrap(err) // the key lapses with its lease
	}
	d.seen(resp.Header)
	if mine && !d.pool.give(w.secs, w.lease) {
		d.revoke(ctx, w.lease)
	}
	return nil
}
