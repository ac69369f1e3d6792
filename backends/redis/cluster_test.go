package redis_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/backends/redis"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
)

// TestCluster runs the driver on a real Redis Cluster of one node that
// serves every hash slot, through go-redis's cluster client. The server
// refuses a script whose keys lie in different slots (CROSSSLOT), so every
// fenced lock and semaphore call here shows that a key's hold, its
// semaphore's values, its line of waiters and its fence counter share a
// slot, for names that bend the hash-tag rules too.
func TestCluster(t *testing.T) {
	srv := redistest.Start(t, &redistest.Options{ExtraArgs: []string{
		"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
	}})
	ctx := testutil.Context(t)
	admin := srv.NewClient(t)
	if err := admin.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatalf("CLUSTER ADDSLOTSRANGE: %v", err)
	}
	testutil.Eventually(t, 10*time.Second, "the one-node cluster to serve every slot", func() bool {
		info, err := admin.ClusterInfo(ctx).Result()
		return err == nil && strings.Contains(info, "cluster_state:ok")
	})
	// The server does refuse keys of two slots in one script.
	if err := admin.Eval(ctx, "return 1", []string{"foo", "bar"}).Err(); err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("a script on keys of two slots: %v, want CROSSSLOT", err)
	}

	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{srv.Addr()}})
	t.Cleanup(func() { _ = cc.Close() })
	d, err := redis.NewDriver(cc, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })

	names := []string{"job", "a}b", "{x}", "x{y}z", "with space", "ünïcode", "a:b:c"}
	for i := range 200 {
		names = append(names, fmt.Sprint("name-", i))
	}
	for _, name := range names {
		for _, limit := range []int{1, 3} {
			r := backends.Request{Key: name, Token: "t", TTL: time.Minute, Limit: limit, Fence: true, Value: []byte("v")}
			g, err := d.Acquire(ctx, r)
			if err != nil {
				t.Fatalf("Acquire(%q, limit %d): %v", name, limit, err)
			}
			if g.Fence == 0 {
				t.Errorf("Acquire(%q, limit %d): no fencing token", name, limit)
			}
			if err := d.Refresh(ctx, name, "t", time.Minute); err != nil {
				t.Errorf("Refresh(%q, limit %d): %v", name, limit, err)
			}
			if _, err := d.Holder(ctx, name); err != nil {
				t.Errorf("Holder(%q, limit %d): %v", name, limit, err)
			}
			// A lock's line and its waiters' liveness keys share the slot.
			w := backends.Request{Key: name, Token: "w", TTL: time.Minute, Fence: true, Waiter: "0000000000000001-w"}
			if limit == 1 {
				if _, err := d.Acquire(ctx, w); err != backends.ErrNotAcquired {
					t.Errorf("Acquire(%q) by a waiter while held: %v", name, err)
				}
			}
			if err := d.Release(ctx, name, "t"); err != nil {
				t.Errorf("Release(%q, limit %d): %v", name, limit, err)
			}
			if limit == 1 {
				if _, err := d.Acquire(ctx, w); err != nil {
					t.Errorf("Acquire(%q) by the waiter the lock is kept for: %v", name, err)
				}
				if err := d.Release(ctx, name, "w"); err != nil {
					t.Errorf("Release(%q) by the waiter: %v", name, err)
				}
			}
		}
	}
	// At most one counter per slot: the 207 names left at most 207.
	var counters int
	iter := cc.Scan(ctx, 0, "dsync:fence:*", 1000).Iterator()
	for iter.Next(ctx) {
		counters++
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if counters == 0 || counters > len(names) {
		t.Errorf("%d fence counters for %d names", counters, len(names))
	}
}
