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
	_ backends.Driver   = (*Driver)(nil)
	_ backends.Notifier = (*Driver)(nil)
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
			Name:          "etcd",
			MaxLimit:      1,
			Fencing:       true,
			TTLResolution: time.Second,
			MinTTL:        minTTL,
			MaxTTL:        maxTTLSeconds * time.Second,
		},
	}
	d.holds.init()
	d.pool.init()
	d.renew.init(client)
	d.notify.init(d)
	return d, nil
}

// Capabilities reports a lock-only driver with fencing, whole-second TTLs,
// the cluster's minimum TTL and etcd's maximum (9e9 s). It makes no I/O.
func (d *Driver) Capabilities() backends.Capabilities { return d.caps }

// Prefix returns the key prefix, always ending in "/".
func (d *Driver) Prefix() string { return d.prefix }

// Key returns the etcd key that holds the lock named name: the prefix
// followed by name with "%" and "/" escaped as "%25" and "%2F". A resource
// stored in etcd can compare the fencing token with this key's create
// revision (see the package example). It returns an *InvalidError for an
// empty name.
func (d *Driver) Key(name string) (string, error) {
	if name == "" {
		return "", backends.Invalid("key", "empty")
	}
	return d.prefix + escapeName(name), nil
}

// escapeName makes a lock name one path segment: no name can then nest
// under another (or under the keys a semaphore will keep below its own
// name), and distinct names stay distinct.
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

// Acquire makes one attempt to hold req.Key: it takes a lease (a fresh
// grant, or an idle lease of the driver's, renewed in parallel with the
// transaction) and runs one transaction that puts the key with that lease
// if the key does not exist. It returns ErrNotAcquired when the key is
// held; when the holder is a hold of this driver's whose lease is alive for
// sure, it says so without asking the cluster. Grant.Fence is the key's
// create revision; Grant.TTL is the lease's TTL as the server applied it:
// req.TTL rounded up to whole seconds, and raised to the cluster's minimum.
func (d *Driver) Acquire(ctx context.Context, req backends.Request) (backends.Grant, error) {
	if d.closed.Load() {
		return backends.Grant{}, backends.ErrClosed
	}
	if err := backends.CheckRequest(req, d.caps); err != nil {
		return backends.Grant{}, err
	}
	k, err := d.begin(req.Key, req.Token)
	if err != nil {
		return backends.Grant{}, err
	}
	secs, err := d.ttlSeconds(req.TTL)
	if err != nil {
		return backends.Grant{}, err
	}
	val := encodeValue(req.Token, req.Value)

	now := time.Now()
	if d.holds.held(req.Key, now) {
		// A hold of this driver's has the key, and its lease is alive: the
		// cluster would say no, at the cost of a raft write. This is what a
		// process's waiters mostly meet: the one at the head of the line
		// tries while another holds.
		d.notify.held(k, d.rev.Load())
		return backends.Grant{}, backends.ErrNotAcquired
	}
	if l, ok := d.pool.get(secs, now); ok {
		g, err := d.acquireReused(ctx, req, k, val, l)
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
	l := idleLease{id: resp.ID, secs: secs, ttl: resp.TTL, renewed: sent}
	tr, err := d.txnPut(ctx, k, val, l.id)
	if err != nil {
		return backends.Grant{}, d.wrap(err)
	}
	return d.acquired(req, k, tr, l)
}

// errStaleLease: a reused lease was gone before the transaction applied.
var errStaleLease = errors.New("etcd: idle lease expired")

// acquireReused attempts the acquisition with an idle lease, renewing it
// while the transaction runs: either order leaves the lease expiring no
// earlier than a full TTL after this call started, which is what the layer
// above counts on.
func (d *Driver) acquireReused(ctx context.Context, req backends.Request, k, val string, l idleLease) (backends.Grant, error) {
	sent := time.Now()
	wait := d.renew.send(ctx, l.id)
	tr, terr := d.txnPut(ctx, k, val, l.id)
	var ka struct {
		ttl int64
		err error
	}
	if resp, err := wait(ctx); err != nil {
		ka.err = err
	} else {
		d.seen(resp.Header)
		ka.ttl = resp.TTL
	}

	switch {
	case terr != nil:
		if errors.Is(terr, rpctypes.ErrLeaseNotFound) {
			return backends.Grant{}, errStaleLease
		}
		return backends.Grant{}, d.wrap(terr)
	case !tr.Succeeded:
		if ka.err == nil {
			l.renewed, l.ttl = sent, ka.ttl
			d.pool.put(l, time.Now()) // the lease holds no key
		}
		d.notify.held(k, tr.Header.Revision)
		return backends.Grant{}, backends.ErrNotAcquired
	case ka.err != nil:
		// The key is on a lease whose renewal failed: its life may end
		// before a full TTL from the start of this call, so this is no
		// success. Record the hold so that the release the layer above
		// makes is quick.
		d.holds.put(req.Key, req.Token, hold{lease: l.id, rev: tr.Header.Revision, secs: l.secs, ttl: l.ttl, renewed: l.renewed})
		return backends.Grant{}, fmt.Errorf("etcd: renewing the lease for the hold: %w", d.wrap(ka.err))
	}
	l.renewed, l.ttl = sent, ka.ttl
	return d.acquired(req, k, tr, l)
}

// txnPut is the acquisition: put k on lease if k does not exist.
func (d *Driver) txnPut(ctx context.Context, k, val string, lease clientv3.LeaseID) (*clientv3.TxnResponse, error) {
	resp, err := d.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, val, clientv3.WithLease(lease))).
		Commit()
	if err == nil {
		d.seen(resp.Header)
	}
	return resp, err
}

