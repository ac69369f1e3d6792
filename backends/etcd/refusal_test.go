package etcd_test

import (
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/internal/lease"
	"github.com/dsync-dev/dsync/internal/testenv/etcdtest"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
)

// TestRequestTooLarge: a request refused as too large (here by the client's
// gRPC, with a small send limit) is ErrInvalid, keeps gRPC's error in the
// chain, and leaves nothing behind.
func TestRequestTooLarge(t *testing.T) {
	c := etcdtest.Start(t, nil)
	cfg, err := c.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxCallSendMsgSize = 4 << 10
	small, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = small.Close() })
	d, cli := newDriverOver(t, c, small)
	ctx := testutil.Context(t)
	before, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{1, 3} {
		r := backends.Request{Key: "big", Token: "t", TTL: 5 * time.Second, Limit: limit, Value: make([]byte, 8<<10)}
		_, err := d.Acquire(ctx, r)
		if !errors.Is(err, backends.ErrInvalid) || status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("Acquire of an oversized request (limit %d) = %v (code %v), want ErrInvalid and ResourceExhausted", limit, err, status.Code(err))
		}
	}
	resp, err := cli.Get(ctx, "dsync/big", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("refused requests left %v, %v", resp.Kvs, err)
	}
	after, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(after.Leases) - len(before.Leases); n > 1 {
		t.Errorf("refused requests left %d leases, want at most the one the driver keeps", n)
	}
}

// TestPermissionDenied: a user whose role does not cover the prefix is
// refused by the server; the driver says ErrInvalid, with etcd's error in
// the chain.
func TestPermissionDenied(t *testing.T) {
	c := etcdtest.Start(t, nil)
	ctx := testutil.Context(t)
	admin := c.Client(t)
	for _, step := range []func() error{
		func() error { _, err := admin.UserAdd(ctx, "root", "s3cret"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.RoleAdd(ctx, "elsewhere"); return err },
		func() error {
			_, err := admin.RoleGrantPermission(ctx, "elsewhere", "other/", clientv3.GetPrefixRangeEnd("other/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := admin.UserAdd(ctx, "limited", "pw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "limited", "elsewhere"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	u, _ := url.Parse(c.URL())
	u.User = url.UserPassword("limited", "pw")
	b, err := dsync.Open(ctx, u.String())
	if err != nil {
		t.Fatalf("Open as limited: %v", err)
	}
	defer b.Close()
	d := lease.Driver(b)
	for _, limit := range []int{1, 3} {
		_, err := d.Acquire(ctx, backends.Request{Key: fmt.Sprint("k", limit), Token: "t", TTL: 5 * time.Second, Limit: limit})
		if !errors.Is(err, backends.ErrInvalid) || !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("Acquire outside the user's permissions (limit %d) = %v, want ErrInvalid and etcd's permission denied", limit, err)
		}
	}
	if err := d.Release(ctx, "k1", "t"); !errors.Is(err, backends.ErrInvalid) {
		t.Errorf("Release outside the user's permissions = %v, want ErrInvalid", err)
	}
}
