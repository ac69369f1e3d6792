package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/dsync-dev/dsync/backends"
	"github.com/dsync-dev/dsync/backends/memory"
	"github.com/dsync-dev/dsync/internal/testenv/testutil"
)

func watch(t *testing.T, d *memory.Driver, key string) backends.Subscription {
	t.Helper()
	sub, err := d.WatchReleases(context.Background(), key)
	if err != nil {
		t.Fatalf("WatchReleases(%q): %v", key, err)
	}
	t.Cleanup(sub.Close)
	return sub
}

// pending reports whether sub has a notice waiting, and consumes it.
func pending(sub backends.Subscription) bool {
	select {
	case <-sub.C():
		return true
	default:
		return false
	}
}

func TestWatchRelease(t *testing.T) {
	ctx := context.Background()
	d, _ := newManual(t)
	sub, other := watch(t, d, "k"), watch(t, d, "other")
	testutil.MustGrant(t, ctx, d, req("k", "a"))
	if pending(sub) {
		t.Fatal("notice after Acquire")
	}
	if err := d.Release(ctx, "k", "b"); err == nil || pending(sub) {
		t.Fatalf("failed Release: err = %v, or it sent a notice", err)
	}
	if err := d.Release(ctx, "k", "a"); err != nil || !pending(sub) {
		t.Fatalf("Release: err = %v, or it sent no notice", err)
	}
	for _, token := range []string{"b", "c"} { // two releases coalesce into one notice
		testutil.MustGrant(t, ctx, d, req("k", token))
		if err := d.Release(ctx, "k", token); err != nil {
			t.Fatal(err)
		}
	}
	if !pending(sub) {
		t.Fatal("no notice after Release")
	}
	if pending(sub) {
		t.Fatal("two notices for coalesced releases")
	}
	if pending(other) {
		t.Fatal("notice on another key")
	}
}

func TestWatchWokenByClockAdvance(t *testing.T) {
	d, clk := newManual(t)
	sub := watch(t, d, "k")
	testutil.MustGrant(t, context.Background(), d, req("k", "a"))
	woken := make(chan struct{})
	go func() {
		defer close(woken)
		<-sub.C()
	}()
	clk.Advance(999 * time.Millisecond)
	select {
	case <-woken:
		t.Fatal("woken before expiry")
	case <-time.After(10 * time.Millisecond):
	}
	clk.Advance(time.Millisecond)
	select {
	case <-woken:
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not woken when its key expired under the manual clock")
	}
}

func TestWatchWokenBySet(t *testing.T) {
	d, clk := newManual(t)
	sub := watch(t, d, "k")
	testutil.MustGrant(t, context.Background(), d, req("k", "a"))
	clk.Set(epoch.Add(time.Hour))
	if !pending(sub) {
		t.Fatal("no notice after Set past expiry")
	}
}

func TestWatchWokenByExpiryOnAccess(t *testing.T) {
	d := memory.NewDriver(nil) // real clock
	defer d.Close()
	sub := watch(t, d, "k")
	testutil.MustGrant(t, context.Background(), d, backends.Request{Key: "k", Token: "a", TTL: time.Millisecond})
	time.Sleep(5 * time.Millisecond)
	if _, err := d.Holder(context.Background(), "k"); err == nil {
		t.Fatal("hold outlived its TTL")
	}
	if !pending(sub) {
		t.Fatal("no notice when expiry was observed")
	}
}

func TestWatchClose(t *testing.T) {
	ctx := context.Background()
	d, _ := newManual(t)
	sub, kept := watch(t, d, "k"), watch(t, d, "k")
	sub.Close()
	sub.Close()
	testutil.MustGrant(t, ctx, d, req("k", "a"))
	if err := d.Release(ctx, "k", "a"); err != nil {
		t.Fatal(err)
	}
	if pending(sub) {
		t.Fatal("notice after Close")
	}
	if !pending(kept) {
		t.Fatal("closing one subscription silenced another")
	}
}

func TestDriverCloseEndsSubscriptions(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore(nil)
	d1, d2 := memory.NewDriver(&memory.Options{Store: store}), memory.NewDriver(&memory.Options{Store: store})
	defer d2.Close()
	sub := watch(t, d1, "k")
	if err := d1.Close(); err != nil {
		t.Fatal(err)
	}
	if !pending(sub) {
		t.Fatal("no wake-up when the driver closed")
	}
	testutil.MustGrant(t, ctx, d2, req("k", "a"))
	if err := d2.Release(ctx, "k", "a"); err != nil {
		t.Fatal(err)
	}
	if pending(sub) {
		t.Fatal("notice on a closed driver's subscription")
	}
	sub.Close() // still idempotent after the driver closed it
}
