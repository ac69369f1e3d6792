package etcd

import (
	"context"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsync-dev/dsync/backends"
)

// The line of a lock's waiters (Request.Waiter, issue 21). Each waiter
// that a lock refused has a key below linePrefix(lk), named after it, so
// that etcd's key order is the order of the waiters' names, which is their
// arrival order. A key is on a lease of its waiter's (the lease its next
// attempt holds the lock on), which its attempts renew: a waiter that
// stops attempting, its process dead, loses its place within the lease's
// TTL. The lock is free for a waiter only when no key of the line sorts
// before its own, and for a lone attempt only when the line is empty: one
// compare of the acquiring transaction, which also deletes the winner's
// key. A release thus goes to the head of the line, and a releaser who asks
// again joins at the back.
//
// Only the head writes. A waiter counts the waiters ahead of it at each
// look (a refused transaction, or a peek: one linearizable read), and the
// release watch counts down as their keys are deleted (notify.go). A
// waiter with someone ahead peeks before it writes, and its process is not
// woken by a release, only by the deletion that makes it the head, so
// that a release wakes one process, and the head's wake-up costs one
// write.

// linePrefix is the prefix of the line of the lock whose key is lk: lk
// and a NUL byte, which no key has (backends.CheckKey), so that no other
// lock's key nor any permit key starts with it, and so that one watch of
// [lk, lk+"\x01") sees the lock key and its line, in revision order.
func linePrefix(lk string) string { return lk + "\x00" }

// waiting is what the driver knows of one of its waiters in a line.
type waiting struct {
	lease   clientv3.LeaseID // its line key is on it, and no other key
	secs    int64            // the lease's requested TTL
	renewed time.Time        // when its last renewal was sent

	mu    sync.Mutex // protects the fields below, which the release watch updates
	known bool       // ahead and rev are known: a look was made
	// joined is the revision at which the waiter joined without looking;
	// a release after it (of the driver's own, or one the watch saw)
	// makes a look likely to find the lock free.
	joined int64
	ahead  int64 // waiters ahead of it: counted at rev, less deletions since
	rev    int64
}

// looked records that ahead waiters were ahead at revision rev: known
// false when that count cannot be kept (its deletions may be missed), so
// that the next release of the lock makes the waiter look again.
func (w *waiting) looked(known bool, ahead, rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.known, w.ahead, w.rev = known, ahead, rev
	if !known {
		w.joined = rev
	}
}

// passed records the deletion, at revision rev, of the key of a waiter
// ahead, and reports whether w is now at the head.
func (w *waiting) passed(rev int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.known || rev <= w.rev {
		return false // nothing to count from, or counted already
	}
	w.ahead, w.rev = w.ahead-1, rev
	return w.ahead == 0
}

// write reports whether w's attempt should go straight to the acquiring
// transaction: it was at the head at its last look, or it has not looked
// since it joined and the lock was released since, at revision released.
func (w *waiting) write(released int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.known {
		return released > w.joined
	}
	return w.ahead <= 0
}

// head reports whether w was at the head of the line, as far as the
// driver knows; known is false when it never looked.
func (w *waiting) head() (head, known bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.known && w.ahead <= 0, w.known
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
		clientv3.OpGet(a.sp, clientv3.WithFirstCreate()...),
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
	if kvs := resp.Responses[3].GetResponseRange().GetKvs(); len(kvs) > 0 {
		if _, limit, _, ok := decodePermitValue(kvs[0].Value); ok {
			d.revoke(ctx, w.lease) // and with it the waiter's key
			d.notify.outOfLine(a.lk, a.wk)
			return false, false, backends.LimitMismatch(a.req.Key, 1, limit)
		}
	}
	if count(2) == 0 {
		return true, false, nil // its key lapsed: join again
	}
	if count(0) == 0 && count(1) == 0 {
		return true, false, nil
	}
	d.notify.refused(a.lk, resp.Header.Revision, nil)
	if d.afterLook != nil {
		d.afterLook()
	}
	d.notify.inLine(a.lk, a.wk, w, count(1), resp.Header.Revision)
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
	d.notify.outOfLine(lk, wk)
	ctx, cancel := d.bound(ctx)
	defer cancel()
	resp, err := d.client.Delete(ctx, wk)
	if err != nil {
		return d.wrap(err) // the key lapses with its lease
	}
	d.seen(resp.Header)
	if mine && w.lease != 0 && !d.pool.give(w.secs, w.lease) {
		d.revoke(ctx, w.lease)
	}
	return nil
}
