package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsync-dev/dsync/backends"
)

// attempt is one acquisition: the request and the etcd keys it involves.
type attempt struct {
	req   backends.Request
	limit int              // req.Limit, at least 1
	lk    string           // the lock key of req.Key
	sp    string           // the prefix of req.Key's permits: lk + "/"
	wk    string           // the waiter's key in the line; "" for a lone attempt
	hk    string           // the hold's key: lk, or a permit key below sp
	val   string           // the hold's stored value
	lease clientv3.LeaseID // no other key is on it
	secs  int64            // the TTL requested, in whole seconds
}

// Acquire makes one attempt to hold req.Key: a lock when req.Limit is 0 or
// 1, a permit of a semaphore of req.Limit permits otherwise. It takes a
// lease that no key is on (an idle lease of the driver's, renewed, or a
// fresh grant; for a waiter already in line, the lease its key is on,
// renewed) and runs one transaction:
//
//   - a lock puts the lock key on the lease if neither it nor any permit of
//     a semaphore of the same name exists, and nobody waits in the lock's
//     line (line.go) or, for a waiter (req.Waiter), nobody ahead of it; a
//     waiter's attempt that is refused puts its key in the line, or keeps
//     its place there, on the lease;
//   - a permit puts its own key, named after the lease, below the
//     semaphore's prefix unless the name is held as a lock, and reads the
//     first req.Limit keys there by create revision: the permit is granted
//     if its key is among them and their recorded sizes agree with
//     req.Limit.
//
// An attempt that gets nothing leaves no key behind but a waiter's place
// and returns ErrNotAcquired, or the error of backends.LimitMismatch when
// the name's live holds were taken with another limit (a lock has limit
// 1), and then leaves no place either. Grant.Fence is the hold key's create
// revision; Grant.TTL is the lease's TTL as the server applied it: req.TTL
// rounded up to whole seconds and raised to the cluster's minimum. Any
// other error leaves the outcome unknown, as the SPI says; a Release of
// req.Key and req.Token removes whatever the attempt left.
func (d *driver) Acquire(ctx context.Context, req backends.Request) (backends.Grant, error) {
	if d.closed.Load() {
		return backends.Grant{}, backends.ErrClosed
	}
	if err := backends.CheckRequest(req, d.caps); err != nil {
		return backends.Grant{}, err
	}
	lk, err := d.begin(req.Key, req.Token)
	if err != nil {
		return backends.Grant{}, err
	}
	secs, err := d.ttlSeconds(req.TTL)
	if err != nil {
		return backends.Grant{}, err
	}
	a := attempt{req: req, limit: max(req.Limit, 1), lk: lk, sp: lk + "/", secs: secs}
	if a.limit == 1 && req.Waiter != "" {
		a.wk = linePrefix(lk) + req.Waiter
	}
	ctx, cancel := d.bound(ctx)
	defer cancel()
	if a.wk != "" {
		// A waiter in line attempts on the lease its key is on. One with
		// another TTL (not from lease's Acquire) moves its key to a new
		// lease, and the old one expires.
		if w, ok := d.pool.leave(a.wk); ok && w.secs == secs {
			g, err := d.acquireOn(ctx, a, w.lease, 0)
			if !errors.Is(err, errIdleExpired) {
				return g, err
			}
		}
	}
	if id, ok := d.pool.take(secs); ok {
		g, err := d.acquireOn(ctx, a, id, 0)
		if !errors.Is(err, errIdleExpired) {
			return g, err
		}
	}
	resp, err := d.client.Grant(ctx, secs)
	if err != nil {
		// A lease granted without our knowing it holds no key and expires.
		return backends.Grant{}, d.wrap(err)
	}
	d.seen(resp.ResponseHeader)
	return d.acquireOn(ctx, a, resp.ID, resp.TTL)
}

// errIdleExpired: an idle lease expired before the attempt that took it
// used it; the attempt wrote nothing.
var errIdleExpired = errors.New("etcd: idle lease expired")

// acquireOn runs a's transaction on lease id, granted just now for ttl
// seconds, or, when ttl is 0, taken from the pool and renewed in parallel
// with the transaction: either way the lease lives a full TTL from the
// call's start.
func (d *driver) acquireOn(ctx context.Context, a attempt, id clientv3.LeaseID, ttl int64) (backends.Grant, error) {
	a.lease = id
	if a.limit == 1 {
		a.hk, a.val = a.lk, encodeValue(a.req.Token, a.req.Value)
	} else {
		a.hk, a.val = permitKey(a.lk, id), encodePermitValue(a.req.Token, a.limit, a.req.Value)
	}
	var renewed func(context.Context) (*pb.LeaseKeepAliveResponse, error)
	if ttl == 0 {
		renewed = d.renew.send(ctx, id)
	}
	tr, err := d.txnAcquire(ctx, a)
	if renewed != nil {
		ka, kaErr := renewed(ctx)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return backends.Grant{}, errIdleExpired
		}
		if kaErr == nil {
			d.seen(ka.Header)
			ttl = ka.TTL
		} else if err == nil {
			err = fmt.Errorf("etcd: renewing the lease for the attempt: %w", kaErr)
		}
	}
	if err != nil {
		// Revoking the lease undoes the transaction if it was applied,
		// and takes a waiter's key out of the line.
		d.revoke(ctx, a.lease)
		return backends.Grant{}, d.wrap(err)
	}
	if a.limit > 1 {
		err = d.permitOutcome(ctx, a, tr)
	} else {
		err = d.lockOutcome(ctx, a, tr)
	}
	if err != nil {
		return backends.Grant{}, err
	}
	d.pool.hold(a.req.Key, a.req.Token, heldLease{lease: id, secs: a.secs, key: a.hk, rev: tr.Header.Revision})
	g := backends.Grant{TTL: time.Duration(ttl) * time.Second}
	if a.req.Fence {
		g.Fence = uint64(tr.Header.Revision)
	}
	return g, nil
}

