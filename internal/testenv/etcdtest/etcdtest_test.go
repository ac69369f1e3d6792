package etcdtest_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dsync-dev/dsync/internal/testenv/etcdtest"
	"github.com/dsync-dev/dsync/internal/testenv/leakcheck"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

func TestSingleMember(t *testing.T) {
	start := time.Now()
	c := etcdtest.Start(t, nil)
	t.Logf("started in %v on %v", time.Since(start), c.Endpoints())
	cli := c.Client(t)
	ctx := testutil.Context(t)
	if c.Size() != 1 || len(c.Endpoints()) != 1 || c.URL() != "etcd://"+c.Endpoint(0) {
		t.Fatalf("Size %d, Endpoints %v, URL %s", c.Size(), c.Endpoints(), c.URL())
	}
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	g, err := cli.Grant(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := time.Duration(g.TTL) * time.Second; got != c.MinLeaseTTL() || got != time.Second {
		t.Errorf("grant of 1 s gave %v; MinLeaseTTL %v, want 1s", got, c.MinLeaseTTL())
	}
	if i, err := c.Leader(ctx); err != nil || i != 0 {
		t.Errorf("Leader = %d, %v", i, err)
	}
	// A client's open watch must not hold up Close.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_ = cli.Watch(wctx, "w")
}

func TestMinLeaseTTL(t *testing.T) {
	for _, tc := range []struct {
		opts *etcdtest.Options
		want time.Duration
	}{
		{&etcdtest.Options{TickMs: 50, ElectionMs: 500}, time.Second},
		{&etcdtest.Options{TickMs: 100, ElectionMs: 1000}, 2 * time.Second},
		{&etcdtest.Options{TickMs: 100, ElectionMs: 1400}, 3 * time.Second},
	} {
		c, err := etcdtest.StartServer(testutil.Context(t), tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		cli, err := c.NewClient()
		if err != nil {
			t.Fatal(err)
		}
		g, err := cli.Grant(testutil.Context(t), 1)
		_ = cli.Close()
		if cerr := c.Close(); cerr != nil {
			t.Error(cerr)
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := time.Duration(g.TTL) * time.Second; got != tc.want || c.MinLeaseTTL() != tc.want {
			t.Errorf("%+v: grant of 1 s gave %v, MinLeaseTTL %v, want %v", *tc.opts, got, c.MinLeaseTTL(), tc.want)
		}
	}
}

func TestBadOptions(t *testing.T) {
	for _, o := range []*etcdtest.Options{{Members: -1}, {TickMs: 100, ElectionMs: 400}} {
		if c, err := etcdtest.StartServer(testutil.Context(t), o); err == nil {
			_ = c.Close()
			t.Errorf("StartServer(%+v) succeeded", *o)
		}
	}
}

func TestCluster(t *testing.T) {
	start := time.Now()
	c := etcdtest.Start(t, &etcdtest.Options{Members: 3})
	t.Logf("3 members started in %v", time.Since(start))
	cli := c.Client(t)
	ctx := testutil.Context(t)
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_ = cli.Watch(wctx, "w")

	for round, stop := range []func(int){c.Stop, c.Kill} {
		l, err := c.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s := time.Now()
		stop(l)
		if c.Running(l) {
			t.Fatalf("member %d still running", l)
		}
		stopped := time.Since(s)
		l2, err := c.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l2 == l {
			t.Fatalf("stopped member %d still leads", l)
		}
		t.Logf("round %d: leader %d stopped in %v, member %d leads %v after the stop began", round, l, stopped, l2, time.Since(s))
		key := "after-" + string(rune('a'+round))
		if _, err := cli.Put(ctx, key, "v"); err != nil {
			t.Fatal(err)
		}
		if err := c.Restart(ctx, l); err != nil {
			t.Fatal(err)
		}
		// The restarted member has its data and catches up.
		one, err := clientv3.New(clientv3.Config{Endpoints: []string{c.Endpoint(l)}})
		if err != nil {
			t.Fatal(err)
		}
		got, err := one.Get(ctx, key)
		_ = one.Close()
		if err != nil || len(got.Kvs) != 1 {
			t.Fatalf("Get %s from the restarted member: %v, %v", key, got, err)
		}
	}
}

func TestMajorityLost(t *testing.T) {
	c := etcdtest.Start(t, &etcdtest.Options{Members: 3})
	ctx := testutil.Context(t)
	c.Kill(0)
	c.Kill(1)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if i, err := c.Leader(short); err == nil {
		t.Fatalf("member %d leads without a quorum", i)
	}
	if err := c.Restart(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Leader(ctx); err != nil {
		t.Fatal(err)
	}
}
