package etcd

import (
	"context"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsync-dev/dsync/backends"
)

// The line of a lock's waiters (Request.Waiter, issue 21). Each waiter
// that a lock refused has a key below linePrefix(lk), named after it, so
// that etcd's key order is the order of the waiters' names, which is their
// arrival order. A key is on a lease of its waiter's (the lease its next
// attempt holds the lock on), which every attempt renews: a waiter that
// stops attempting, its process dead, loses its place within the lease's
// TTL. The lock is free for a waiter only when no key of the line sorts
// before its own, and for a lone attempt only when the line is empty: one
// compare of the acquiring transaction, which also deletes the winner's
// key. A release thus goes to the head of the line, and a releaser who asks
// again joins at the back.
//
// A waiter that is not at the head does not write on each wake-up: once
// in line, it peeks first (one linearizable read, and a renewal of its
// lease when a third of the TTL has passed) and writes only when the lock
// is free and nobody is ahead of it, or when its key is gone.

// linePrefix is the prefix of the line of the lock whose key is lk. No
// other lock's key and no permit key starts with it: an escaped name has
// no "/", and no "%" but in "%25" and "%2F".
func linePrefix(lk string) string { return lk + "%q/" }

// waiting is what the driver knows of one of its waiters in a line.
type waiting struct {
	lease   clientv3.LeaseID // its line key is on it, and no other key
	secs    int64            // the lease's requested TTL
	renewed time.Time        // when its last renewal was sent
	ahead   int64            // waiters ahead of it at the last look
}

// peek decides, with one read and no write, whether the attempt a of a
// waiter w in line should go on to the acquiring transaction: it should
// unless the lock is held or another waiter is ahead, and its place is
// still there. It renews w's lease when a third of its TTL has passed
// since the last renewal. A refusal returns ErrNotAcquired; ok is true
// when the attempt should write, on w.lease unless the lease is gone
// (lost).
func (d *Driver) peek(ctx context.Context, a attempt, w *waiting) (ok, lost bool, err error) {
	now := time.Now()
	var renewed func(context.Context) (*pb.LeaseKeepAliveResponse, error)
	if now.Sub(w.renewed) >= time.Duration(w.secs)*time.Second/3 {
		renewed = d.renew.send(ctx, w.lease)
		w.renewed = now
	}
	resp, err := d.client.Txn(ctx).Then(
		clientv3.OpGet(a.lk, clientv3.WithCountOnly()),
		clientv3.OpGet(a.lp, clientv3.WithRange(a.wk), clientv3.WithCountOnly()),
		clientv3.OpGet(a.wk, clientv3.WithCountOnly()),
		clientv3.OpGet(a.sp, clientv3.WithPrefix(), clientv3.WithCountOnly()),
	).Commit()
	if renewed != nil {
		if _, kaErr := renewed(ctx); kaErr != nil {
			// Gone, or unknown: either way the acquiring transaction,
			// on a fresh lease, settles it.
			return true, true, nil
		}
	}
	if err != nil {
		return false, false, d.wrap(err)
	}
	d.seen(resp.Header)
	count := func(i int) int64 { return resp.Responses[i].GetResponseRange().GetCount() }
	if count(2) == 0 || count(3) > 0 {
		return true, false, nil // rejoin, or learn the limit of the permits
	}
	w.ahead = count(1)
	if count(0) == 0 && w.ahead == 0 {
		return true, false, nil
	}
	d.notify.refused(a.lk, resp.Header.Revision, nil)
	return false, false, backends.ErrNotAcquired
}

// Leave deletes waiter's key in key's line, so that the waiters behind it
// move up, and keeps its lease, which then holds no key, for a later
// Acquire. A key that is not there (never written, lapsed, or the
// waiter's attempt won the lock) is no error. It makes one request.
func (d *Driver) Leave(ctx context.Context, key, waiter string) error {
	if d.closed.Load() {
		return backends.ErrClosed
	}
	lk, err := d.Key(key)
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
