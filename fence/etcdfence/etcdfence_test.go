package etcdfence_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"

	"github.com/dsync-dev/dsync"
	_ "github.com/dsync-dev/dsync/backends/etcd"
	"github.com/dsync-dev/dsync/fence"
	"github.com/dsync-dev/dsync/fence/etcdfence"
	"github.com/dsync-dev/dsync/internal/testenv/etcdtest"
	"github.com/dsync-dev/dsync/internal/testenv/fencetest"
	"github.com/dsync-dev/dsync/internal/testenv/leakcheck"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// store is the suite's adapter of the etcd guard: a name's value is a key,
// its log one key per accepted write, read in the order of their
// revisions; each write is one guarded transaction.
type store struct {
	g   *etcdfence.Guard
	c   *clientv3.Client
	dir string // this store's keys
	seq atomic.Int64
}

func (s *store) valueKey(name string) string { return s.dir + "value/" + name }
func (s *store) logDir(name string) string   { return s.dir + "log/" + name + "/" }

func (s *store) Write(ctx context.Context, name string, token uint64, value string) error {
	entry := s.logDir(name) + strconv.FormatInt(s.seq.Add(1), 10)
	_, err := s.g.Txn(ctx, name, token).
		Then(clientv3.OpPut(s.valueKey(name), value), clientv3.OpPut(entry, strconv.FormatUint(token, 10))).
		Commit()
	return err
}

// WriteThenFail binds its put to a lease that does not exist: etcd fails
// the whole transaction.
func (s *store) WriteThenFail(ctx context.Context, name string, token uint64) error {
	_, err := s.g.Txn(ctx, name, token).
		Then(clientv3.OpPut(s.valueKey(name), "written", clientv3.WithLease(clientv3.LeaseID(0x7fff_0000_dead_beef)))).
		Commit()
	return err
}

func (s *store) Read(ctx context.Context, name string) (string, []uint64, error) {
	v, err := s.c.Get(ctx, s.valueKey(name))
	if err != nil {
		return "", nil, err
	}
	var value string
	if len(v.Kvs) > 0 {
		value = string(v.Kvs[0].Value)
	}
	l, err := s.c.Get(ctx, s.logDir(name), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortAscend))
	if err != nil {
		return "", nil, err
	}
	var log []uint64
	for _, kv := range l.Kvs {
		n, err := strconv.ParseUint(string(kv.Value), 10, 64)
		if err != nil {
			return "", nil, err
		}
		log = append(log, n)
	}
	return value, log, nil
}

func (s *store) Fence(ctx context.Context, name string) (uint64, error) { return s.g.Token(ctx, name) }

func (s *store) MaxToken() uint64 { return math.MaxUint64 }