// acquired turns a transaction's outcome into the result of Acquire.
func (d *Driver) acquired(req backends.Request, k string, tr *clientv3.TxnResponse, l idleLease) (backends.Grant, error) {
	if !tr.Succeeded {
		d.pool.put(l, time.Now()) // the lease holds no key
		d.notify.held(k, tr.Header.Revision)
		return backends.Grant{}, backends.ErrNotAcquired
	}
	rev := tr.Header.Revision
	d.holds.put(req.Key, req.Token, hold{lease: l.id, rev: rev, secs: l.secs, ttl: l.ttl, renewed: l.renewed})
	g := backends.Grant{TTL: time.Duration(l.ttl) * time.Second}
	if req.Fence {
		g.Fence = uint64(rev)
	}
	return g, nil
}

// lookup returns the hold of key and token, from the driver's table or
// else read from the server (a hold taken by another driver, or dropped
// from the table), or ErrNotHeld.
func (d *Driver) lookup(ctx context.Context, key, token, k string) (h hold, fromServer bool, err error) {
	if h, ok := d.holds.get(key, token); ok {
		return h, false, nil
	}
	resp, err := d.client.Get(ctx, k)
	if err != nil {
		return hold{}, true, d.wrap(err)
	}
	d.seen(resp.Header)
	if len(resp.Kvs) == 0 {
		return hold{}, true, backends.ErrNotHeld
	}
	kv := resp.Kvs[0]
	if t, _ := decodeValue(kv.Value); t != token || kv.Lease == 0 {
		return hold{}, true, backends.ErrNotHeld
	}
	return hold{lease: clientv3.LeaseID(kv.Lease), rev: kv.CreateRevision}, true, nil
}

// Refresh renews the lease of the hold owned by token, then checks that the
// key is still that hold. It never re-creates a hold: a lease or key that
// is gone, or a key that belongs to another token, is ErrNotHeld. An etcd
// lease keeps the TTL it was granted with, so ttl must not exceed the
// hold's Grant.TTL (an *InvalidError otherwise); the layer above always
// passes Grant.TTL.
func (d *Driver) Refresh(ctx context.Context, key, token string, ttl time.Duration) error {
	k, err := d.begin(key, token)
	if err != nil {
		return err
	}
	secs, err := d.ttlSeconds(ttl)
	if err != nil {
		return err
	}
	h, fromServer, err := d.lookup(ctx, key, token, k)
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
		resp, err := d.client.Get(ctx, k)
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

// Release deletes the hold owned by token in one transaction that compares
// the key's create revision with the hold's, so that a stale or retried
// release never deletes a newer hold of the key. A hold that expired or
// belongs to another token is ErrNotHeld. The hold's lease, which then
// holds no key, is kept for a later Acquire of this driver.
func (d *Driver) Release(ctx context.Context, key, token string) error {
	k, err := d.begin(key, token)
	if err != nil {
		return err
	}
	h, fromServer, err := d.lookup(ctx, key, token, k)
	if err != nil {
		return err
	}
	// From now on the key may be free, or about to be: the hold no longer
	// answers Acquire for the cluster, even if this release fails.
	d.holds.releasing(key, token, h.rev)
	resp, err := d.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", h.rev)).
		Then(clientv3.OpDelete(k)).
		Commit()
	if err != nil {
		return d.wrap(err) // the hold stays in the table for a retry
	}
	d.seen(resp.Header)
	d.holds.drop(key, token, h.rev)
	if !resp.Succeeded {
		return backends.ErrNotHeld
	}
	d.notify.released(k)
	if !fromServer {
		d.pool.put(idleLease{id: h.lease, secs: h.secs, ttl: h.ttl, renewed: h.renewed}, time.Now())
	}
	return nil
}

// Holder reports the value stored with key's hold and its remaining TTL as
// the server reports it (whole seconds, rounded down: zero in the last
// second), or ErrNotHeld when nobody holds key. A key written without a
// lease (not by dsync) is reported with a zero TTL.
func (d *Driver) Holder(ctx context.Context, key string) (backends.HolderInfo, error) {
	if d.closed.Load() {
		return backends.HolderInfo{}, backends.ErrClosed
	}
	k, err := d.Key(key)
	if err != nil {
		return backends.HolderInfo{}, err
	}
	resp, err := d.client.Get(ctx, k)
	if err != nil {
		return backends.HolderInfo{}, d.wrap(err)
	}
	d.seen(resp.Header)
	if len(resp.Kvs) == 0 {
		return backends.HolderInfo{}, backends.ErrNotHeld
	}
	kv := resp.Kvs[0]
	_, value := decodeValue(kv.Value)
	info := backends.HolderInfo{Value: value}
	if kv.Lease == 0 {
		return info, nil
	}
	ttl, err := d.client.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
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
