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
func (d *Driver) SemaphorePrefix(name string) (string, error) {
	k, err := d.Key(name)
	if err != nil {
		return "", err
	}
	return k + "/", nil
}

// permitKey is the key of a permit on lease in the semaphore whose lock
// key is lk: one path segment below lk+"/", named after the lease, which
// holds one key at a time. A driver reuses its idle leases, and so the
// names of its permit keys: etcd keeps a deleted key in its index until
// the next compaction, and every attempt reads the semaphore's prefix, so
// keys named afresh for every attempt (after its token, say) would make
// attempts slower and slower between compactions.
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

// permitOutcome reads the outcome of a permit's transaction (h is the key
// it put, if it put one, good for ttl) and turns it into Acquire's result.
// An attempt whose key is not among the holders, or that saw holders of
// another size, deletes its key before it returns: a try that gets no
// permit leaves nothing behind. If that deletion fails, the error says so;
// the key is then in the table, being released, for the layer above's
// release.
func (d *Driver) permitOutcome(ctx context.Context, a attempt, tr *clientv3.TxnResponse, h hold, ttl time.Duration, kaErr error) (backends.Grant, error) {
	if !tr.Succeeded {
		// Nothing was written.
		if tr.Responses[0].GetResponseRange().GetCount() > 0 {
			if kaErr == nil {
				d.pool.put(h.idle(), time.Now()) // the lease holds no key
			}
			return backends.Grant{}, backends.LimitMismatch(a.req.Key, a.limit, 1)
		}
		// A lease of the driver's holds no key when it is used; someone
		// else wrote this one.
		return backends.Grant{}, fmt.Errorf("etcd: %q exists, though its lease %x was idle", a.hk, int64(h.lease))
	}
	first := tr.Responses[1].GetResponseRange().GetKvs()
	admitted, other := false, 0
	holders := make([]string, 0, len(first))
	for _, kv := range first {
		holders = append(holders, string(kv.Key))
		if string(kv.Key) == a.hk && kv.CreateRevision == h.rev {
			admitted = true
		}
		if _, limit, _, ok := decodePermitValue(kv.Value); ok && limit != a.limit && other == 0 {
			other = limit
		}
	}
	if admitted && other == 0 {
		return d.granted(a, h, ttl, kaErr)
	}
	if err := d.deleteAttempt(ctx, h); err != nil {
		h.releasing = true // never counted as a permit of the driver's
		d.holds.put(a.req.Key, a.req.Token, h)
		return backends.Grant{}, fmt.Errorf("etcd: deleting the key of an attempt that got no permit: %w", d.wrap(err))
	}
	if kaErr == nil {
		d.pool.put(h.idle(), time.Now()) // the lease holds no key
	}
	if other != 0 {
		return backends.Grant{}, backends.LimitMismatch(a.req.Key, a.limit, other)
	}
	d.notify.refused(a.lk, h.rev, holders)
	return backends.Grant{}, backends.ErrNotAcquired
}

// deleteAttempt deletes the key of an attempt that got no permit, if it is
// still the one the attempt put.
func (d *Driver) deleteAttempt(ctx context.Context, h hold) error {
	resp, err := d.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(h.key), "=", h.rev)).
		Then(clientv3.OpDelete(h.key)).
		Commit()
	if err == nil {
		d.seen(resp.Header)
	}
	return err
}

// permitHolder reports, of a semaphore whose keys are kvs (by create
// revision), the holder whose lease expires last. The holders are the
// first n keys, n being the size the oldest key records.
func (d *Driver) permitHolder(ctx context.Context, kvs []*mvccpb.KeyValue) (backends.HolderInfo, error) {
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
	info := backends.HolderInfo{Value: value}
	if ttls[last] != math.MaxInt64 {
		info.TTL = time.Duration(ttls[last]) * time.Second
	}
	return info, nil
}