func newGuard(t testing.TB, kv clientv3.KV, prefix string) *etcdfence.Guard {
	t.Helper()
	g, err := etcdfence.New(kv, &etcdfence.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestEtcd runs the guards' suite on a real (embedded) etcd.
func TestEtcd(t *testing.T) {
	c := etcdtest.Start(t, nil).Client(t)
	fencetest.Run(t, func(t *testing.T) fencetest.Store {
		dir := t.Name() + "/"
		return &store{g: newGuard(t, c, dir+"fence/"), c: c, dir: dir}
	})
}

// TestEtcdCallerCompares: the caller's If decides between Then and Else
// once the token passed, and only Then raises the fence; a stale token
// runs neither.
func TestEtcdCallerCompares(t *testing.T) {
	ctx := testutil.Context(t)
	c := etcdtest.Start(t, nil).Client(t)
	g := newGuard(t, c, "fence/")

	// Then: the compare holds (the key is absent).
	absent := clientv3.Compare(clientv3.CreateRevision("doc"), "=", 0)
	resp, err := g.Txn(ctx, "doc", 5).If(absent).Then(clientv3.OpPut("doc", "v5")).Else(clientv3.OpGet("doc")).Commit()
	if err != nil || !resp.Succeeded || len(resp.Responses) != 1 || resp.Responses[0].GetResponsePut() == nil {
		t.Fatalf("Commit: %+v, %v; want Then's put", resp, err)
	}
	// Else: the compare fails, Else's get answers, the fence stays at 5.
	resp, err = g.Txn(ctx, "doc", 9).If(absent).Then(clientv3.OpPut("doc", "v9")).Else(clientv3.OpGet("doc")).Commit()
	if err != nil || resp.Succeeded {
		t.Fatalf("Commit: %+v, %v; want Else", resp, err)
	}
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) != 1 || string(kvs[0].Value) != "v5" {
		t.Errorf("Else's get: %v, want v5", kvs)
	}
	if tok, err := g.Token(ctx, "doc"); err != nil || tok != 5 {
		t.Errorf("fence %d, %v after Else; want 5", tok, err)
	}
	// Stale: neither Then nor Else runs.
	_, err = g.Txn(ctx, "doc", 4).If(absent).Then(clientv3.OpPut("doc", "v4")).Else(clientv3.OpPut("marker", "else ran")).Commit()
	if !errors.Is(err, fence.ErrStale) {
		t.Fatalf("stale Commit: %v, want ErrStale", err)
	}
	t.Logf("stale: %v", err)
	for k, want := range map[string]string{"doc": "v5", "marker": ""} {
		r, err := c.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if len(r.Kvs) > 0 {
			got = string(r.Kvs[0].Value)
		}
		if got != want {
			t.Errorf("%s = %q after a stale Commit, want %q", k, got, want)
		}
	}
	// Then and Else may write the same key, as in any transaction.
	resp, err = g.Txn(ctx, "doc", 6).If(absent).Then(clientv3.OpPut("other", "then")).Else(clientv3.OpPut("other", "else")).Commit()
	if err != nil || resp.Succeeded {
		t.Fatalf("Commit: %+v, %v", resp, err)
	}
}

// TestEtcdNamespace: over a KV of package namespace, the guard's keys and
// the caller's live under the namespace, and the responses come back
// without it.
func TestEtcdNamespace(t *testing.T) {
	ctx := testutil.Context(t)
	c := etcdtest.Start(t, nil).Client(t)
	g := newGuard(t, namespace.NewKV(c, "app/"), "")
	if _, err := g.Txn(ctx, "n", 7).Then(clientv3.OpPut("k", "v")).Commit(); err != nil {
		t.Fatal(err)
	}
	resp, err := g.Txn(ctx, "n", 7).Then(clientv3.OpGet("k")).Commit()
	if err != nil {
		t.Fatal(err)
	}
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) != 1 || string(kvs[0].Key) != "k" {
		t.Errorf("Then's get through the namespace: %v, want key k", kvs)
	}
	if _, err := g.Txn(ctx, "n", 6).Then(clientv3.OpPut("k", "late")).Commit(); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("stale Commit: %v", err)
	}
	for k, want := range map[string]string{"app/k": "v", "app/" + etcdfence.DefaultPrefix + "n": "00000000000000000007"} {
		r, err := c.Get(ctx, k)
		if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != want {
			t.Errorf("%s: %v, %v; want %q", k, r, err, want)
		}
	}
}

// TestEtcdLockTokens: the guard orders the tokens of a real etcd lock (create
// revisions): the holder whose lease ran out is refused after its
// successor wrote.
func TestEtcdLockTokens(t *testing.T) {
	ctx := testutil.Context(t)
	cl := etcdtest.Start(t, nil)
	c := cl.Client(t)
	b, err := dsync.Open(ctx, cl.URL()+"/locks")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	fencetest.LateHolder(t, &store{g: newGuard(t, c, "fence/"), c: c, dir: "data/"}, b, cl.MinLeaseTTL())
}

// TestEtcdBadInput: bad arguments are errors matching dsync.ErrInvalid,
// before any I/O.
func TestEtcdBadInput(t *testing.T) {
	if _, err := etcdfence.New(nil, nil); !errors.Is(err, dsync.ErrInvalid) {
		t.Errorf("New(nil): %v", err)
	}
	c := etcdtest.Start(t, nil).Client(t)
	g := newGuard(t, c, "")
	ctx := testutil.Context(t)
	for what, err := range map[string]error{
		"empty name": second(g.Txn(ctx, "", 1).Then(clientv3.OpPut("k", "v")).Commit()),
		"token 0":    second(g.Txn(ctx, "n", 0).Then(clientv3.OpPut("k", "v")).Commit()),
		"Token":      second(g.Token(ctx, "")),
	} {
		if !errors.Is(err, dsync.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", what, err)
		}
	}
	if r, err := c.Get(ctx, "k"); err != nil || len(r.Kvs) != 0 {
		t.Errorf("a refused transaction wrote: %v, %v", r, err)
	}
}

func second[T any](_ T, err error) error { return err }

// BenchmarkEtcdGuard puts a key through the guard and with a plain Put, on
// one embedded etcd member: the guard's cost is guarded/plain.
func BenchmarkEtcdGuard(b *testing.B) {
	c := etcdtest.Start(b, nil).Client(b)
	g := newGuard(b, c, "fence/")
	ctx := b.Context()
	var token uint64 // grows across the runs of the sub-benchmark
	b.Run("guarded", func(b *testing.B) {
		for range b.N {
			token++
			if _, err := g.Txn(ctx, "bench", token).Then(clientv3.OpPut("v", "value")).Commit(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("plain", func(b *testing.B) {
		for range b.N {
			if _, err := c.Put(ctx, "v", "value"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
