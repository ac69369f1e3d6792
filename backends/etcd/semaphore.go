package etcd

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsync-dev/dsync/backends"
)

// MaxSemaphoreSize is the largest semaphore the driver offers
// (Capabilities.MaxLimit). Every attempt on a semaphore reads its first
// Size holders, values included, so the cost of an attempt grows with the
// size; etcd itself sorts every key below the semaphore's prefix.
const MaxSemaphoreSize = 1024

// holderTTLs bounds the lease TTL requests Holder has in flight at once.
const holderTTLs = 16

// SemaphorePrefix returns the etcd prefix below which the permits of the
// semaphore named name live: the lock key of name (see Key) followed by
// "/". Each permit is a key of its own there, bound to its own lease and
// named after it; its value is the permit's token, the semaphore's size and
// the permit's value, each on a line. The holders are the first Size keys
// by create revision. It returns an
// *InvalidError for an empty name.
func (d *driver) SemaphorePrefix(name string) (string, error) {
	k, err := d.key(name)
	if err != nil {
		return "", err
	}
	return k + "/", nil
}

// permitKey is the key of a permit on lease in the semaphore whose lock
// key is lk: one path segment below lk+"/", named after the lease, which
// holds no other key.
func permitKey(lk string, lease clientv3.LeaseID) string {
	return lk + "/" + strconv.FormatInt(int64(lease), 16)
}

// encodePermitValue is what a permit's key stores: the token, the
// semaphore's size and the request's value, separated by newlines.
func encodePermitValue(token string, limit int, value []byte) string {
	return token + "\n" + strconv.Itoa(limit) + "\n" + string(value)
}

// decodePermitValue splits a permit's stored value; ok is false for a
// value that dsync did not write as a permit.
func decodePermitValue(v []byte) (token string, limit int, value []byte, ok bool) {
	token, rest, found := strings.Cut(string(v), "\n")
	if !found {
		return "", 0, nil, false
	}
	size, val, found := strings.Cut(rest, "\n")
	if !found {
		return "", 0, nil, false
	}
	limit, err := strconv.Atoi(size)
	if err != nil || limit < 2 {
		return "", 0, nil, false
	}
	if val != "" {
		value = []byte(val)
	}
	return token, limit, value, true
}

// permitOutcome turns a permit's transaction into Acquire's error: nil
// when its key is among the first a.limit and their sizes agree. An
// attempt that gets no permit deletes its key and keeps its lease.
func (d *driver) permitOutcome(ctx context.Context, a attempt, tr *clientv3.TxnResponse) error {
	if !tr.Succeeded { // nothing was written
		if tr.Responses[0].GetResponseRange().GetCount() == 0 {
			// A lease of the driver's holds no key when it is used;
			// someone else wrote this one.
			return fmt.Errorf("etcd: %q exists, though its lease %x held no key", a.hk, int64(a.lease))
		}
		d.idle(ctx, a)
		return backends.LimitMismatch(a.req.Key, a.limit, 1)
	}
	first := tr.Responses[1].GetResponseRange().GetKvs()
	admitted, other := false, 0
	holders := make([]string, 0, len(first))
	for _, kv := range first {
		holders = append(holders, string(kv.Key))
		if string(kv.Key) == a.hk {
			admitted = true
		}
		if _, limit, _, ok := decodePermitValue(kv.Value); ok && limit != a.limit && other == 0 {
			other = limit
		}
	}
	if admitted && other == 0 {
		return nil
	}
	if err := d.deleteAttempt(ctx, a, tr.Header.Revision); err != nil {
		return fmt.Errorf("etcd: deleting the key of an attempt that got no permit: %w", d.wrap(err))
	}
	d.idle(ctx, a)
	if other != 0 {
		return backends.LimitMismatch(a.req.Key, a.limit, other)
	}
	d.notify.refused(a.lk, tr.Header.Revision, holders)
	return backends.ErrNotAcquired
}

// deleteAttempt deletes the key of an attempt that got no permit, created
// at rev, if it is still there.
func (d *driver) deleteAttempt(ctx context.Context, a attempt, rev int64) error {
	resp, err := d.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(a.hk), "=", rev)).
		Then(clientv3.OpDelete(a.hk)).
		Commit()
	if err == nil {
		d.seen(resp.Header)
	}
	return err
}

// permitHolder reports, of a semaphore whose keys are kvs (by create
// revision), the holder whose lease expires last. The holders are the
// first n keys, n being the size the oldest key records.
func (d *driver) permitHolder(ctx context.Context, kvs []*mvccpb.KeyValue) (backends.HolderInfo, error) {
	if len(kvs) == 0 {
		return backends.HolderInfo{}, backends.ErrNotHeld
	}
	if _, limit, _, ok := decodePermitValue(kvs[0].Value); ok && limit < len(kvs) {
		kvs = kvs[:limit]
	}
	ttls := make([]int64, len(kvs)) // seconds left; -1: gone; MaxInt64: no lease
	errs := make([]error, len(kvs))
	var wg sync.WaitGroup
	slots := make(chan struct{}, holderTTLs)
	for i, kv := range kvs {
		if kv.Lease == 0 {
			ttls[i] = math.MaxInt64
			continue
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			resp, err := d.client.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
			if err != nil {
				errs[i] = err
				return
			}
			ttls[i] = resp.TTL
		})
	}
	wg.Wait()
	last := -1
	for i := range kvs {
		if errs[i] != nil {
			return backends.HolderInfo{}, d.wrap(errs[i])
		}
		if ttls[i] >= 0 && (last < 0 || ttls[i] >= ttls[last]) {
			last = i
		}
	}
	if last < 0 { // every lease is gone; so are the keys, a moment later
		return backends.HolderInfo{}, backends.ErrNotHeld
	}
	_, _, value, _ := decodePermitValue(kvs[last].Value)
	info := backends.HolderInfo{Value: value, Fence: uint64(kvs[last].CreateRevision)}
	if ttls[last] != math.MaxInt64 {
		info.TTL = time.Duration(ttls[last]) * time.Second
	}
	return info, nil
}
