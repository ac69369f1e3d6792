package etcd

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsync-dev/dsync/backends"
)

// lookup reads from etcd the hold (lock or permit) of key owned by token,
// in one request of the lock key lk and the semaphore's keys below it, or
// returns ErrNotHeld.
func (d *driver) lookup(ctx context.Context, lk, token string) (heldLease, error) {
	resp, err := d.client.Txn(ctx).Then(
		clientv3.OpGet(lk),
		clientv3.OpGet(lk+"/", clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return heldLease{}, d.wrap(err)
	}
	d.seen(resp.Header)
	for _, kv := range resp.Responses[0].GetResponseRange().GetKvs() {
		if t, _ := decodeValue(kv.Value); t == token && kv.Lease != 0 {
			return heldLease{lease: clientv3.LeaseID(kv.Lease), key: lk, rev: kv.CreateRevision}, nil
		}
	}
	for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
		if t, _, _, ok := decodePermitValue(kv.Value); ok && t == token && kv.Lease != 0 {
			return heldLease{lease: clientv3.LeaseID(kv.Lease), key: string(kv.Key), rev: kv.CreateRevision}, nil
		}
	}
	return heldLease{}, backends.ErrNotHeld
}

// Refresh renews the lease of the hold (lock or permit) owned by token
// once, on the driver's keep-alive stream, and checks that the hold's key
// is still there: read with the renewal in flight for a hold the driver
// took, read before it otherwise. It never re-creates a hold: a key that
// is gone or belongs to another token, or a lease that is gone, is
// ErrNotHeld. An etcd lease keeps the TTL it was granted with, so ttl must
// not exceed the hold's Grant.TTL (an *InvalidError otherwise, after the
// renewal); the layer above always passes Grant.TTL.
func (d *driver) Refresh(ctx context.Context, key, token string, ttl time.Duration) error {
	lk, err := d.begin(key, token)
	if err != nil {
		return err
	}
	secs, err := d.ttlSeconds(ttl)
	if err != nil {
		return err
	}
	ctx, cancel := d.bound(ctx)
	defer cancel()
	h, mine := d.pool.heldBy(key, token)
	if !mine {
		if h, err = d.lookup(ctx, lk, token); err != nil {
			return err
		}
	}
	wait := d.renew.send(ctx, h.lease)
	if mine {
		// Check, while the renewal is in flight, that the key is still
		// the hold the driver took.
		err = d.stillHeld(ctx, h)
	}
	ka, kaErr := wait(ctx)
	if err == nil {
		err = kaErr
	}
	if errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(err, backends.ErrNotHeld) {
		d.pool.forget(key, token)
		return backends.ErrNotHeld
	}
	if err != nil {
		return d.wrap(err)
	}
	d.seen(ka.Header)
	if secs > ka.TTL {
		return backends.Invalid("ttl", "%v exceeds the hold's lease TTL of %d s, which etcd cannot raise", ttl, ka.TTL)
	}
	return nil
}

// stillHeld reads h's key and reports ErrNotHeld unless it is still the
// hold h: same create revision, same lease.
func (d *driver) stillHeld(ctx context.Context, h heldLease) error {
	resp, err := d.client.Get(ctx, h.key)
	if err != nil {
		return d.wrap(err)
	}
	d.seen(resp.Header)
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != h.rev || clientv3.LeaseID(resp.Kvs[0].Lease) != h.lease {
		return backends.ErrNotHeld
	}
	return nil
}

// Release deletes the key of the hold (lock or permit) owned by token in
// one transaction guarded by the key's create revision, so that a stale or
// retried release never deletes a newer hold of the key, nor another
// holder's permit. A hold that expired or belongs to another token is
// ErrNotHeld. The hold's lease then holds no key: the driver keeps it for
// a later Acquire if it granted it, and otherwise leaves it to expire.
func (d *driver) Release(ctx context.Context, key, token string) error {
	lk, err := d.begin(key, token)
	if err != nil {
		return err
	}
	ctx, cancel := d.bound(ctx)
	defer cancel()
	h, mine := d.pool.heldBy(key, token)
	if !mine {
		if h, err = d.lookup(ctx, lk, token); err != nil {
			return err
		}
	}
	resp, err := d.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(h.key), "=", h.rev)).
		Then(clientv3.OpDelete(h.key)).
		Commit()
	if err != nil {
		return d.wrap(err)
	}
	d.seen(resp.Header)
	d.pool.forget(key, token)
	if !resp.Succeeded {
		return backends.ErrNotHeld
	}
	if mine && !d.pool.give(h.secs, h.lease) {
		d.revoke(ctx, h.lease)
	}
	d.notify.released(lk)
	return nil
}

// Holder reports the holder of key: the value stored with the lock, or,
// for a semaphore, with the permit whose lease expires last (the newest of
// those that tie), its remaining TTL as the server reports it (whole
// seconds, rounded down: zero in the last second), and its fencing token,
// the create revision of its key. It returns ErrNotHeld
// when nobody holds key. A key written without a lease (not by dsync) is
// reported with a zero TTL. A semaphore's holders are read in one
// request, then their leases' TTLs in parallel, at most 16 requests at a
// time.
func (d *driver) Holder(ctx context.Context, key string) (backends.HolderInfo, error) {
	if d.closed.Load() {
		return backends.HolderInfo{}, backends.ErrClosed
	}
	lk, err := d.key(key)
	if err != nil {
		return backends.HolderInfo{}, err
	}
	ctx, cancel := d.bound(ctx)
	defer cancel()
	resp, err := d.client.Txn(ctx).Then(
		clientv3.OpGet(lk),
		clientv3.OpGet(lk+"/", clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend),
			clientv3.WithLimit(MaxSemaphoreSize)),
	).Commit()
	if err != nil {
		return backends.HolderInfo{}, d.wrap(err)
	}
	d.seen(resp.Header)
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		kv := kvs[0]
		_, value := decodeValue(kv.Value)
		info, err := d.holderTTL(ctx, value, kv.Lease)
		if err != nil {
			return backends.HolderInfo{}, err
		}
		info.Fence = uint64(kv.CreateRevision)
		return info, nil
	}
	return d.permitHolder(ctx, resp.Responses[1].GetResponseRange().GetKvs())
}

// holderTTL completes the HolderInfo of a hold with value on lease.
func (d *driver) holderTTL(ctx context.Context, value []byte, lease int64) (backends.HolderInfo, error) {
	info := backends.HolderInfo{Value: value}
	if lease == 0 {
		return info, nil
	}
	ttl, err := d.client.TimeToLive(ctx, clientv3.LeaseID(lease))
	if err != nil {
		return backends.HolderInfo{}, d.wrap(err)
	}
	if ttl.TTL < 0 { // the lease is gone; so is the key, a moment later
		return backends.HolderInfo{}, backends.ErrNotHeld
	}
	info.TTL = time.Duration(ttl.TTL) * time.Second
	return info, nil
}
