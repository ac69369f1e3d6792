// Package etcdfence is the fence guard for a resource kept in etcd: a
// transaction whose If holds a compare of the name's fence key with the
// fencing token, for the caller's Then. The caller's ops run, and the fence
// is raised to the token, only if the token is at least the largest the
// fence has accepted and the caller's own compares hold; a stale token
// fails the transaction with an error matching fence.ErrStale, and neither
// Then nor Else runs.
//
// The fence of name is the key Prefix+name, holding the largest accepted
// token as 20 decimal digits (so that etcd's byte-wise compare of values
// orders them as numbers): tokens of the whole uint64 range. Tokens come
// from any dsync backend, not only etcd's, and the resource need not be in
// the lock's cluster; one name's fence must see the tokens of one lock,
// election or permit slot only (see package fence).
//
// Commit makes one request (a transaction nesting the caller's in the
// check, etcd 3.3 or later), bounded by its context, and is not retried.
// The fence key is left behind for good; deleting it resets the fence.
package etcdfence

import (
	"context"
	"fmt"
	"strconv"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/fence"
)

// DefaultPrefix is the default prefix of the fence keys.
const DefaultPrefix = "dsync-fence/"

// Options configure a Guard. A nil *Options means defaults; a zero field
// means that field's default.
type Options struct {
	// Prefix of the fence keys: the fence of name is Prefix+name. Default
	// DefaultPrefix.
	Prefix string
}

// Guard makes transactions on an etcd KV conditional on fencing tokens.
// Safe for concurrent use.
type Guard struct {
	kv     clientv3.KV
	prefix string
}

// New returns a guard over kv (a *clientv3.Client, or a KV of package
// namespace). It makes no I/O. A nil kv is an error matching
// dsync.ErrInvalid.
func New(kv clientv3.KV, opts *Options) (*Guard, error) {
	if kv == nil {
		return nil, invalid("kv", "nil")
	}
	g := &Guard{kv: kv, prefix: DefaultPrefix}
	if opts != nil && opts.Prefix != "" {
		g.prefix = opts.Prefix
	}
	return g, nil
}

// Key returns the fence key of name.
func (g *Guard) Key(name string) string { return g.prefix + name }

// Txn starts a transaction guarded by token under the fence of name. As
// with clientv3.Txn, If, Then and Else add to it and Commit sends it.
func (g *Guard) Txn(ctx context.Context, name string, token uint64) *Txn {
	t := &Txn{g: g, ctx: ctx, name: name, token: token}
	switch {
	case name == "":
		t.err = invalid("name", "empty")
	case token == 0:
		t.err = invalid("token", "0: the lease has no fencing token (NoFencing, or a backend without fencing), and a guard cannot order it")
	}
	return t
}

// Txn is a transaction under a Guard's check. It is not safe for
// concurrent use.
type Txn struct {
	g     *Guard
	ctx   context.Context
	name  string
	token uint64
	err   error // bad input, returned by Commit

	cmps      []clientv3.Cmp
	then, els []clientv3.Op
}

// If adds compares of the caller's, all of which must hold for Then to run.
func (t *Txn) If(cs ...clientv3.Cmp) *Txn {
	t.cmps = append(t.cmps, cs...)
	return t
}

// Then adds the ops to run when the token is not stale and the compares
// hold; the fence is raised to the token with them.
func (t *Txn) Then(ops ...clientv3.Op) *Txn {
	t.then = append(t.then, ops...)
	return t
}

// Else adds the ops to run when the token is not stale but a compare fails;
// the fence is then left as it was.
func (t *Txn) Else(ops ...clientv3.Op) *Txn {
	t.els = append(t.els, ops...)
	return t
}

// Commit sends the transaction. A stale token returns an error matching
// fence.ErrStale, with nothing run. Otherwise it returns the response of
// the caller's transaction: Succeeded says whether its compares held (and
// Then ran), Responses are those of Then or Else.
func (t *Txn) Commit() (*clientv3.TxnResponse, error) {
	if t.err != nil {
		return nil, t.err
	}
	k, tok := t.g.Key(t.name), encode(t.token)
	inner := clientv3.OpTxn(t.cmps, append(t.then[:len(t.then):len(t.then)], clientv3.OpPut(k, tok)), t.els)
	checked := clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.Value(k), ">", tok)},
		[]clientv3.Op{clientv3.OpGet(k)},
		[]clientv3.Op{inner},
	)
	// A missing key fails every compare of its value, hence the first If.
	resp, err := t.g.kv.Txn(t.ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).Then(inner).Else(checked).Commit()
	if err != nil {
		return nil, err
	}
	got := resp.Responses[0].GetResponseTxn()
	if !resp.Succeeded {
		if got.Succeeded {
			return nil, t.stale(got)
		}
		got = got.Responses[0].GetResponseTxn()
	}
	out := &clientv3.TxnResponse{Header: resp.Header, Succeeded: got.Succeeded, Responses: got.Responses}
	if got.Succeeded {
		out.Responses = out.Responses[:len(t.then)] // without the fence's put
	}
	return out, nil
}

// stale is the error of a transaction refused by the check, whose Else
// read the fence.
func (t *Txn) stale(check *pb.TxnResponse) error {
	kvs := check.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 { // not reached: the key existed at the check
		return fmt.Errorf("%w: %q: token %d refused", fence.ErrStale, t.name, t.token)
	}
	cur, err := decode(t.name, kvs[0].Value)
	if err != nil {
		return fmt.Errorf("%w: %q: token %d refused: %w", fence.ErrStale, t.name, t.token, err)
	}
	return fmt.Errorf("%w: %q: token %d is below %d, the largest the resource has accepted", fence.ErrStale, t.name, t.token, cur)
}

// Token returns the largest token the fence of name has accepted, or 0 if
// it has accepted none.
func (g *Guard) Token(ctx context.Context, name string) (uint64, error) {
	if name == "" {
		return 0, invalid("name", "empty")
	}
	resp, err := g.kv.Get(ctx, g.Key(name))
	if err != nil {
		return 0, err
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	return decode(name, resp.Kvs[0].Value)
}

func encode(token uint64) string { return fmt.Sprintf("%020d", token) }

func decode(name string, v []byte) (uint64, error) {
	n, err := strconv.ParseUint(string(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("dsync: fence: the fence of %q holds %q, not a token", name, v)
	}
	return n, nil
}

// invalidError is bad input, found before any I/O. It matches
// dsync.ErrInvalid.
type invalidError struct{ what, why string }

func (e *invalidError) Error() string        { return "dsync: fence: invalid " + e.what + ": " + e.why }
func (e *invalidError) Is(target error) bool { return target == dsync.ErrInvalid }

func invalid(what, why string) error { return &invalidError{what: what, why: why} }
