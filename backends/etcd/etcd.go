package etcd

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsync-dev/dsync/backends"
)

// Defaults of Options.
const (
	// DefaultPrefix is the key prefix used when Options.Prefix is empty.
	DefaultPrefix = "dsync/"
	// DefaultMinTTL is etcd's minimum lease TTL with its default timing
	// (--election-timeout 1000ms): 1.5 election timeouts, rounded up to
	// whole seconds.
	DefaultMinTTL = 2 * time.Second
)

// maxTTLSeconds is etcd's largest lease TTL (lease.MaxLeaseTTL).
const maxTTLSeconds = 9_000_000_000

// Options configure New. A nil *Options means defaults.
type Options struct {
	// Prefix is put before every etcd key the driver writes (see the
	// package documentation for the layout). A "/" is appended when it does
	// not end with one, so that one application's prefix never extends
	// another's. Default: "dsync/".
	Prefix string
	// MinTTL is the cluster's minimum lease TTL, which Capabilities
	// reports: etcd raises shorter TTLs to it, and Grant.TTL always says
	// what was applied. It must be a whole number of seconds. Default
	// DefaultMinTTL (2s, etcd's default timing); the URL opener learns the
	// real value from the cluster.
	MinTTL time.Duration
}

// Driver is the etcd driver. It implements backends.Driver and
// backends.Notifier, and is safe for concurrent use.
type Driver struct {
	client *clientv3.Client
	owned  bool // Close closes client: it was created from a URL
	prefix string
	caps   backends.Capabilities

	// rev is the highest store revision any response has shown; a release
	// watch starts just after it, which etcd serves from its synced path.
	rev atomic.Int64

	holds holdTable
	pool  leasePool
	renew renewer

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error

	notify notifier
}

var (
	_ backends.Driver = (*Driver)(nil)
	_ backends.Driver = (*Driver)(nil)
)

// New returns a driver over client. It makes no I/O. A nil client or an
// invalid option is an *InvalidError.
//
// The driver does not close client: the application that created it keeps
// it, and closes it after closing the driver. clientv3 retries a call only
// when it is safe (reads and lease renewals, and writes that never left the
// client), so every driver call remains one attempt as the SPI requires.
func New(client *clientv3.Client, opts *Options) (*Driver, error) {
	return newDriver(client, opts, false)
}

