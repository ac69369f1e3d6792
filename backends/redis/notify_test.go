package redis_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dsync-dev/dsync"
	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/backends/redis"
	"github.com/dsync-dev/dsync/internal/testenv/redistest"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
	"github.com/dsync-dev/dsync/locker"
)

// numSub is the number of server-side subscribers of key's release channel.
func numSub(ctx context.Context, t *testing.T, client *goredis.Client, key string) int64 {
	t.Helper()
	ch := "dsync:{" + key + "}:released"
	m, err := client.PubSubNumSub(ctx, ch).Result()
	if err != nil {
		t.Fatalf("PUBSUB NUMSUB: %v", err)
	}
	return m[ch]
}

// watch subscribes to key and waits until the server has the subscription
// active: WatchReleases itself does not wait for the confirmation.
func watch(ctx context.Context, t *testing.T, d *redis.Driver, client *goredis.Client, key string) backends.Subscription {
	t.Helper()
	sub, err := d.WatchReleases(ctx, key)
	if err != nil {
		t.Fatalf("WatchReleases: %v", err)
	}
	t.Cleanup(sub.Close)
	testutil.Eventually(t, 5*time.Second, "the subscription to be active", func() bool {
		return numSub(ctx, t, client, key) > 0
	})
	return sub
}

// cycle acquires and releases key with token while somebody waits: a lock
// released with nobody in its line publishes nothing. The waiter is a
// place in the line whose liveness has lapsed, so that the release tells
// every watcher (instead of keeping the lock for that waiter).
func cycle(ctx context.Context, t *testing.T, d *redis.Driver, client *goredis.Client, key, token string) {
	t.Helper()
	if _, err := d.Acquire(ctx, req(key, token, time.Minute)); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	queue(ctx, t, client, key)
	if err := d.Release(ctx, key, token); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// queue puts a waiter whose liveness has lapsed in key's line.
func queue(ctx context.Context, t *testing.T, client *goredis.Client, key string) {
	t.Helper()
	if err := client.ZAdd(ctx, "dsync:{"+key+"}:line", goredis.Z{Member: "0000000000000000-lapsed"}).Err(); err != nil {
		t.Fatalf("ZADD: %v", err)
	}
}

func receive(t *testing.T, sub backends.Subscription, what string) {
	t.Helper()
	select {
	case <-sub.C():
	case <-time.After(5 * time.Second):
		t.Fatalf("no release notice for %s within 5s", what)
	}
}

func empty(sub backends.Subscription) bool {
	select {
	case <-sub.C():
		return false
	default:
		return true
	}
}

func TestWatchReleases(t *testing.T) {
	srv := redistest.Start(t, nil)
	d, client := newDriver(t, srv, nil)
	ctx := testutil.Context(t)
	key, other := t.Name(), t.Name()+"-other"

	a := watch(ctx, t, d, client, key)
	b := watch(ctx, t, d, client, key) // same key: one server subscription
	o := watch(ctx, t, d, client, other)
	if n := numSub(ctx, t, client, key); n != 1 {
		t.Errorf("NUMSUB with two watchers on one driver = %d, want 1 (one shared connection)", n)
	}

	cycle(ctx, t, d, client, key, "t1")
	receive(t, a, "watcher a")
	receive(t, b, "watcher b")
	if !empty(o) {
		t.Errorf("a watcher of another key got a notice")
	}

	// A release that is not ours to make publishes nothing.
	if _, err := d.Acquire(ctx, req(key, "t2", time.Minute)); err != nil {
		t.Fatal(err)
	}
	queue(ctx, t, client, key)
	if err := d.Release(ctx, key, "not-t2"); err == nil {
		t.Fatal("foreign Release succeeded")
	}
	if err := d.Release(ctx, key, "t2"); err != nil {
		t.Fatal(err)
	}
	receive(t, a, "watcher a, second release")

	// Coalescing: three releases, then one on the other key. Messages on the
	// connection are dispatched in order, so once the other key's notice is
	// in, all three have been handed to a, which holds exactly one.
	for _, tok := range []string{"c1", "c2", "c3"} {
		cycle(ctx, t, d, client, key, tok)
	}
	cycle(ctx, t, d, client, other, "o1")
	receive(t, o, "the other key")
	receive(t, a, "watcher a, coalesced")
	if !empty(a) {
		t.Errorf("three releases gave more than one notice")
	}

	// Closing one of two watchers keeps the channel subscribed; closing the
	// last unsubscribes it.
	b.Close()
	b.Close() // idempotent
	if n := numSub(ctx, t, client, key); n != 1 {
		t.Errorf("NUMSUB after closing one of two watchers = %d, want 1", n)
	}
	cycle(ctx, t, d, client, key, "t3")
	receive(t, a, "watcher a after b closed")
	a.Close()
	testutil.Eventually(t, 5*time.Second, "the channel to be unsubscribed", func() bool {
		return numSub(ctx, t, client, key) == 0
	})

	// A new watcher subscribes the channel again on the same connection.
	c := watch(ctx, t, d, client, key)
	cycle(ctx, t, d, client, key, "t4")
	receive(t, c, "a watcher that came back")
}

// TestQuietWithNobodyInLine: a lock released with nobody in its line,
// fenced or not, publishes nothing; a waiter's refused attempt puts it in
// line, and the next release tells it.
func TestQuietWithNobodyInLine(t *testing.T) {
	srv := redistest.Start(t, nil)
	d, client := newDriver(t, srv, nil)
	ctx := testutil.Context(t)
	key := t.Name()
	sub := watch(ctx, t, d, client, key)
	if err := client.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for _, fence := range []bool{false, true} {
		r := req(key, "t", time.Minute)
		r.Fence = fence
		if _, err := d.Acquire(ctx, r); err != nil {
			t.Fatal(err)
		}
		if err := d.Release(ctx, key, r.Token); err != nil {
			t.Fatal(err)
		}
	}
	if n := cmdCalls(ctx, t, client, "publish"); n != 0 {
		t.Errorf("releases with nobody waiting ran PUBLISH %d times, want 0", n)
	}
	if !empty(sub) {
		t.Error("a release with nobody waiting woke a watcher")
	}

	if _, err := d.Acquire(ctx, req(key, "holder", time.Minute)); err != nil {
		t.Fatal(err)
	}
	w := backends.Request{Key: key, Token: "w", TTL: time.Minute, Waiter: "0000000000000001-w"}
	if _, err := d.Acquire(ctx, w); err != backends.ErrNotAcquired {
		t.Fatalf("waiter's attempt = %v, want ErrNotAcquired", err)
	}
	if err := d.Release(ctx, key, "holder"); err != nil {
		t.Fatal(err)
	}
	receive(t, sub, "the release a waiter waits for")
	if n := cmdCalls(ctx, t, client, "publish"); n != 1 {
		t.Errorf("PUBLISH ran %d times, want once: for the release the waiter waited for", n)
	}
}

// TestWatchReleasesAcrossDrivers checks that a release made by one process
// (here, one driver) wakes a watcher of another.
func TestWatchReleasesAcrossDrivers(t *testing.T) {
	srv := redistest.Start(t, nil)
	d1, client := newDriver(t, srv, nil)
	d2, _ := newDriver(t, srv, nil)
	ctx := testutil.Context(t)
	key := t.Name()

	sub := watch(ctx, t, d1, client, key)
	cycle(ctx, t, d2, client, key, "tok")
	receive(t, sub, "a release by another driver")
}

// TestWatchReleasesConcurrent churns watchers of a few keys from several
// goroutines while releases happen, for the race detector and the leak
// check; the driver's Close must still end cleanly.
func TestWatchReleasesConcurrent(t *testing.T) {
	srv := redistest.Start(t, nil)
	d, _ := newDriver(t, srv, nil)
	ctx := testutil.Context(t)
	keys := []string{t.Name() + "-0", t.Name() + "-1", t.Name() + "-2"}

	done := make(chan error, 8)
	for g := range 8 {
		go func() {
			var err error
			defer func() { done <- err }()
			for i := range 30 {
				key := keys[(g+i)%len(keys)]
				var sub backends.Subscription
				sub, err = d.WatchReleases(ctx, key)
				if err != nil {
					return
				}
				if g%2 == 0 {
					tok := string(rune('a'+g)) + string(rune('a'+i))
					if _, aerr := d.Acquire(ctx, req(key, tok, time.Minute)); aerr == nil {
						_ = d.Release(ctx, key, tok)
					}
				}
				sub.Close()
			}
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Errorf("WatchReleases: %v", err)
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestWatchReleasesAfterRestart restarts the server under a watcher: the
// shared pub/sub connection reconnects and subscribes again on its own.
func TestWatchReleasesAfterRestart(t *testing.T) {
	srv := redistest.Start(t, nil)
	d, client := newDriver(t, srv, nil)
	ctx := testutil.Context(t)
	key := t.Name()

	sub := watch(ctx, t, d, client, key)
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, "the subscription to come back after a restart", func() bool {
		m, err := client.PubSubNumSub(ctx, "dsync:{"+key+"}:released").Result()
		return err == nil && m["dsync:{"+key+"}:released"] > 0
	})
	cycle(ctx, t, d, client, key, "tok")
	receive(t, sub, "a release after the restart")
}

// cmdCalls is how many times the server ran command cmd since its
// statistics were last reset.
func cmdCalls(ctx context.Context, t *testing.T, client *goredis.Client, cmd string) int {
	t.Helper()
	stats, err := client.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	return redistest.CommandCalls(stats, cmd)
}

// TestNextAcquireKeepsSubscription: a process that meets contention on a
// key again and again subscribes to its release notices once (the line's
// subscription stays lingerFor after each Acquire), is still woken by
// every release, and unsubscribes once it stops asking.
func TestNextAcquireKeepsSubscription(t *testing.T) {
	ctx := testutil.Context(t)
	srv := redistest.Start(t, nil)
	client := srv.NewClient(t)
	key := testutil.UniqueKey(t)
	lockerOn := func() *locker.Locker {
		d, _ := newDriver(t, srv, nil)
		l, err := locker.New(testutil.NewBackend(t, d), key, &locker.Options{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	holder, waiter := lockerOn(), lockerOn()
	if err := client.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		held := testutil.MustAcquire(t, ctx, holder)
		got := make(chan dsync.Lease, 1)
		go func() {
			l, err := waiter.Acquire(ctx)
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		testutil.Eventually(t, 5*time.Second, "the waiter to be in the lock's line", func() bool {
			return client.ZCard(ctx, "dsync:{"+key+"}:line").Val() == 1
		})
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case l := <-got:
			if l == nil {
				return
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("acquisition %d: the waiter did not get the lock within 5s of its release", i+1)
		}
	}
	if n := cmdCalls(ctx, t, client, "subscribe"); n != 1 {
		t.Errorf("SUBSCRIBE ran %d times for three contended acquisitions in a row, want 1", n)
	}
	testutil.Eventually(t, 10*time.Second, "the subscription to end once the waiter stopped asking", func() bool {
		return numSub(ctx, t, client, key) == 0
	})
	if n := cmdCalls(ctx, t, client, "unsubscribe"); n != 1 {
		t.Errorf("UNSUBSCRIBE ran %d times, want 1", n)
	}
}