// txnAcquire is the acquisition's transaction.
func (d *driver) txnAcquire(ctx context.Context, a attempt) (*clientv3.TxnResponse, error) {
	txn := d.client.Txn(ctx)
	switch {
	case a.limit == 1 && a.wk == "": // a lone attempt: only if nobody waits
		txn = txn.If(
			// No lock key, and nobody in line: the lock key and its line
			// are the keys from lk to lk+"\x01" (linePrefix), and one
			// compare of a range costs the transaction less than two.
			clientv3.Compare(clientv3.CreateRevision(a.lk), "=", 0).WithRange(a.lk+"\x01"),
			clientv3.Compare(clientv3.CreateRevision(a.sp), "=", 0).WithPrefix(), // no permit of the name
		).Then(
			clientv3.OpPut(a.lk, a.val, clientv3.WithLease(a.lease)),
		).Else(
			clientv3.OpGet(a.sp, clientv3.WithFirstCreate()...),
		)
	case a.limit == 1: // a waiter: only if nobody is ahead; else join
		txn = txn.If(
			// No lock key, and nobody ahead in line: the keys from lk to
			// the waiter's own.
			clientv3.Compare(clientv3.CreateRevision(a.lk), "=", 0).WithRange(a.wk),
			clientv3.Compare(clientv3.CreateRevision(a.sp), "=", 0).WithPrefix(),
		).Then(
			clientv3.OpPut(a.lk, a.val, clientv3.WithLease(a.lease)),
			clientv3.OpDelete(a.wk), // its place, if it had one
		).Else(
			// A put keeps the key's create revision, hence its place,
			// and moves it to this lease.
			clientv3.OpPut(a.wk, "", clientv3.WithLease(a.lease)),
			clientv3.OpGet(a.sp, clientv3.WithFirstCreate()...),
		)
	default:
		txn = txn.If(
			clientv3.Compare(clientv3.CreateRevision(a.hk), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(a.lk), "=", 0), // the name is no lock's
		).Then(
			clientv3.OpPut(a.hk, a.val, clientv3.WithLease(a.lease)),
			// A transaction's reads see its writes: the new key is among
			// these if it is one of the first a.limit.
			clientv3.OpGet(a.sp, clientv3.WithPrefix(),
				clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend),
				clientv3.WithLimit(int64(a.limit))),
		).Else(
			clientv3.OpGet(a.lk, clientv3.WithCountOnly()),
		)
	}
	resp, err := txn.Commit()
	if err == nil {
		d.seen(resp.Header)
	}
	return resp, err
}

// lockOutcome turns a lock's transaction into Acquire's error: nil when
// it put the key.
func (d *driver) lockOutcome(ctx context.Context, a attempt, tr *clientv3.TxnResponse) error {
	if tr.Succeeded {
		return nil
	}
	if a.wk == "" {
		d.idle(ctx, a) // nothing was written
	}
	permits := 0 // the index of the response that reads the permits
	if a.wk != "" {
		permits = 1
	}
	if len(tr.Responses) > permits {
		if kvs := tr.Responses[permits].GetResponseRange().GetKvs(); len(kvs) > 0 {
			if _, limit, _, ok := decodePermitValue(kvs[0].Value); ok {
				if a.wk != "" {
					d.revoke(ctx, a.lease) // and with it the waiter's key
				}
				return backends.LimitMismatch(a.req.Key, 1, limit)
			}
		}
	}
	if a.wk != "" {
		// The waiter's key is on the lease now: it keeps both.
		if !d.pool.wait(a.wk, &waiting{lease: a.lease, secs: a.secs}) {
			// Too many to remember: the waiter loses its place, and its
			// next attempt takes it back.
			d.revoke(ctx, a.lease)
		}
	}
	d.notify.refused(a.lk, tr.Header.Revision, nil)
	return backends.ErrNotAcquired
}

// idle returns the lease of an attempt that wrote nothing to the pool,
// or revokes it.
func (d *driver) idle(ctx context.Context, a attempt) {
	if !d.pool.give(a.secs, a.lease) {
		d.revoke(ctx, a.lease)
	}
}

// revoke revokes a lease of the driver's that no hold is on, deleting
// whatever an attempt whose outcome is unknown put on it. It is a courtesy:
// a lease left alone expires, so its error is dropped.
func (d *driver) revoke(ctx context.Context, lease clientv3.LeaseID) {
	if resp, err := d.client.Revoke(ctx, lease); err == nil {
		d.seen(resp.Header)
	}
}