func newDriver(client *clientv3.Client, opts *Options, owned bool) (*Driver, error) {
	if client == nil {
		return nil, backends.Invalid("client", "nil")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	prefix := o.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	minTTL := o.MinTTL
	switch {
	case minTTL == 0:
		minTTL = DefaultMinTTL
	case minTTL < time.Second || minTTL%time.Second != 0:
		return nil, backends.Invalid("min ttl", "%v is not a positive whole number of seconds", minTTL)
	}
	d := &Driver{
		client: client,
		owned:  owned,
		prefix: prefix,
		caps: backends.Capabilities{
			ReleaseNotices: true,
			Name:           "etcd",
			MaxLimit:       MaxSemaphoreSize,
			Fencing:        true,
			TTLResolution:  time.Second,
			MinTTL:         minTTL,
			MaxTTL:         maxTTLSeconds * time.Second,
		},
	}
	d.holds.init()
	d.pool.init()
	d.renew.init(client)
	d.notify.init(d)
	return d, nil
}

// Capabilities reports locks and semaphores of up to MaxSemaphoreSize
// permits, fencing, whole-second TTLs, the cluster's minimum TTL and etcd's
// maximum (9e9 s). It makes no I/O.
func (d *Driver) Capabilities() backends.Capabilities { return d.caps }

// Prefix returns the key prefix, always ending in "/".
func (d *Driver) Prefix() string { return d.prefix }

// Key returns the etcd key that holds the lock named name: the prefix
// followed by name with "%" and "/" escaped as "%25" and "%2F". A resource
// stored in etcd can compare the fencing token with this key's create
// revision (see the package example). The permits of a semaphore of that
// name live below this key and a "/" (see SemaphorePrefix). It returns an
// *InvalidError for an empty name.
func (d *Driver) Key(name string) (string, error) {
	if name == "" {
		return "", backends.Invalid("key", "empty")
	}
	return d.prefix + escapeName(name), nil
}

// escapeName makes a name one path segment: no name can then nest under
// another, or under the permit keys a semaphore keeps below its own name,
// and distinct names stay distinct.
func escapeName(name string) string {
	if !strings.ContainsAny(name, "%/") {
		return name
	}
	var b strings.Builder
	b.Grow(len(name) + 8)
	for i := range len(name) {
		switch c := name[i]; c {
		case '%':
			b.WriteString("%25")
		case '/':
			b.WriteString("%2F")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func checkToken(token string) error {
	if token == "" {
		return backends.Invalid("token", "empty")
	}
	if strings.IndexByte(token, '\n') >= 0 {
		return backends.Invalid("token", "contains a newline, which the etcd backend uses to separate token and value")
	}
	return nil
}

// encodeValue is what the hold's key stores: the token, a newline, the
// request's value.
func encodeValue(token string, value []byte) string {
	return token + "\n" + string(value)
}

// decodeValue splits a hold's stored value into token and value. A value
// without a newline (not written by dsync) is all token.
func decodeValue(v []byte) (token string, value []byte) {
	t, rest, found := strings.Cut(string(v), "\n")
	if !found || rest == "" {
		return t, nil
	}
	return t, []byte(rest)
}

// ttlSeconds rounds a TTL up to whole seconds, as etcd leases have them.
func (d *Driver) ttlSeconds(ttl time.Duration) (int64, error) {
	if err := backends.CheckTTL(ttl, d.caps); err != nil {
		return 0, err
	}
	return int64(math.Ceil(ttl.Seconds())), nil
}

// seen records a revision from a response header.
func (d *Driver) seen(h interface{ GetRevision() int64 }) {
	if h == nil {
		return
	}
	rev := h.GetRevision()
	for {
		cur := d.rev.Load()
		if rev <= cur || d.rev.CompareAndSwap(cur, rev) {
			return
		}
	}
}

// begin checks that the driver is open and names the etcd key of key.
func (d *Driver) begin(key, token string) (string, error) {
	if d.closed.Load() {
		return "", backends.ErrClosed
	}
	k, err := d.Key(key)
	if err != nil {
		return "", err
	}
	if err := checkToken(token); err != nil {
		return "", err
	}
	return k, nil
}

// attempt is one acquisition: the request and the etcd keys it involves.
type attempt struct {
	req   backends.Request
	limit int    // req.Limit, at least 1
	lk    string // the lock key of req.Key
	sp    string // the prefix of the keys of req.Key's permits: lk + "/"
	hk    string // the hold's key: lk for a lock, below sp for a permit (set with its lease)
	val   string // the hold's stored value
	secs  int64  // the lease TTL in whole seconds
}

// Acquire makes one attempt to hold req.Key: a lock when req.Limit is 0 or
// 1, a permit of a semaphore of req.Limit permits otherwise. It takes a
// lease (a fresh grant, or an idle lease of the driver's, renewed in
// parallel with the transaction) and runs one transaction on the cluster:
//
//   - a lock puts the lock key with that lease if the key does not exist and
//     no permit of a semaphore of the same name does;
//   - a permit puts its own key below the semaphore's prefix, unless the
//     name is held as a lock, and reads the first req.Limit keys there by
//     create revision: the permit is granted if its key is among them, and
//     their recorded sizes agree with req.Limit. Otherwise a second
//     transaction deletes the key, so that an attempt that gets no permit
//     leaves nothing behind.
//
// It returns ErrNotAcquired when the lock is held or every permit is taken;
// when the driver's own holds fill the key and their leases are alive for
// sure, it says so without asking the cluster. It returns the error of
// backends.LimitMismatch when the name's live holds were taken with another
// limit (a lock has limit 1). Grant.Fence is the hold's key's create
// revision; Grant.TTL is the lease's TTL as the server applied it: req.TTL
// rounded up to whole seconds, and raised to the cluster's minimum; or, on
// an idle lease of the driver's renewed a moment ago, what is left of it,
// at most 1% less (see the package documentation).
// Grant.Key is not set: Refresh and Release find a permit from the name and
// the token.
//
// Any other error leaves the outcome unknown, as the SPI says; a release of
// req.Key and req.Token removes whatever the attempt left.
func (d *Driver) Acquire(ctx context.Context, req backends.Request) (backends.Grant, error) {
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
	if a.limit == 1 {
		a.hk, a.val = lk, encodeValue(req.Token, req.Value)
	} else {
		a.val = encodePermitValue(req.Token, a.limit, req.Value)
	}

	now := time.Now()
	if d.fullHere(a, now) {
		return backends.Grant{}, backends.ErrNotAcquired
	}
	if l, ok := d.pool.get(secs, now); ok {
		g, err := d.acquireOn(ctx, a, l, true)
		if !errors.Is(err, errStaleLease) {
			return g, err
		}
		// The idle lease had expired: the transaction wrote nothing.
	}
	sent := time.Now()
	resp, err := d.client.Grant(ctx, secs)
	if err != nil {
		// A lease granted without our knowing it holds no key and expires.
		return backends.Grant{}, d.wrap(err)
	}
	d.seen(resp.ResponseHeader)
	return d.acquireOn(ctx, a, idleLease{id: resp.ID, secs: secs, ttl: resp.TTL, renewed: sent}, false)
}

// fullHere reports whether the driver's own holds fill a's key, with
// leases alive for sure at now: the cluster would refuse the attempt, at
// the cost of a raft write (two for a permit). This is what a process's
// waiters mostly meet: the one at the head of the line tries while others
// of the process hold.
func (d *Driver) fullHere(a attempt, now time.Time) bool {
	if a.limit == 1 {
		if !d.holds.held(a.req.Key, now) {
			return false
		}
		d.notify.refused(a.lk, d.rev.Load(), nil)
		return true
	}
	keys := d.holds.permits(a.req.Key, a.limit, now)
	if len(keys) < a.limit {
		return false
	}
	d.notify.refused(a.lk, d.rev.Load(), keys)
	return true
}

// freshLease: a reused lease renewed less than 1/freshLease of its TTL ago
// is not renewed again for an acquisition (see acquireOn).
const freshLease = 100

// errStaleLease: a reused lease was gone before the transaction applied.
var errStaleLease = errors.New("etcd: idle lease expired")

// acquireOn runs a's transaction with lease l, fresh from a grant or
// reused from the pool (reused). The hold must live a full TTL from the
// start of the call, which is what the layer above counts on. A reused
// lease renewed (or granted) less than 1% of its TTL ago is used as it is:
// the grant's TTL is then what is left of the lease's, measured from this
// call's start, at most 1% short of a full TTL and never below a second.
// An older one is renewed while the transaction runs: either order leaves
// the lease expiring no earlier than a full TTL after this call started.
// In a busy driver, a lease goes from hold to hold and is renewed about
// once in 1% of its TTL rather than on every acquisition. acquireOn returns
// errStaleLease when a reused lease turned out to be gone, and the
// transaction wrote nothing.
func (d *Driver) acquireOn(ctx context.Context, a attempt, l idleLease, reused bool) (backends.Grant, error) {
	if a.limit > 1 {
		a.hk = permitKey(a.lk, l.id)
	}
	sent := time.Now()
	ttl := time.Duration(l.ttl) * time.Second
	var wait func(context.Context) (*pb.LeaseKeepAliveResponse, error)
	if reused {
		if left := l.expires().Sub(sent); ttl-left <= ttl/freshLease && left >= time.Second {
			ttl = left
		} else {
			wait = d.renew.send(ctx, l.id)
		}
	}
	tr, err := d.txnAcquire(ctx, a, l.id)
	var kaErr error
	if wait != nil {
		if ka, werr := wait(ctx); werr != nil {
			kaErr = werr
		} else {
			d.seen(ka.Header)
			l.renewed, l.ttl = sent, ka.TTL
			ttl = time.Duration(ka.TTL) * time.Second
		}
	}
	if err != nil {
		if reused && errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return backends.Grant{}, errStaleLease
		}
		return backends.Grant{}, d.wrap(err)
	}
	h := hold{key: a.hk, limit: a.limit, lease: l.id, rev: tr.Header.Revision, secs: l.secs, ttl: l.ttl, renewed: l.renewed}
	if a.limit > 1 {
		return d.permitOutcome(ctx, a, tr, h, ttl, kaErr)
	}
	if !tr.Succeeded {
		if kaErr == nil {
			d.pool.put(h.idle(), time.Now()) // the lease holds no key
		}
		if kvs := tr.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			if _, limit, _, ok := decodePermitValue(kvs[0].Value); ok {
				return backends.Grant{}, backends.LimitMismatch(a.req.Key, 1, limit)
			}
		}
		d.notify.refused(a.lk, tr.Header.Revision, nil)
		return backends.Grant{}, backends.ErrNotAcquired
	}
	return d.granted(a, h, ttl, kaErr)
}

// txnAcquire is the acquisition's transaction, with lease.
func (d *Driver) txnAcquire(ctx context.Context, a attempt, lease clientv3.LeaseID) (*clientv3.TxnResponse, error) {
	txn := d.client.Txn(ctx)
	if a.limit == 1 {
		txn = txn.If(
			clientv3.Compare(clientv3.CreateRevision(a.lk), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(a.sp), "=", 0).WithPrefix(), // no permit of the name
		).Then(
			clientv3.OpPut(a.lk, a.val, clientv3.WithLease(lease)),
		).Else(
			clientv3.OpGet(a.sp, clientv3.WithFirstCreate()...),
		)
	} else {
		txn = txn.If(
			clientv3.Compare(clientv3.CreateRevision(a.hk), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(a.lk), "=", 0), // the name is no lock's
		).Then(
			clientv3.OpPut(a.hk, a.val, clientv3.WithLease(lease)),
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

// granted records the hold h that a's transaction created and returns the
// grant, good for ttl, or, when renewing its reused lease failed (kaErr),
// an error: the key is on a lease whose life may end before a full TTL from
// the start of the call, so this is no success. The hold is recorded either
// way, so that the release the layer above then makes is quick.
func (d *Driver) granted(a attempt, h hold, ttl time.Duration, kaErr error) (backends.Grant, error) {
	d.holds.put(a.req.Key, a.req.Token, h)
	if kaErr != nil {
		return backends.Grant{}, fmt.Errorf("etcd: renewing the lease for the hold: %w", d.wrap(kaErr))
	}
	g := backends.Grant{TTL: ttl}
	if a.req.Fence {
		g.Fence = uint64(h.rev)
	}
	return g, nil
}

// lookup returns the hold of key and token, from the driver's table or
// else read from the server (a hold taken by another driver, or dropped
// from the table), or ErrNotHeld. lk is key's lock key. One read finds a
// lock hold or a permit: it reads the lock key and the semaphore's keys,
// and looks for the token in their values.
func (d *Driver) lookup(ctx context.Context, key, token, lk string) (h hold, fromServer bool, err error) {
	if h, ok := d.holds.get(key, token); ok {
		return h, false, nil
	}
	resp, err := d.client.Txn(ctx).Then(
		clientv3.OpGet(lk),
		clientv3.OpGet(lk+"/", clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return hold{}, true, d.wrap(err)
	}
	d.seen(resp.Header)
	for _, kv := range resp.Responses[0].GetResponseRange().GetKvs() {
		if t, _ := decodeValue(kv.Value); t == token && kv.Lease != 0 {
			return hold{key: lk, limit: 1, lease: clientv3.LeaseID(kv.Lease), rev: kv.CreateRevision}, true, nil
		}
	}
	for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
		if t, limit, _, ok := decodePermitValue(kv.Value); ok && t == token && kv.Lease != 0 {
			return hold{key: string(kv.Key), limit: limit, lease: clientv3.LeaseID(kv.Lease), rev: kv.CreateRevision}, true, nil
		}
	}
	return hold{}, true, backends.ErrNotHeld
}

// Refresh renews the lease of the hold (lock or permit) owned by token,
// then checks that the hold's key is still that hold. It never re-creates
// a hold: a lease or key that is gone, or a key that belongs to another
// token, is ErrNotHeld. An etcd lease keeps the TTL it was granted with, so
// ttl must not exceed the hold's Grant.TTL (an *InvalidError otherwise);
// the layer above always passes Grant.TTL.
func (d *Driver) Refresh(ctx context.Context, key, token string, ttl time.Duration) error {
	lk, err := d.begin(key, token)
	if err != nil {
		return err
	}
	secs, err := d.ttlSeconds(ttl)
	if err != nil {
		return err
	}
	h, fromServer, err := d.lookup(ctx, key, token, lk)
	if err != nil {
		return err
	}
	if !fromServer && secs > h.ttl {
		return tooLong(ttl, h.ttl)
	}
	sent := time.Now()
	ka, err := d.renew.renew(ctx, h.lease)
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			d.holds.drop(key, token, h.rev)
			return backends.ErrNotHeld
		}
		return d.wrap(err)
	}
	d.seen(ka.Header)
	if secs > ka.TTL {
		return tooLong(ttl, ka.TTL)
	}
	if !fromServer {
		// The renewal kept the lease; check that the key is still on it.
		resp, err := d.client.Get(ctx, h.key)
		if err != nil {
			return d.wrap(err)
		}
		d.seen(resp.Header)
		if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != h.rev || clientv3.LeaseID(resp.Kvs[0].Lease) != h.lease {
			d.holds.drop(key, token, h.rev)
			return backends.ErrNotHeld
		}
	}
	d.holds.renewed(key, token, h.rev, sent)
	return nil
}

func tooLong(ttl time.Duration, leaseTTL int64) error {
	return backends.Invalid("ttl", "%v exceeds the hold's lease TTL of %d s, which etcd cannot raise", ttl, leaseTTL)
}

// Release deletes the hold (lock or permit) owned by token in one
// transaction that compares the hold key's create revision with the
// hold's, so that a stale or retried release never deletes a newer hold,
// nor another holder's permit. A hold that expired or belongs to another
// token is ErrNotHeld. The hold's lease, which then holds no key, is kept
// for a later Acquire of this driver.
func (d *Driver) Release(ctx context.Context, key, token string) error {
	lk, err := d.begin(key, token)
	if err != nil {
		return err
	}
	h, fromServer, err := d.lookup(ctx, key, token, lk)
	if err != nil {
		return err
	}
	// From now on the key may be free, or about to be: the hold no longer
	// answers Acquire for the cluster, even if this release fails.
	d.holds.releasing(key, token, h.rev)
	resp, err := d.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(h.key), "=", h.rev)).
		Then(clientv3.OpDelete(h.key)).
		Commit()
	if err != nil {
		return d.wrap(err) // the hold stays in the table for a retry
	}
	d.seen(resp.Header)
	d.holds.drop(key, token, h.rev)
	if !resp.Succeeded {
		return backends.ErrNotHeld
	}
	d.notify.released(lk)
	if !fromServer {
		d.pool.put(h.idle(), time.Now())
	}
	return nil
}

// Holder reports the holder of key: the value stored with the lock, or,
// for a semaphore, with the permit whose lease expires last (the newest of
// those that tie), and its remaining TTL as the server reports it (whole
// seconds, rounded down: zero in the last second). It returns ErrNotHeld
// when nobody holds key. A key written without a lease (not by dsync) is
// reported with a zero TTL. A semaphore's holders are read in one
// request, then their leases' TTLs in parallel, at most 16 requests at a
// time.
func (d *Driver) Holder(ctx context.Context, key string) (backends.HolderInfo, error) {
	if d.closed.Load() {
		return backends.HolderInfo{}, backends.ErrClosed
	}
	lk, err := d.Key(key)
	if err != nil {
		return backends.HolderInfo{}, err
	}
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
		return d.holderTTL(ctx, value, kv.Lease)
	}
	return d.permitHolder(ctx, resp.Responses[1].GetResponseRange().GetKvs())
}

// holderTTL completes the HolderInfo of a hold with value on lease.
func (d *Driver) holderTTL(ctx context.Context, value []byte, lease int64) (backends.HolderInfo, error) {
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

// wrap marks an error caused by a concurrent Close as ErrClosed as well.
func (d *Driver) wrap(err error) error { return backends.MarkClosed(d.closed.Load(), err) }

// Close stops release watches and the lease renewal stream (awaiting their
// goroutines) and closes the
// client if the driver created it from a URL; a client passed to New is
// left open. Holds are left to expire on the server, and so are the
// driver's idle leases, which hold no key. Later calls return ErrClosed.
// Close is idempotent and returns the first call's result.
func (d *Driver) Close() error {
	d.closeOnce.Do(func() {
		d.closed.Store(true)
		d.notify.close()
		d.renew.close()
		if d.owned {
			d.closeErr = d.client.Close()
		}
	})
	return d.closeErr
}
